package gmailapi

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"

	"github.com/gmailrelay/gmailrelay/relay"
)

// Profile implements relay.HistoryReader: users.getProfile (1 quota unit).
func (g *Client) Profile(ctx context.Context, mailbox string) (uint64, error) {
	ctx, tr := g.traced(ctx)
	p, err := g.svc.Users.GetProfile(mailbox).Context(ctx).Do()
	if err != nil {
		return 0, tr.mark(err)
	}
	return p.HistoryId, nil
}

// History implements relay.HistoryReader: users.history.list of the
// messages added to label after start (2 quota units a page of up to
// 500). Gmail's 404 for a start it no longer keeps wraps
// relay.ErrHistoryExpired.
func (g *Client) History(ctx context.Context, mailbox string, start uint64, label, pageToken string) (relay.HistoryPage, error) {
	ctx, tr := g.traced(ctx)
	call := g.svc.Users.History.List(mailbox).StartHistoryId(start).HistoryTypes("messageAdded").MaxResults(500).Context(ctx)
	if label != "" {
		call = call.LabelId(label)
	}
	if pageToken != "" {
		call = call.PageToken(pageToken)
	}
	r, err := call.Do()
	if err != nil {
		err = tr.mark(err)
		var p *relay.ProviderError
		if errors.As(err, &p) && p.Status == http.StatusNotFound {
			return relay.HistoryPage{}, fmt.Errorf("%w: %w", relay.ErrHistoryExpired, err)
		}
		return relay.HistoryPage{}, err
	}
	page := relay.HistoryPage{NextPageToken: r.NextPageToken, HistoryID: r.HistoryId}
	for _, h := range r.History {
		rec := relay.HistoryRecord{ID: h.Id}
		for _, a := range h.MessagesAdded {
			if a.Message == nil {
				continue
			}
			rec.Added = append(rec.Added, relay.HistoryAdded{ID: a.Message.Id, ThreadID: a.Message.ThreadId, LabelIDs: a.Message.LabelIds})
		}
		page.Records = append(page.Records, rec)
	}
	return page, nil
}

var _ relay.HistoryReader = (*Client)(nil)

// GetRaw implements relay.Provider: messages.get, format raw (5 quota
// units), the message's bytes decoded from Gmail's base64url. A 404 wraps
// relay.ErrMessageNotFound.
func (g *Client) GetRaw(ctx context.Context, mailbox, id string) ([]byte, error) {
	ctx, tr := g.traced(ctx)
	m, err := g.svc.Users.Messages.Get(mailbox, id).Format("raw").Context(ctx).Do()
	if err != nil {
		err = tr.mark(err)
		var p *relay.ProviderError
		if errors.As(err, &p) && p.Status == http.StatusNotFound {
			return nil, fmt.Errorf("%w: %w", relay.ErrMessageNotFound, err)
		}
		return nil, err
	}
	raw, err := base64.URLEncoding.DecodeString(m.Raw)
	if err != nil {
		// Gmail pads; a client that does not is read too.
		if raw, err = base64.RawURLEncoding.DecodeString(m.Raw); err != nil {
			return nil, fmt.Errorf("gmail: message %s: raw is not base64url: %w", id, err)
		}
	}
	return raw, nil
}
