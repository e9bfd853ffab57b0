// Package gmailapi is the Gmail adapter: it implements relay.Provider with
// Google's client (google.golang.org/api/gmail/v1) and translates that
// client's errors into the relay's neutral ones (*relay.ProviderError,
// relay.ErrMessageNotFound, *relay.NotReachedError), so no package above
// it depends on the client library. It imports relay; relay never imports
// it.
package gmailapi

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/google"
	"google.golang.org/api/gmail/v1"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/option"

	"github.com/gmailrelay/gmailrelay/relay"
)

// Scopes the relay asks for: send, and readonly for rfc822msgid: search
// (the gmail.metadata scope forbids the q parameter).
var Scopes = []string{gmail.GmailSendScope, gmail.GmailReadonlyScope}

// Config says how to reach Gmail.
type Config struct {
	// Endpoint is the base URL of a Gmail-compatible API ("" = Google's).
	Endpoint string
	// CredentialsJSON is an authorized-user JSON (with refresh token) or a
	// service-account key. Empty means no authentication (emulator).
	CredentialsJSON []byte
	// Subject is the user a service account acts for (domain-wide delegation).
	Subject string
	// HTTPClient, when set, is used as the base transport (tests).
	HTTPClient *http.Client
	// Now is the clock that turns Gmail's retry instants (an HTTP-date
	// Retry-After, "Retry after <RFC 3339>" in a message) into durations;
	// nil means time.Now.
	Now func() time.Time
}

// Client is the relay.Provider backed by google.golang.org/api/gmail/v1.
type Client struct {
	svc *gmail.Service
	now func() time.Time
	// tokenErr holds the last failed token refresh; see TokenError.
	tokenErr atomic.Pointer[string]
	// clock bounds Gmail's clock against now; see ClockOffset.
	clock gmailClock
}

var _ relay.Provider = (*Client)(nil)

// New builds the Gmail client. It never calls Gmail.
func New(ctx context.Context, cfg Config) (*Client, error) {
	g := &Client{now: cfg.Now}
	if g.now == nil {
		g.now = time.Now
	}
	var opts []option.ClientOption
	if cfg.Endpoint != "" {
		ep := cfg.Endpoint
		if !strings.HasSuffix(ep, "/") {
			ep += "/"
		}
		opts = append(opts, option.WithEndpoint(ep))
	}
	var hc *http.Client
	switch {
	case len(cfg.CredentialsJSON) > 0:
		ts, err := tokenSource(ctx, cfg.CredentialsJSON, cfg.Subject)
		if err != nil {
			return nil, err
		}
		base := PooledTransport()
		if cfg.HTTPClient != nil && cfg.HTTPClient.Transport != nil {
			base = cfg.HTTPClient.Transport
		}
		hc = &http.Client{Transport: &oauth2.Transport{Source: &watchedSource{ts: ts, g: g}, Base: base}}
	case cfg.HTTPClient != nil:
		c := *cfg.HTTPClient
		hc = &c
	default:
		hc = &http.Client{Transport: PooledTransport()}
	}
	base := hc.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	hc.Transport = &datedTransport{base: base, g: g}
	opts = append(opts, option.WithHTTPClient(hc))
	svc, err := gmail.NewService(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("gmail client: %w", err)
	}
	g.svc = svc
	return g, nil
}

// PooledTransport is http.DefaultTransport keeping enough idle connections
// per host for a busy relay (the default keeps 2, so concurrent sends to a
// Gmail-compatible endpoint over HTTP/1.1 would reconnect every round),
// and asking for no gzip: Gmail's answers to the relay's calls are a few
// hundred bytes to a few KB of JSON (a send's Message, a page of ids, one
// header), not worth compressing on either side.
func PooledTransport() http.RoundTripper {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 128
	t.MaxIdleConns = 256
	t.DisableCompression = true
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
	g  *Client
}

func (w *watchedSource) Token() (*oauth2.Token, error) {
	t, err := w.ts.Token()
	if err != nil {
		msg := err.Error()
		w.g.tokenErr.Store(&msg)
		return nil, &relay.NotReachedError{Err: fmt.Errorf("%w: %w", relay.ErrTokenRefresh, err)}
	}
	w.g.tokenErr.Store(nil)
	return t, nil
}

// TokenError returns the last token refresh failure, or "" when the last
// refresh worked (or none was needed).
func (g *Client) TokenError() string {
	if p := g.tokenErr.Load(); p != nil {
		return *p
	}
	return ""
}

// traced returns a context that records whether the request was written,
// and the call, whose mark translates the call's error: Google's HTTP error answer
// becomes a *relay.ProviderError, and an error before the request was
// written a *relay.NotReachedError.
//
// "Written" starts with the headers (WroteHeaders), not the whole request
// (WroteRequest): over HTTP/2 the transport returns from a call whose
// deadline fired without waiting for the goroutine that writes the body and
// then reports WroteRequest, so a request Gmail received whole could still
// look unwritten, and be sent again as "never reached". A call cut off
// after its headers is taken as possibly received: ambiguous, searched
// before any resend.
func (g *Client) traced(ctx context.Context) (context.Context, *call) {
	c := &call{g: g}
	c.trace.WroteHeaders = c.wroteHeaders
	c.trace.WroteRequest = c.wroteRequest
	return httptrace.WithClientTrace(ctx, &c.trace), c
}

// call is one Gmail call's trace and error translation.
type call struct {
	g     *Client
	wrote atomic.Bool
	trace httptrace.ClientTrace
}

func (c *call) wroteHeaders()                           { c.wrote.Store(true) }
func (c *call) wroteRequest(httptrace.WroteRequestInfo) { c.wrote.Store(true) }

func (c *call) mark(err error) error {
	if err == nil {
		return nil
	}
	var nr *relay.NotReachedError
	if errors.As(err, &nr) {
		return err // already marked (token refresh)
	}
	var gerr *googleapi.Error
	if errors.As(err, &gerr) {
		return providerError(err, gerr, c.g.now()) // an HTTP answer
	}
	if c.wrote.Load() {
		return err // a timeout or a reset after the write
	}
	return &relay.NotReachedError{Err: err}
}

// providerError translates Google's error answer g (found in err) into the
// relay's neutral type, keeping err as the cause. now is when the answer
// came: the retry time is the Retry-After header, else the "Retry after
// <RFC 3339>" of Gmail's message (its quota answers carry only that), as a
// duration from now.
func providerError(err error, g *googleapi.Error, now time.Time) *relay.ProviderError {
	p := &relay.ProviderError{Status: g.Code, Message: g.Message, Err: err}
	if len(g.Errors) > 0 {
		p.Reason = g.Errors[0].Reason
		if p.Message == "" {
			p.Message = g.Errors[0].Message
		}
	}
	p.RetryAfter = retryAfter(g.Header, now)
	if p.RetryAfter == 0 {
		p.RetryAfter = retryFromText(now, g.Message, g.Errors)
	}
	return p
}

// retryFromText reads "Retry after <RFC 3339>" from the answer's message
// or, failing that, from one of its errors' messages; 0 when none has a
// retry time in the future.
func retryFromText(now time.Time, msg string, items []googleapi.ErrorItem) time.Duration {
	msgs := []string{msg}
	for _, it := range items {
		msgs = append(msgs, it.Message)
	}
	for _, m := range msgs {
		if at, ok := relay.RetryAtFromMessage(m); ok {
			if d := at.Sub(now); d > 0 {
				return d
			}
			return 0
		}
	}
	return 0
}

// retryAfter reads a Retry-After header in seconds or as an HTTP date.
func retryAfter(h http.Header, now time.Time) time.Duration {
	if h == nil {
		return 0
	}
	v := h.Get("Retry-After")
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(v); err == nil && s >= 0 {
		// Clamped so that a huge value cannot wrap to a negative pause.
		return time.Duration(min(int64(s), math.MaxInt64/int64(time.Second))) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return d
		}
	}
	return 0
}

// Send implements relay.Provider, through Google's client on both of
// Gmail's send paths. A message up to RawLimit bytes is sent as the JSON
// Message resource with the raw field (POST
// /gmail/v1/users/{userId}/messages/send); a larger one through Gmail's
// upload endpoint (/upload/gmail/v1/users/{userId}/messages/send,
// uploadType=multipart), which takes messages up to Gmail's 35 MB.
//
// The split is for cost: the client streams an upload's body through a
// pipe and a goroutine as a chunked request of many small writes, and the
// raw path spares Gmail the multipart parsing. ChunkSize(0) makes the
// client stream a large message into the request instead of copying it
// into a chunk buffer (one copy of the message in memory, not two), and
// keeps the upload a single request (a resumable upload would be several).
func (g *Client) Send(ctx context.Context, mailbox string, raw []byte, threadID string) (relay.SentMessage, error) {
	ctx, tr := g.traced(ctx)
	msg := &gmail.Message{ThreadId: threadID}
	call := g.svc.Users.Messages.Send(mailbox, msg)
	if len(raw) <= RawLimit {
		msg.Raw = base64.URLEncoding.EncodeToString(raw)
	} else {
		// The reader's type is hidden: given a *bytes.Reader, Google's
		// client sets the request's GetBody, and with it Go's HTTP/2
		// transport sends the whole upload again by itself after some
		// stream errors (PROTOCOL_ERROR), even once Gmail has received it:
		// one attempt, two deliveries, one effect line.
		call = call.Media(struct{ io.Reader }{bytes.NewReader(raw)}, googleapi.ContentType("message/rfc822"), googleapi.ChunkSize(0))
	}
	m, err := call.Context(ctx).Do()
	if err != nil {
		return relay.SentMessage{}, tr.mark(err)
	}
	return relay.SentMessage{ID: m.Id, ThreadID: m.ThreadId, LabelIDs: m.LabelIds}, nil
}

// RawLimit is the largest message Send sends in the JSON raw field (as
// base64url, a third larger); larger ones go through the upload endpoint.
// It is far below the metadata path's own limit.
const RawLimit = 256 << 10

// List implements relay.Provider. Every call sends includeSpamTrash=true:
// a Sent copy a user trashed still proves the send (docs/design.md,
// "Trash counts").
func (g *Client) List(ctx context.Context, mailbox, q string, labelIDs []string, pageToken string, max int64) (relay.ListPage, error) {
	ctx, tr := g.traced(ctx)
	call := g.svc.Users.Messages.List(mailbox).Q(q).IncludeSpamTrash(true).Context(ctx)
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
		return relay.ListPage{}, tr.mark(err)
	}
	p := relay.ListPage{NextPageToken: r.NextPageToken, SizeEstimate: r.ResultSizeEstimate}
	for _, m := range r.Messages {
		p.IDs = append(p.IDs, m.Id)
	}
	return p, nil
}

// GetHeader implements relay.Provider. A 404 wraps relay.ErrMessageNotFound.
func (g *Client) GetHeader(ctx context.Context, mailbox, id string) (relay.StoredHeader, error) {
	ctx, tr := g.traced(ctx)
	m, err := g.svc.Users.Messages.Get(mailbox, id).Format("metadata").MetadataHeaders("Message-ID", relay.JobHeader, "From").Context(ctx).Do()
	if err != nil {
		err = tr.mark(err)
		var p *relay.ProviderError
		if errors.As(err, &p) && p.Status == http.StatusNotFound {
			return relay.StoredHeader{}, fmt.Errorf("%w: %w", relay.ErrMessageNotFound, err)
		}
		return relay.StoredHeader{}, err
	}
	h := relay.StoredHeader{ID: m.Id, LabelIDs: m.LabelIds}
	if m.Payload != nil {
		for _, hd := range m.Payload.Headers {
			if strings.EqualFold(hd.Name, relay.JobHeader) {
				h.Job = strings.TrimSpace(hd.Value)
			}
			if strings.EqualFold(hd.Name, "From") {
				h.From = hd.Value
			}
			if strings.EqualFold(hd.Name, "Message-ID") {
				if id, err := relay.NormalizeMessageID(hd.Value); err == nil {
					h.MessageID = id
				} else {
					h.MessageID = hd.Value
				}
			}
		}
	}
	return h, nil
}

// SendAs implements relay.Provider: users.settings.sendAs.list (1 quota
// unit; the gmail.readonly scope the relay asks for allows it).
func (g *Client) SendAs(ctx context.Context, mailbox string) ([]relay.SendAsAddress, error) {
	ctx, tr := g.traced(ctx)
	r, err := g.svc.Users.Settings.SendAs.List(mailbox).Context(ctx).Do()
	if err != nil {
		return nil, tr.mark(err)
	}
	out := make([]relay.SendAsAddress, 0, len(r.SendAs))
	for _, a := range r.SendAs {
		out = append(out, relay.SendAsAddress{Email: a.SendAsEmail, Primary: a.IsPrimary, Default: a.IsDefault, Status: a.VerificationStatus})
	}
	return out, nil
}
