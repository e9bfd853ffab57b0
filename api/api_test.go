package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmailrelay/gmailrelay/acceptlog"
	"github.com/gmailrelay/gmailrelay/api"
	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/internal/testenv"
	"github.com/gmailrelay/gmailrelay/policy"
	"github.com/gmailrelay/gmailrelay/relay"
	"github.com/gmailrelay/gmailrelay/retention"
	"github.com/gmailrelay/gmailrelay/sweeper"
)

const (
	apiToken   = "api-secret"
	adminToken = "admin-secret"
	domain     = "inbound.example.com"
)

// env is the shared testenv harness (a relay over the Gmail emulator and
// a log) with a sweeper, a retention pass and the API on a listener.
type env struct {
	*testenv.Env
	t   *testing.T
	sw  *sweeper.Sweeper
	ret *retention.Pass
	url string
}

type envOpts struct {
	faultHeader bool
	quota       int
	logs        io.Writer // nil: no logs
	retention   time.Duration
	emuQuota    int // the emulator's per-minute quota; 0: Gmail's default
	configure   func(*api.Config)
	// mailboxes, when set, is a policy's mailboxes: section; the emulator
	// serves each mailbox's address as an account, and each mailbox's
	// Gmail calls are observed under its name.
	mailboxes string
	// wrapMailbox, when set, wraps a mailbox's Gmail client (a broken
	// credential, for one).
	wrapMailbox func(name string, p relay.Provider) relay.MailboxConfig
}

func newEnv(t *testing.T, o envOpts) *env {
	t.Helper()
	pol := testenv.DefaultPolicy()
	emu := gmailfake.Options{QuotaPerMinute: o.emuQuota}
	if o.mailboxes != "" {
		var err error
		if pol, err = policy.Parse([]byte(o.mailboxes)); err != nil {
			t.Fatalf("policy: %v", err)
		}
		for _, m := range pol.MailboxList() {
			emu.Accounts = append(emu.Accounts, m.Address)
		}
	}
	pol.MsgIDDomain = domain
	metrics := api.NewMetrics()
	logger := zerolog.Nop()
	if o.logs != nil {
		logger = zerolog.New(o.logs).Level(zerolog.DebugLevel)
	}
	te := testenv.New(t, testenv.Options{Emulator: emu, Policy: pol,
		QuotaPerMinute: o.quota, Logger: &logger, Configure: func(c *relay.Config) {
			if o.mailboxes != "" {
				c.Mailboxes = map[string]relay.MailboxConfig{}
				for _, m := range pol.MailboxList() {
					mc := relay.MailboxConfig{Provider: c.Provider}
					if o.wrapMailbox != nil {
						mc = o.wrapMailbox(m.Name, c.Provider)
					}
					mc.Provider = metrics.MailboxProvider(mc.Provider, m.Name)
					c.Mailboxes[m.Name] = mc
				}
			}
			c.Provider, c.Observer = metrics.Provider(c.Provider), metrics
		}})
	e := &env{Env: te, t: t}
	e.sw = sweeper.New(sweeper.ConfigFor(e.Service))
	e.ret = retention.New(retention.Config{Log: e.Log, Retention: o.retention, Now: e.Clock.Now})
	cfg := api.Config{Service: e.Service, Sweeper: e.sw, Retention: e.ret, APIToken: apiToken, AdminToken: adminToken,
		MsgIDDomain: domain, FaultHeader: o.faultHeader, Mode: "sandbox", Metrics: metrics, Logger: logger}
	if o.configure != nil {
		o.configure(&cfg)
	}
	srv := httptest.NewServer(api.New(cfg))
	t.Cleanup(srv.Close)
	e.url = srv.URL
	return e
}

type reply struct {
	status int
	header http.Header
	body   map[string]any
	raw    []byte
}

func (e *env) do(method, path, token string, body any, headers ...string) (reply, error) {
	e.t.Helper()
	var rd io.Reader
	ct := "application/json"
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd, ct = bytes.NewReader(b), "message/rfc822"
	default:
		data, _ := json.Marshal(b)
		rd = bytes.NewReader(data)
	}
	req, _ := http.NewRequest(method, e.url+path, rd)
	if rd != nil {
		req.Header.Set("Content-Type", ct)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	r := reply{status: resp.StatusCode, header: resp.Header}
	r.raw, _ = io.ReadAll(resp.Body)
	_ = json.Unmarshal(r.raw, &r.body)
	return r, nil
}

func (e *env) must(method, path, token string, body any, headers ...string) reply {
	e.t.Helper()
	r, err := e.do(method, path, token, body, headers...)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	return r
}

func (e *env) job(id string) (acceptlog.Job, []acceptlog.Line) {
	e.t.Helper()
	j, err := e.Log.Get(context.Background(), id)
	if err != nil {
		e.t.Fatalf("job %s: %v", id, err)
	}
	lines, _ := e.Log.JobLines(context.Background(), id)
	return j, lines
}

func effects(lines []acceptlog.Line) int {
	n := 0
	for _, l := range lines {
		if l.Kind == acceptlog.KindEffect {
			n++
		}
	}
	return n
}

// wantOneEffect checks that the emulator holds one message with Message-ID
// id and that its job has exactly one effect line.
func (e *env) wantOneEffect(id string) {
	e.t.Helper()
	if got := e.Emulator.Count(id); got != 1 {
		e.t.Errorf("emulator holds %d, want 1", got)
	}
	if _, lines := e.job(id); effects(lines) != 1 {
		e.t.Errorf("effect lines = %d, want 1", effects(lines))
	}
}

func sendBody(key string) map[string]any {
	return map[string]any{"key": key, "to": "customer@example.org", "subject": "Shipped", "body": "Your order shipped."}
}

func TestEmulatorSendAndReplay(t *testing.T) {
	e := newEnv(t, envOpts{})
	first := e.must("POST", "/v1/send", apiToken, sendBody("cus_1:order.shipped:ord_1"))
	if first.status != 200 || first.body["state"] != "sent" || first.body["gmail_id"] == "" {
		t.Fatalf("first: %d %s", first.status, first.raw)
	}
	if first.header.Get("Idempotent-Replayed") != "" {
		t.Errorf("first answer carries Idempotent-Replayed")
	}
	second := e.must("POST", "/v1/send", apiToken, sendBody("cus_1:order.shipped:ord_1"))
	if second.status != 200 || second.header.Get("Idempotent-Replayed") != "true" || second.body["gmail_id"] != first.body["gmail_id"] {
		t.Fatalf("second: %d %v %s", second.status, second.header, second.raw)
	}
	id := relay.MessageID("cus_1:order.shipped:ord_1", domain)
	if first.body["message_id"] != id {
		t.Errorf("message_id = %v, want %s", first.body["message_id"], id)
	}
	e.wantOneEffect(id)
}

func TestEmulatorKeySourcesGiveSameMessageID(t *testing.T) {
	e := newEnv(t, envOpts{})
	want := relay.MessageID("cus_9:order.shipped:ord_9", domain)
	a := e.must("POST", "/v1/send", apiToken, sendBody("cus_9:order.shipped:ord_9"))
	b := e.must("POST", "/v1/send", apiToken, map[string]any{"job": map[string]string{"customer_id": "cus_9", "event_type": "order.shipped", "order_id": "ord_9"},
		"to": []string{"customer@example.org"}, "subject": "Shipped", "text": "Your order shipped."})
	body := sendBody("")
	delete(body, "key")
	c := e.must("POST", "/v1/send", apiToken, body, "idempotency-key", "cus_9:order.shipped:ord_9")
	for i, r := range []reply{a, b, c} {
		if r.body["message_id"] != want || r.status != 200 {
			t.Errorf("answer %d: %d %s, want 200 with %s", i, r.status, r.raw, want)
		}
	}
	if got := e.Emulator.Count(want); got != 1 {
		t.Errorf("emulator holds %d, want 1", got)
	}
}

func TestAuth(t *testing.T) {
	e := newEnv(t, envOpts{})
	tests := []struct {
		method, path, token string
		want                int
	}{
		{"GET", "/v1/jobs", "", 401},
		{"GET", "/v1/jobs", "wrong", 401},
		{"GET", "/v1/jobs", apiToken, 200},
		{"GET", "/v1/jobs", adminToken, 200},
		{"GET", "/admin/faults", apiToken, 403},
		{"GET", "/admin/faults", adminToken, 200},
		{"POST", "/admin/sweep", apiToken, 403},
		{"GET", "/healthz", "", 200},
	}
	for _, tt := range tests {
		r := e.must(tt.method, tt.path, tt.token, nil)
		if r.status != tt.want {
			t.Errorf("%s %s with %q: %d, want %d", tt.method, tt.path, tt.token, r.status, tt.want)
		}
	}
}

func TestEmulatorBadInputIs400AndSendsNothing(t *testing.T) {
	e := newEnv(t, envOpts{})
	tests := []struct {
		name  string
		body  any
		field string
	}{
		{"CRLF in subject", map[string]any{"key": "k1", "to": "a@example.org", "subject": "hi\r\nBcc: victim@example.org", "text": "x"}, "subject"},
		{"LF in to", map[string]any{"key": "k2", "to": "a@example.org\nBcc: v@example.org", "text": "x"}, "to"},
		{"CR in from", map[string]any{"key": "k3", "from": "me@example.org\rX: y", "to": "a@example.org", "text": "x"}, "from"},
		{"CRLF in display name", map[string]any{"key": "k4", "to": "\"Eve\r\nBcc: v@example.org\" <a@example.org>", "text": "x"}, "to"},
		{"CRLF in header value", map[string]any{"key": "k5", "to": "a@example.org", "text": "x", "headers": map[string]string{"X-Tag": "a\r\nBcc: v@example.org"}}, "headers"},
		{"bad header name", map[string]any{"key": "k6", "to": "a@example.org", "text": "x", "headers": map[string]string{"X-Bad\r\nBcc": "v"}}, "headers"},
		{"no key", map[string]any{"to": "a@example.org", "text": "x"}, "key"},
		{"no recipient", map[string]any{"key": "k7", "text": "x"}, "to"},
		{"malformed address", map[string]any{"key": "k8", "to": "not an address", "text": "x"}, "to"},
		{"unknown channel", map[string]any{"key": "k9", "to": "a@example.org", "text": "x", "channel": "nope"}, "channel"},
		{"not JSON", "{", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := e.must("POST", "/v1/send", apiToken, tt.body)
			if r.status != 400 {
				t.Fatalf("status %d %s, want 400", r.status, r.raw)
			}
			errObj, _ := r.body["error"].(map[string]any)
			if errObj == nil || errObj["code"] != "invalid_argument" || errObj["message"] == "" {
				t.Errorf("error body %s, want invalid_argument with a message", r.raw)
			}
			if tt.field != "" && !strings.HasPrefix(fmt.Sprint(errObj["field"]), tt.field) {
				t.Errorf("field = %v, want %s", errObj["field"], tt.field)
			}
		})
	}
	if got := e.Emulator.Count(""); got != 0 {
		t.Errorf("emulator holds %d messages, want 0", got)
	}
}

func TestEmulatorSameKeyDifferentBodyIs422(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.must("POST", "/v1/send", apiToken, sendBody("k"))
	b := sendBody("k")
	b["body"] = "something else"
	if r := e.must("POST", "/v1/send", apiToken, b); r.status != 422 {
		t.Errorf("status %d %s, want 422", r.status, r.raw)
	}
}
