package api_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/rs/zerolog"
	"google.golang.org/api/gmail/v1"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/option"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/api"
	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/internal/testenv"
	"github.com/gmailrelay/gmailrelay/policy"
	"github.com/gmailrelay/gmailrelay/relay"
	"github.com/gmailrelay/gmailrelay/retention"
	"github.com/gmailrelay/gmailrelay/sweeper"
)

const (
	apiToken   = "api-secret-token-0123"
	adminToken = "admin-secret-token-0123"
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
	// policy, when set, changes the policy before the relay starts.
	policy func(*policy.Policy)
	// bodyRead, when set, sees every request body's running total after
	// each read (api.SetOnBodyRead).
	bodyRead func(int64)
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
	if o.policy != nil {
		o.policy(pol)
	}
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
	e.sw = sweeper.New(e.SweeperConfig())
	e.ret = retention.New(retention.Config{Log: e.Log, Retention: o.retention, Now: e.Clock.Now})
	cfg := api.Config{Relay: e.Service, Log: e.Log, Policy: e.Policy, Faults: e.Faults, Now: e.Clock.Now, Sweeper: e.sw, Retention: e.ret, APIToken: apiToken, AdminToken: adminToken,
		MsgIDDomain: domain, FaultHeader: o.faultHeader, Mode: "sandbox", Metrics: metrics, Logger: logger}
	if o.configure != nil {
		o.configure(&cfg)
	}
	h := api.New(cfg)
	if o.bodyRead != nil {
		api.SetOnBodyRead(h, o.bodyRead)
	}
	srv := httptest.NewServer(h)
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

func (e *env) job(id string) (gmailrelay.Job, []gmailrelay.Line) {
	e.t.Helper()
	j, err := e.Log.Get(context.Background(), id)
	if err != nil {
		e.t.Fatalf("job %s: %v", id, err)
	}
	lines, _ := e.Log.JobLines(context.Background(), id)
	return j, lines
}

func effects(lines []gmailrelay.Line) int {
	n := 0
	for _, l := range lines {
		if l.Kind == gmailrelay.KindEffect {
			n++
		}
	}
	return n
}

// wantOneEffect checks that the emulator delivered Message-ID id exactly once
// and that its job has exactly one effect line.
func (e *env) wantOneEffect(id string) {
	e.t.Helper()
	if got := e.Emulator.Deliveries(id); got != 1 {
		e.t.Errorf("emulator has %d deliveries, want 1", got)
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
	if got := e.Emulator.Deliveries(want); got != 1 {
		t.Errorf("emulator has %d deliveries, want 1", got)
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
	if got := e.Emulator.Deliveries(""); got != 0 {
		t.Errorf("emulator has %d deliveries, want 0", got)
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

func (e *env) addFault(spec map[string]any) string {
	e.t.Helper()
	r := e.must("POST", "/admin/faults", adminToken, spec)
	if r.status != 201 {
		e.t.Fatalf("add fault: %d %s", r.status, r.raw)
	}
	return fmt.Sprint(r.body["id"])
}

func TestEmulatorFailBeforeForwardThenRetry(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.addFault(map[string]any{"mode": "fail-before-forward", "count": 1})
	r := e.must("POST", "/v1/send", apiToken, sendBody("fbf"))
	if r.status != 503 || r.header.Get("Retry-After") == "" || !strings.Contains(string(r.raw), "fault") {
		t.Fatalf("faulted send: %d %v %s, want 503 with Retry-After and a fault message", r.status, r.header, r.raw)
	}
	id := relay.MessageID("fbf", domain)
	if got := e.Emulator.Deliveries(id); got != 0 {
		t.Fatalf("emulator has %d deliveries after fail-before-forward, want 0", got)
	}
	r = e.must("POST", "/v1/send", apiToken, sendBody("fbf"))
	if r.status != 200 {
		t.Fatalf("retry: %d %s", r.status, r.raw)
	}
	e.wantOneEffect(id)
}

func TestEmulatorDropResponseCutsConnection(t *testing.T) {
	e := newEnv(t, envOpts{})
	rule := e.addFault(map[string]any{"mode": "forward-then-drop-response", "key": "drop"})
	_, err := e.do("POST", "/v1/send", apiToken, sendBody("drop"))
	if err == nil {
		t.Fatal("the caller got an HTTP answer; want a cut connection")
	}
	id := relay.MessageID("drop", domain)
	if got := e.Emulator.Deliveries(id); got != 1 {
		t.Errorf("emulator has %d deliveries, want 1", got)
	}
	j, lines := e.job(id)
	if j.State != gmailrelay.StateUnknown {
		t.Errorf("state %s, want unknown", j.State)
	}
	var faultLine bool
	for _, l := range lines {
		faultLine = faultLine || (l.Kind == gmailrelay.KindFault && l.RuleID == rule)
	}
	if !faultLine {
		t.Errorf("no fault line naming rule %s in %+v", rule, lines)
	}
	// An immediate retry answers 202 and does not forward.
	r := e.must("POST", "/v1/send", apiToken, sendBody("drop"))
	if r.status != 202 || r.header.Get("Location") == "" || r.body["state"] != "unknown" {
		t.Errorf("retry: %d %v %s, want 202 unknown with Location", r.status, r.header, r.raw)
	}
	if got := e.Emulator.Deliveries(id); got != 1 {
		t.Errorf("after retry emulator has %d deliveries, want 1", got)
	}
	// The rules list shows the hit.
	f := e.must("GET", "/admin/faults", adminToken, nil)
	if !strings.Contains(string(f.raw), `"hits":1`) {
		t.Errorf("faults list %s, want hits 1", f.raw)
	}
}

func TestEmulatorDrop504Variant(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.addFault(map[string]any{"mode": "forward-then-drop-response", "drop": "504"})
	r := e.must("POST", "/v1/send", apiToken, sendBody("d504"))
	if r.status != 504 {
		t.Errorf("status %d, want 504", r.status)
	}
	if _, ok := r.body["error"]; !ok {
		t.Errorf("504 body %s has no error", r.raw)
	}
}

func TestEmulatorForwardAndRespondExemptsAKey(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.addFault(map[string]any{"mode": "fail-before-forward"})
	e.addFault(map[string]any{"mode": "forward-and-respond", "key": "vip"})
	if r := e.must("POST", "/v1/send", apiToken, sendBody("vip")); r.status != 200 {
		t.Errorf("exempt key: %d %s, want 200", r.status, r.raw)
	}
	if r := e.must("POST", "/v1/send", apiToken, sendBody("other")); r.status != 503 {
		t.Errorf("other key: %d, want 503", r.status)
	}
}

func TestFaultHeaderNeedsFlagAndAdminToken(t *testing.T) {
	tests := []struct {
		name   string
		flag   bool
		token  string
		status int
	}{
		{"without --fault-header", false, adminToken, 200},
		{"without the admin token", true, apiToken, 200},
		{"with both", true, adminToken, 503},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, envOpts{faultHeader: tt.flag})
			r := e.must("POST", "/v1/send", tt.token, sendBody("hdr"), "X-Relay-Fault", "fail-before-forward")
			if r.status != tt.status {
				t.Errorf("status %d %s, want %d", r.status, r.raw, tt.status)
			}
		})
	}
}

func TestAdminFaultValidation(t *testing.T) {
	e := newEnv(t, envOpts{})
	tests := []struct {
		body  map[string]any
		field string
	}{
		{map[string]any{"mode": "explode"}, "mode"},
		{map[string]any{"mode": "fail-before-forward", "probability": 1.5}, "probability"},
		{map[string]any{"mode": "fail-before-forward", "count": -1}, "count"},
		{map[string]any{"mode": "fail-before-forward", "ttl": "soon"}, "ttl"},
		{map[string]any{"mode": "crash-after-forward"}, "mode"},
		{map[string]any{"mode": "fail-before-forward", "channel": "nope"}, "channel"},
	}
	for _, tt := range tests {
		r := e.must("POST", "/admin/faults", adminToken, tt.body)
		errObj, _ := r.body["error"].(map[string]any)
		if r.status != 400 || errObj == nil || errObj["field"] != tt.field {
			t.Errorf("%v: %d %s, want 400 naming %s", tt.body, r.status, r.raw, tt.field)
		}
	}
	id := e.addFault(map[string]any{"mode": "fail-before-forward"})
	if r := e.must("DELETE", "/admin/faults/"+id, adminToken, nil); r.status != 204 {
		t.Errorf("delete: %d", r.status)
	}
	if r := e.must("DELETE", "/admin/faults/"+id, adminToken, nil); r.status != 404 {
		t.Errorf("delete again: %d, want 404", r.status)
	}
}

func TestEmulatorRawAndRFC822Intake(t *testing.T) {
	e := newEnv(t, envOpts{})
	id := relay.MessageID("raw-key", domain)
	msg := "From: me@example.org\r\nTo: a@example.org\r\nSubject: raw\r\nMessage-ID: " + id + "\r\n\r\nhello\r\n"
	r := e.must("POST", "/v1/send", apiToken, map[string]any{"key": "raw-key", "raw": base64.RawURLEncoding.EncodeToString([]byte(msg))})
	if r.status != 200 || r.body["message_id"] != id {
		t.Fatalf("raw JSON: %d %s", r.status, r.raw)
	}
	// message/rfc822 without a Message-ID: the key's is injected.
	r = e.must("POST", "/v1/send", apiToken, []byte("To: b@example.org\r\nSubject: rfc822\r\n\r\nhi\r\n"), "Idempotency-Key", "rfc822-key")
	want := relay.MessageID("rfc822-key", domain)
	if r.status != 200 || r.body["message_id"] != want || e.Emulator.Deliveries(want) != 1 {
		t.Fatalf("rfc822: %d %s, %d deliveries; want 200, 1 delivery", r.status, r.raw, e.Emulator.Deliveries(want))
	}
	// A Message-ID that is not the key's is refused.
	r = e.must("POST", "/v1/send", apiToken, []byte("To: b@example.org\r\nMessage-ID: <other@x.org>\r\n\r\nhi\r\n"), "Idempotency-Key", "rfc822-key-2")
	if r.status != 400 {
		t.Errorf("mismatched Message-ID: %d %s, want 400", r.status, r.raw)
	}
}

func TestTooLargeIs413(t *testing.T) {
	e := newEnv(t, envOpts{})
	big := strings.Repeat("a", api.MaxJSONBytes+10)
	r := e.must("POST", "/v1/send", apiToken, `{"key":"big","to":"a@example.org","text":"`+big+`"}`)
	if r.status != 413 {
		t.Errorf("status %d, want 413", r.status)
	}
}

func TestEmulatorQuotaSpentIs429AndSendsNothing(t *testing.T) {
	e := newEnv(t, envOpts{quota: 100}) // one send a minute
	if r := e.must("POST", "/v1/send", apiToken, sendBody("q1")); r.status != 200 {
		t.Fatalf("first: %d %s", r.status, r.raw)
	}
	b := sendBody("q2")
	b["when_busy"] = "reject" // the outbox's default would queue it
	r := e.must("POST", "/v1/send", apiToken, b)
	if r.status != 429 || r.header.Get("Retry-After") == "" {
		t.Fatalf("second: %d %v, want 429 with Retry-After", r.status, r.header)
	}
	if got := e.Emulator.Deliveries(relay.MessageID("q2", domain)); got != 0 {
		t.Errorf("emulator has %d deliveries for the refused send, want 0", got)
	}
	if _, err := e.Log.Get(context.Background(), relay.MessageID("q2", domain)); !errors.Is(err, gmailrelay.ErrNotFound) {
		t.Errorf("refused send left a job: %v", err)
	}
}

func TestEmulatorGmailCompatiblePathWithGoogleClient(t *testing.T) {
	e := newEnv(t, envOpts{})
	svc := e.gmailClient()
	id := "<compat-1@example.org>"
	raw := "To: a@example.org\r\nSubject: compat\r\nMessage-ID: " + id + "\r\n\r\nhi\r\n"
	m, err := svc.Users.Messages.Send("me", &gmail.Message{Raw: base64.URLEncoding.EncodeToString([]byte(raw))}).Do()
	if err != nil {
		t.Fatal(err)
	}
	if m.Id == "" || len(m.LabelIds) == 0 || m.LabelIds[0] != "SENT" {
		t.Errorf("answer %+v, want a Gmail message with SENT", m)
	}
	// Same message again: replayed, not resent.
	m2, err := svc.Users.Messages.Send("me", &gmail.Message{Raw: base64.URLEncoding.EncodeToString([]byte(raw))}).Do()
	if err != nil || m2.Id != m.Id {
		t.Errorf("second send: %v %v, want the same id %s", m2, err, m.Id)
	}
	// Upload path (multipart) through .Media().
	id2 := "<compat-2@example.org>"
	raw2 := "To: a@example.org\r\nSubject: upload\r\nMessage-ID: " + id2 + "\r\n\r\nhi\r\n"
	if _, err := svc.Users.Messages.Send("me", &gmail.Message{}).Media(strings.NewReader(raw2), googleapi.ContentType("message/rfc822")).Do(); err != nil {
		t.Fatalf("upload: %v", err)
	}
	// No Message-ID: Gmail-style 400.
	_, err = svc.Users.Messages.Send("me", &gmail.Message{Raw: base64.URLEncoding.EncodeToString([]byte("To: a@example.org\r\n\r\nx"))}).Do()
	var gerr *googleapi.Error
	if !errors.As(err, &gerr) || gerr.Code != 400 || len(gerr.Errors) == 0 || gerr.Errors[0].Reason != "invalidArgument" {
		t.Errorf("no Message-ID: %v, want googleapi 400 invalidArgument", err)
	}
	if e.Emulator.Deliveries(id) != 1 || e.Emulator.Deliveries(id2) != 1 {
		t.Errorf("emulator has %d and %d deliveries, want 1 and 1", e.Emulator.Deliveries(id), e.Emulator.Deliveries(id2))
	}
}

type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// gmailClient is Google's own Gmail client pointed at the relay's
// Gmail-compatible path, sending the API token.
func (e *env) gmailClient() *gmail.Service {
	e.t.Helper()
	svc, err := gmail.NewService(context.Background(), option.WithEndpoint(e.url+"/"), option.WithHTTPClient(&http.Client{
		Transport: bearer{token: apiToken}}))
	if err != nil {
		e.t.Fatal(err)
	}
	return svc
}

func TestEmulatorReadingTheLog(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.must("POST", "/v1/send", apiToken, sendBody("read-1"))
	e.addFault(map[string]any{"mode": "forward-then-drop-response", "drop": "504"})
	e.must("POST", "/v1/send", apiToken, sendBody("read-2"))
	id := relay.MessageID("read-1", domain)

	for _, path := range []string{"/v1/jobs/" + url.PathEscape(id), "/v1/jobs/" + strings.Trim(id, "<>")} {
		r := e.must("GET", path, apiToken, nil)
		lines, _ := r.body["lines"].([]any)
		if r.status != 200 || r.body["state"] != "sent" || len(lines) < 3 {
			t.Errorf("GET %s: %d %s", path, r.status, r.raw)
		}
	}
	if r := e.must("GET", "/v1/jobs/"+url.PathEscape("<nope@x.org>"), apiToken, nil); r.status != 404 {
		t.Errorf("missing job: %d, want 404", r.status)
	}
	r := e.must("GET", "/v1/jobs?state=unknown", apiToken, nil)
	jobs, _ := r.body["jobs"].([]any)
	if r.status != 200 || len(jobs) != 1 {
		t.Errorf("unknown jobs: %d %s, want one", r.status, r.raw)
	}
	if r := e.must("GET", "/v1/jobs?state=bogus", apiToken, nil); r.status != 400 {
		t.Errorf("bad state filter: %d, want 400", r.status)
	}
	r = e.must("GET", "/v1/log?after=0&limit=3", apiToken, nil)
	lines, _ := r.body["lines"].([]any)
	if r.status != 200 || len(lines) != 3 || r.body["next"] == nil {
		t.Errorf("log page: %d %s", r.status, r.raw)
	}
	r = e.must("GET", "/v1/log", apiToken, nil, "Accept", "application/x-ndjson")
	rows := strings.Split(strings.TrimSpace(string(r.raw)), "\n")
	var first gmailrelay.Line
	if err := json.Unmarshal([]byte(rows[0]), &first); err != nil || first.Seq != 1 || len(rows) < 6 {
		t.Errorf("ndjson: %d rows, first %+v (%v)", len(rows), first, err)
	}
	r = e.must("GET", "/v1/stats", apiToken, nil)
	if r.status != 200 || r.body["effect_lines"] != float64(1) {
		t.Errorf("stats: %s", r.raw)
	}
}

func TestEmulatorReviewResolveAndSweep(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.addFault(map[string]any{"mode": "forward-then-drop-response", "drop": "504", "channel": "billing"})
	b := sendBody("bill-1")
	b["channel"] = "billing"
	e.must("POST", "/v1/send", apiToken, b)
	id := relay.MessageID("bill-1", domain)
	e.Clock.Advance(2 * time.Minute)
	r := e.must("POST", "/admin/sweep", adminToken, nil)
	if r.status != 200 {
		t.Fatalf("sweep: %d %s", r.status, r.raw)
	}
	// The retention pass's counts are part of the answer, zero
	// on a relay without a retention policy.
	if ret, ok := r.body["retention"].(map[string]any); !ok || ret["jobs"] != float64(0) {
		t.Errorf("sweep answer %s: want retention with jobs 0", r.raw)
	}
	if j, _ := e.job(id); j.State != gmailrelay.StateReview {
		t.Fatalf("after sweep: %s, want review", j.State)
	}
	path := "/v1/jobs/" + url.PathEscape(id) + "/resolve"
	if r := e.must("POST", path, apiToken, map[string]any{"action": "mark-sent"}); r.status != 403 {
		t.Errorf("resolve with the API token: %d, want 403", r.status)
	}
	if r := e.must("POST", path, adminToken, map[string]any{"action": "mark-sent", "note": "seen in Sent", "typo": 1}); r.status != 400 {
		t.Errorf("resolve with an unknown field: %d, want 400", r.status)
	}
	if r := e.must("POST", path, adminToken, map[string]any{"action": "mark-sent", "expect_attempts": -1}); r.status != 400 || !strings.Contains(string(r.raw), "expect_attempts") {
		t.Errorf("resolve with a negative expect_attempts: %d %s, want 400 naming it", r.status, r.raw)
	}
	// A decision taken when the job had made no attempt yet is stale now.
	if r := e.must("POST", path, adminToken, map[string]any{"action": "retry", "expect_attempts": 0}); r.status != 409 {
		t.Errorf("resolve with a stale expect_attempts: %d %s, want 409", r.status, r.raw)
	}
	r = e.must("POST", path, adminToken, map[string]any{"action": "mark-sent", "note": "seen in Sent", "expect_attempts": 1})
	if r.status != 200 || r.body["state"] != "sent" {
		t.Fatalf("resolve: %d %s", r.status, r.raw)
	}
	if got := e.Emulator.Deliveries(id); got != 1 {
		t.Errorf("emulator has %d deliveries, want 1 (never resent)", got)
	}
}

func TestEmulatorMetricsMoveWithSends(t *testing.T) {
	e := newEnv(t, envOpts{})
	scrape := func() map[string]float64 { return e.scrape() }
	before := scrape()
	e.must("POST", "/v1/send", apiToken, sendBody("m1"))
	e.addFault(map[string]any{"mode": "fail-before-forward", "count": 1})
	e.must("POST", "/v1/send", apiToken, sendBody("m2"))
	after := scrape()
	checks := []string{
		"gmailrelay_sends_total,channel=default,outcome=sent,reason=",
		"gmailrelay_gmail_call_seconds,mailbox=default,method=send,result=ok",
		"gmailrelay_jobs,state=sent",
		"gmailrelay_jobs,state=failed",
		"gmailrelay_quota_units_spent_total",
		"gmailrelay_effect_lines_total",
		"gmailrelay_faults_injected_total,mode=fail-before-forward",
	}
	for _, k := range checks {
		if after[k] <= before[k] {
			t.Errorf("%s: %v -> %v, want it to grow", k, before[k], after[k])
		}
	}
	for _, k := range []string{"gmailrelay_review_queue_depth", "gmailrelay_oldest_unknown_age_seconds", "gmailrelay_duplicates_found_total", "gmailrelay_handle_failures_total"} {
		if _, ok := after[k]; !ok {
			t.Errorf("metric %s missing", k)
		}
	}
}

func TestEmulatorConcurrentSameKeyGets409WithRetryAfter(t *testing.T) {
	e := newEnv(t, envOpts{})
	if _, err := e.Emulator.AddFault(gmailfake.Fault{Method: "send", Action: "latency", Latency: 300 * time.Millisecond, Count: -1}); err != nil {
		t.Fatal(err)
	}
	type res struct {
		status int
		retry  string
	}
	out := make(chan res, 20)
	start := make(chan struct{})
	for range 20 {
		go func() {
			<-start
			r, err := e.do("POST", "/v1/send", apiToken, sendBody("busy"))
			if err != nil {
				out <- res{}
				return
			}
			out <- res{r.status, r.header.Get("Retry-After")}
		}()
	}
	close(start)
	counts := map[int]int{}
	for range 20 {
		r := <-out
		counts[r.status]++
		if r.status == 409 && r.retry == "" {
			t.Error("409 without Retry-After")
		}
	}
	if counts[200] < 1 || counts[200]+counts[409] != 20 {
		t.Errorf("statuses %v, want 200s (sent or replayed) and 409s only", counts)
	}
	if got := e.Emulator.Deliveries(relay.MessageID("busy", domain)); got != 1 {
		t.Errorf("emulator has %d deliveries, want 1", got)
	}
}

// TestLogsNeverCarryTokensBodiesOrRecipients sends through every path that
// logs (success, fault, drop, bad input, auth failure) with logging at
// debug level, and searches the logs for the secrets.
func TestLogsNeverCarryTokensBodiesOrRecipients(t *testing.T) {
	logs := &testenv.LockedBuffer{}
	e := newEnv(t, envOpts{logs: logs})
	secretBody := "the-secret-body-text"
	msg := map[string]any{"key": "log-1", "to": "secret.recipient@example.org", "cc": "cc.person@example.org",
		"subject": "the-secret-subject", "body": secretBody}
	e.must("POST", "/v1/send", apiToken, msg)
	e.addFault(map[string]any{"mode": "forward-then-drop-response", "count": 1})
	msg["key"] = "log-2"
	_, _ = e.do("POST", "/v1/send", apiToken, msg)
	msg["to"] = "bad\r\nsecret.recipient@example.org"
	e.must("POST", "/v1/send", apiToken, msg)
	e.must("GET", "/v1/jobs", "wrong-"+apiToken, nil)
	out := logs.String()
	if !strings.Contains(out, "request") {
		t.Fatalf("no access log written: %q", out)
	}
	for _, secret := range []string{apiToken, adminToken, "secret.recipient", "cc.person", secretBody, "the-secret-subject"} {
		if strings.Contains(out, secret) {
			t.Errorf("logs contain %q", secret)
		}
	}
}

func TestEmulatorGmailPathDrop504IsGatewayTimeout(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.addFault(map[string]any{"mode": "forward-then-drop-response", "drop": "504"})
	svc := e.gmailClient()
	raw := "To: a@example.org\r\nSubject: drop\r\nMessage-ID: <drop-504@example.org>\r\n\r\nhi\r\n"
	_, err := svc.Users.Messages.Send("me", &gmail.Message{Raw: base64.URLEncoding.EncodeToString([]byte(raw))}).Do()
	var gerr *googleapi.Error
	if !errors.As(err, &gerr) || gerr.Code != 504 {
		t.Fatalf("err = %v, want a googleapi 504", err)
	}
	if got := e.Emulator.Deliveries("<drop-504@example.org>"); got != 1 {
		t.Errorf("emulator has %d deliveries, want 1 (Gmail got it; only the answer was dropped)", got)
	}
}

// TestJobIDDecodedOnce: a Message-ID holding a '%' is found by its own
// escaped URL and by nothing else, and a resolve on that URL acts on it,
// never on the job its once-more-decoded form names.
func TestJobIDDecodedOnce(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.addFault(map[string]any{"mode": "forward-then-drop-response", "drop": "504", "channel": "billing"})
	const pct, plain = "<%6Aob-1@x.example>", "<job-1@x.example>"
	for _, id := range []string{pct, plain} {
		msg := "From: me@example.org\r\nTo: a@example.org\r\nSubject: s\r\nMessage-ID: " + id + "\r\n\r\nhi\r\n"
		e.must("POST", "/v1/send", apiToken, map[string]any{"channel": "billing", "raw": base64.RawURLEncoding.EncodeToString([]byte(msg))})
		if _, err := e.Log.Get(context.Background(), id); err != nil {
			t.Fatalf("send %s: %v", id, err)
		}
	}
	// Both end in review: forwarded, the answer lost, the channel reviews unknowns.
	e.Clock.Advance(2 * time.Minute)
	if r := e.must("POST", "/admin/sweep", adminToken, nil); r.status != 200 {
		t.Fatalf("sweep: %d %s", r.status, r.raw)
	}
	for _, id := range []string{pct, plain} {
		if j, _ := e.job(id); j.State != gmailrelay.StateReview {
			t.Fatalf("%s after sweep: %s, want review", id, j.State)
		}
	}
	get := func(path string) string {
		t.Helper()
		r := e.must("GET", path, apiToken, nil)
		if r.status != 200 {
			return fmt.Sprintf("status %d", r.status)
		}
		s, _ := r.body["message_id"].(string)
		return s
	}
	if got := get("/v1/jobs/" + url.PathEscape(pct)); got != pct {
		t.Errorf("GET by the escaped %s: got %q", pct, got)
	}
	if got := get("/v1/jobs/" + url.PathEscape(plain)); got != plain {
		t.Errorf("GET by the escaped %s: got %q", plain, got)
	}
	// The once-decoded path must not reach the plain job by a second decode.
	if got := get("/v1/jobs/" + url.PathEscape(url.PathEscape(plain))); got == plain {
		t.Errorf("GET by a doubly escaped %s found it", plain)
	}
	r := e.must("POST", "/v1/jobs/"+url.PathEscape(pct)+"/resolve", adminToken, map[string]any{"action": "mark-sent", "note": "seen"})
	if r.status != 200 || r.body["message_id"] != pct {
		t.Fatalf("resolve %s: %d %s", pct, r.status, r.raw)
	}
	if j, _ := e.job(pct); j.State != gmailrelay.StateSent {
		t.Errorf("%s after its resolve: %s, want sent", pct, j.State)
	}
	if j, _ := e.job(plain); j.State != gmailrelay.StateReview {
		t.Errorf("%s after the other job's resolve: %s, want review (untouched)", plain, j.State)
	}
}

// TestSearchInjectionIDsRefusedAtIntake: Message-IDs holding Gmail search
// syntax are refused with 400 naming message_id, on the raw intake and the
// Gmail-compatible path, and nothing reaches Gmail or the log.
func TestSearchInjectionIDsRefusedAtIntake(t *testing.T) {
	e := newEnv(t, envOpts{})
	svc := e.gmailClient()
	for _, id := range []string{"<p}q@attacker.example>", "<x@[}OR(in:sent)OR{in:x]>"} {
		raw := "From: me@example.org\r\nTo: a@example.org\r\nSubject: s\r\nMessage-ID: " + id + "\r\n\r\nhi\r\n"
		r := e.must("POST", "/v1/send", apiToken, []byte(raw))
		ebody, _ := r.body["error"].(map[string]any)
		if r.status != 400 || ebody["field"] != "message_id" || !strings.Contains(fmt.Sprint(ebody["message"]), "holds '") {
			t.Errorf("rfc822 %s: %d %s, want 400 naming message_id and the character", id, r.status, r.raw)
		}
		r = e.must("POST", "/v1/send", apiToken, map[string]any{"raw": base64.RawURLEncoding.EncodeToString([]byte(raw))})
		if ebody, _ := r.body["error"].(map[string]any); r.status != 400 || ebody["field"] != "message_id" {
			t.Errorf("raw JSON %s: %d %s, want 400 naming message_id", id, r.status, r.raw)
		}
		_, err := svc.Users.Messages.Send("me", &gmail.Message{Raw: base64.URLEncoding.EncodeToString([]byte(raw))}).Do()
		var gerr *googleapi.Error
		if !errors.As(err, &gerr) || gerr.Code != 400 || !strings.Contains(gerr.Message, "Message-ID") {
			t.Errorf("Gmail-compatible %s: %v, want googleapi 400 about the Message-ID", id, err)
		}
		if c, d := e.Emulator.Count(id), e.Emulator.Deliveries(id); c != 0 || d != 0 {
			t.Errorf("%s: emulator holds %d copies, %d deliveries; want 0, 0", id, c, d)
		}
		if _, err := e.Log.Get(context.Background(), id); !errors.Is(err, gmailrelay.ErrNotFound) {
			t.Errorf("%s: log Get = %v, want ErrNotFound", id, err)
		}
	}
	if st, err := e.Log.Stats(context.Background()); err != nil || st.Jobs != 0 {
		t.Errorf("log stats %+v, %v; want no job", st, err)
	}
}

// TestObsoleteHeaderNamesRefused: "Name :" (RFC 5322 §4.5 obs-syntax) is
// refused with 400 naming the header, so a second Message-ID or To
// cannot slip past the one-of-each checks; nothing reaches Gmail.
func TestObsoleteHeaderNamesRefused(t *testing.T) {
	e := newEnv(t, envOpts{})
	svc := e.gmailClient()
	tests := []struct{ name, id, raw, header string }{
		{"second Message-ID", "<obs-1@x.example>", "From: me@example.org\r\nTo: a@example.org\r\nMessage-ID: <obs-1@x.example>\r\nMessage-ID : <obs-other@x.example>\r\n\r\nhi\r\n", "Message-ID"},
		{"only Message-ID", "<obs-2@x.example>", "From: me@example.org\r\nTo: a@example.org\r\nMessage-ID : <obs-2@x.example>\r\n\r\nhi\r\n", "Message-ID"},
		{"second To", "<obs-3@x.example>", "From: me@example.org\r\nTo: a@example.org\r\nTo\t: b@example.org\r\nMessage-ID: <obs-3@x.example>\r\n\r\nhi\r\n", "To"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := e.must("POST", "/v1/send", apiToken, []byte(tt.raw))
			ebody, _ := r.body["error"].(map[string]any)
			if r.status != 400 || !strings.Contains(fmt.Sprint(ebody["message"]), `"`+tt.header) {
				t.Errorf("rfc822: %d %s, want 400 naming %s", r.status, r.raw, tt.header)
			}
			_, err := svc.Users.Messages.Send("me", &gmail.Message{Raw: base64.URLEncoding.EncodeToString([]byte(tt.raw))}).Do()
			var gerr *googleapi.Error
			if !errors.As(err, &gerr) || gerr.Code != 400 || !strings.Contains(gerr.Message, tt.header) {
				t.Errorf("Gmail-compatible: %v, want googleapi 400 naming %s", err, tt.header)
			}
			if d := e.Emulator.Deliveries(tt.id); d != 0 {
				t.Errorf("emulator: %d deliveries of %s, want 0", d, tt.id)
			}
			if _, err := e.Log.Get(context.Background(), tt.id); !errors.Is(err, gmailrelay.ErrNotFound) {
				t.Errorf("log Get(%s) = %v, want ErrNotFound", tt.id, err)
			}
		})
	}
}

// scrape reads /metrics into name,label=value… → value (histograms: their
// sample count).
func (e *env) scrape() map[string]float64 {
	t := e.t
	t.Helper()
	r := e.must("GET", "/metrics", "", nil)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(r.raw))
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	out := map[string]float64{}
	for name, f := range fams {
		for _, m := range f.Metric {
			key := name
			for _, l := range m.Label {
				key += "," + l.GetName() + "=" + l.GetValue()
			}
			switch {
			case m.Counter != nil:
				out[key] = m.Counter.GetValue()
			case m.Gauge != nil:
				out[key] = m.Gauge.GetValue()
			case m.Histogram != nil:
				out[key] = float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return out
}
