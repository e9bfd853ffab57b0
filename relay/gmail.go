package relay

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync/atomic"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/google"
	"google.golang.org/api/gmail/v1"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/option"
)

// Gmail quota costs, in Gmail's quota units.
const (
	UnitsSend = 100
	UnitsList = 5
	UnitsGet  = 5
)

// Scopes the relay asks for: send, and readonly for rfc822msgid: search
// (the gmail.metadata scope forbids the q parameter).
var Scopes = []string{gmail.GmailSendScope, gmail.GmailReadonlyScope}

// mediaThreshold is the size above which a message is sent through the
// upload path instead of the JSON raw field.
const mediaThreshold = 4 << 20

// SentMessage is Gmail's answer to a send.
type SentMessage struct {
	ID       string
	ThreadID string
	LabelIDs []string
}

// ListPage is one page of a messages.list answer.
type ListPage struct {
	IDs           []string
	NextPageToken string
	SizeEstimate  int64
}

// StoredHeader is what messages.get (format metadata) says of a message.
type StoredHeader struct {
	ID        string
	MessageID string // the stored Message-ID header, normalised with <>
	LabelIDs  []string
}

// Provider is the relay's view of Gmail. Every method takes the mailbox
// ("me" or an address) and returns Gmail's error as it came, wrapped in a
// *NotReachedError when the request never left this process.
type Provider interface {
	// Send hands a raw RFC 5322 message to users.messages.send.
	Send(ctx context.Context, mailbox string, raw []byte, threadID string) (SentMessage, error)
	// List runs users.messages.list with q and labelIDs; an empty result is
	// an empty page, not an error.
	List(ctx context.Context, mailbox, q string, labelIDs []string, pageToken string, max int64) (ListPage, error)
	// GetHeader reads one message's Message-ID (messages.get, format
	// metadata). A missing message is a *googleapi.Error with Code 404.
	GetHeader(ctx context.Context, mailbox, id string) (StoredHeader, error)
}

// NotReachedError marks an error that happened before the request was
// written to the network: Gmail cannot have acted on it.
type NotReachedError struct{ Err error }

// Error implements error.
func (e *NotReachedError) Error() string { return "gmail not reached: " + e.Err.Error() }

// Unwrap returns the network or token error.
func (e *NotReachedError) Unwrap() error { return e.Err }

// ErrTokenRefresh marks a failed OAuth token refresh: Gmail was not
// reached, and an operator must look at the credentials.
var ErrTokenRefresh = errors.New("token refresh failed")

// GmailConfig says how to reach Gmail.
type GmailConfig struct {
	// Endpoint is the base URL of a Gmail-compatible API ("" = Google's).
	Endpoint string
	// CredentialsJSON is an authorized-user JSON (with refresh token) or a
	// service-account key. Empty means no authentication (emulator).
	CredentialsJSON []byte
	// Subject is the user a service account acts for (domain-wide delegation).
	Subject string
	// HTTPClient, when set, is used as the base transport (tests).
	HTTPClient *http.Client
}

// Gmail is the Provider backed by google.golang.org/api/gmail/v1.
type Gmail struct {
	svc *gmail.Service
	// tokenErrors counts failed token refreshes; see TokenHealthy.
	tokenErr atomic.Pointer[string]
}

// NewGmail builds the Gmail client. It never calls Gmail.
func NewGmail(ctx context.Context, cfg GmailConfig) (*Gmail, error) {
	g := &Gmail{}
	var opts []option.ClientOption
	if cfg.Endpoint != "" {
		ep := cfg.Endpoint
		if !strings.HasSuffix(ep, "/") {
			ep += "/"
		}
		opts = append(opts, option.WithEndpoint(ep))
	}
	switch {
	case len(cfg.CredentialsJSON) > 0:
		ts, err := tokenSource(ctx, cfg.CredentialsJSON, cfg.Subject)
		if err != nil {
			return nil, err
		}
		base := pooledTransport()
		if cfg.HTTPClient != nil && cfg.HTTPClient.Transport != nil {
			base = cfg.HTTPClient.Transport
		}
		client := &http.Client{Transport: &oauth2.Transport{Source: &watchedSource{ts: ts, g: g}, Base: base}}
		opts = append(opts, option.WithHTTPClient(client))
	case cfg.HTTPClient != nil:
		opts = append(opts, option.WithHTTPClient(cfg.HTTPClient))
	default:
		opts = append(opts, option.WithHTTPClient(&http.Client{Transport: pooledTransport()}))
	}
	svc, err := gmail.NewService(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("gmail client: %w", err)
	}
	g.svc = svc
	return g, nil
}

// pooledTransport is http.DefaultTransport keeping enough idle connections
// per host for a busy relay (the default keeps 2, so concurrent sends to a
// Gmail-compatible endpoint over HTTP/1.1 would reconnect every round).
func pooledTransport() http.RoundTripper {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 128
	t.MaxIdleConns = 256
	return t
}

// tokenSource builds an OAuth2 token source from an authorized-user or
// service-account JSON; only those two types are accepted.
func tokenSource(ctx context.Context, data []byte, subject string) (oauth2.TokenSource, error) {
	var f struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("credentials: not JSON: %w", err)
	}
	var typ google.CredentialsType
	switch f.Type {
	case "authorized_user":
		typ = google.AuthorizedUser
		if subject != "" {
			return nil, errors.New("credentials: --subject needs a service account, not an authorized-user token")
		}
	case "service_account":
		typ = google.ServiceAccount
	default:
		return nil, fmt.Errorf("credentials: type %q is not supported (want authorized_user or service_account)", f.Type)
	}
	creds, err := google.CredentialsFromJSONWithTypeAndParams(ctx, data, typ, google.CredentialsParams{Scopes: Scopes, Subject: subject})
	if err != nil {
		return nil, fmt.Errorf("credentials: %w", err)
	}
	return creds.TokenSource, nil
}

// watchedSource remembers the last token refresh failure so /readyz can
// report it instead of sends failing silently.
type watchedSource struct {
	ts oauth2.TokenSource
	g  *Gmail
}

func (w *watchedSource) Token() (*oauth2.Token, error) {
	t, err := w.ts.Token()
	if err != nil {
		msg := err.Error()
		w.g.tokenErr.Store(&msg)
		return nil, &NotReachedError{Err: fmt.Errorf("%w: %w", ErrTokenRefresh, err)}
	}
	w.g.tokenErr.Store(nil)
	return t, nil
}

// TokenError returns the last token refresh failure, or "" when the last
// refresh worked (or none was needed).
func (g *Gmail) TokenError() string {
	if p := g.tokenErr.Load(); p != nil {
		return *p
	}
	return ""
}

// traced returns a context that records whether the request was written,
// and a func that wraps an error as *NotReachedError when it was not.
func traced(ctx context.Context) (context.Context, func(error) error) {
	var wrote atomic.Bool
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteRequest: func(httptrace.WroteRequestInfo) { wrote.Store(true) },
	})
	return ctx, func(err error) error {
		if err == nil || wrote.Load() {
			return err
		}
		var gerr *googleapi.Error
		var nr *NotReachedError
		if errors.As(err, &gerr) || errors.As(err, &nr) {
			return err // an HTTP answer, or already marked
		}
		return &NotReachedError{Err: err}
	}
}

// Send implements Provider.
func (g *Gmail) Send(ctx context.Context, mailbox string, raw []byte, threadID string) (SentMessage, error) {
	ctx, mark := traced(ctx)
	msg := &gmail.Message{ThreadId: threadID}
	call := g.svc.Users.Messages.Send(mailbox, msg)
	if len(raw) > mediaThreshold {
		call = call.Media(bytes.NewReader(raw), googleapi.ContentType("message/rfc822"), googleapi.ChunkSize(MaxMessageBytes+1<<20))
	} else {
		msg.Raw = base64.URLEncoding.EncodeToString(raw)
	}
	m, err := call.Context(ctx).Do()
	if err != nil {
		return SentMessage{}, mark(err)
	}
	return SentMessage{ID: m.Id, ThreadID: m.ThreadId, LabelIDs: m.LabelIds}, nil
}

// List implements Provider.
func (g *Gmail) List(ctx context.Context, mailbox, q string, labelIDs []string, pageToken string, max int64) (ListPage, error) {
	ctx, mark := traced(ctx)
	call := g.svc.Users.Messages.List(mailbox).Q(q).Context(ctx)
	if len(labelIDs) > 0 {
		call = call.LabelIds(labelIDs...)
	}
	if pageToken != "" {
		call = call.PageToken(pageToken)
	}
	if max > 0 {
		call = call.MaxResults(max)
	}
	r, err := call.Do()
	if err != nil {
		return ListPage{}, mark(err)
	}
	p := ListPage{NextPageToken: r.NextPageToken, SizeEstimate: r.ResultSizeEstimate}
	for _, m := range r.Messages {
		p.IDs = append(p.IDs, m.Id)
	}
	return p, nil
}

// GetHeader implements Provider.
func (g *Gmail) GetHeader(ctx context.Context, mailbox, id string) (StoredHeader, error) {
	ctx, mark := traced(ctx)
	m, err := g.svc.Users.Messages.Get(mailbox, id).Format("metadata").MetadataHeaders("Message-ID").Context(ctx).Do()
	if err != nil {
		return StoredHeader{}, mark(err)
	}
	h := StoredHeader{ID: m.Id, LabelIDs: m.LabelIds}
	if m.Payload != nil {
		for _, hd := range m.Payload.Headers {
			if strings.EqualFold(hd.Name, "Message-ID") {
				if id, err := NormalizeMessageID(hd.Value); err == nil {
					h.MessageID = id
				} else {
					h.MessageID = hd.Value
				}
			}
		}
	}
	return h, nil
}
