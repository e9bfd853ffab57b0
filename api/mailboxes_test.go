package api_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/gmailrelay/gmailrelay/api"
	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/relay"
)

// threeMailboxes is a policy of three mailboxes, each served by the
// emulator as an account of its own (userId = its address). billing may
// send one message a day, so its second send queues.
const threeMailboxes = `
mailboxes:
  support: {address: support@example.com}
  billing: {address: billing@example.com, daily_send_limit: 1}
  shop: {address: shop@example.com, send_as: [orders@example.com]}
channels:
  default: {on_unknown: retry}
`

var boxAddress = map[string]string{"support": "support@example.com", "billing": "billing@example.com", "shop": "shop@example.com"}

func mailboxSend(key, from, mailbox string) map[string]any {
	b := sendBody(key)
	if from != "" {
		b["from"] = from
	}
	if mailbox != "" {
		b["mailbox"] = mailbox
	}
	return b
}

// wantOnlyIn checks the emulator's ground truth: id was delivered once to
// the account of mailbox and never to the other two.
func (e *env) wantOnlyIn(id, mailbox string) {
	e.t.Helper()
	for name, addr := range boxAddress {
		want := 0
		if name == mailbox {
			want = 1
		}
		if got := e.Emulator.Lookup(addr, id).Deliveries; got != want {
			e.t.Errorf("emulator result: %s delivered %d times to %s (%s), want %d", id, got, addr, name, want)
		}
	}
}

func gmailRaw(from, id string) map[string]any {
	msg := "From: " + from + "\r\nTo: a@example.org\r\nSubject: s\r\nMessage-ID: " + id + "\r\n\r\nhi\r\n"
	return map[string]any{"raw": base64.RawURLEncoding.EncodeToString([]byte(msg))}
}

func jobsOf(t *testing.T, r reply) []map[string]any {
	t.Helper()
	if r.status != 200 {
		t.Fatalf("listing: %d %s", r.status, r.raw)
	}
	raw, _ := r.body["jobs"].([]any)
	out := make([]map[string]any, len(raw))
	for i, j := range raw {
		out[i] = j.(map[string]any)
	}
	return out
}

// Every answer and job view names its mailbox, and the sends land in the
// right account of the emulator, picked by From, by mailbox or by the
// Gmail-compatible path's userId.
func TestEmulatorMailboxesAnswersCarryMailbox(t *testing.T) {
	e := newEnv(t, envOpts{mailboxes: threeMailboxes})
	cases := []struct {
		key, from, mailbox, want string
	}{
		{"by-from", "support@example.com", "", "support"},
		{"by-send-as", "orders@example.com", "", "shop"},
		{"by-name", "", "billing", "billing"},
	}
	for _, c := range cases {
		r := e.must("POST", "/v1/send", apiToken, mailboxSend(c.key, c.from, c.mailbox))
		if r.status != 200 || r.body["mailbox"] != c.want {
			t.Errorf("%s: %d %s, want 200 with mailbox %s", c.key, r.status, r.raw, c.want)
		}
		id := relay.MessageID(c.key, domain)
		e.wantOnlyIn(id, c.want)
		v := e.must("GET", "/v1/jobs/"+url.PathEscape(id), apiToken, nil)
		if v.body["mailbox"] != c.want {
			t.Errorf("GET job %s: mailbox %v, want %s", c.key, v.body["mailbox"], c.want)
		}
	}
	// billing's daily budget is spent: the next one queues, named.
	q := e.must("POST", "/v1/send", apiToken, mailboxSend("queued", "billing@example.com", ""))
	if q.status != 202 || q.body["state"] != "queued" || q.body["mailbox"] != "billing" {
		t.Errorf("queued: %d %s, want 202 queued in billing", q.status, q.raw)
	}
	// Unknown From: 400 naming the address, nothing sent anywhere.
	bad := e.must("POST", "/v1/send", apiToken, mailboxSend("nobody", "nobody@example.com", ""))
	if bad.status != 400 || !strings.Contains(string(bad.raw), "nobody@example.com") {
		t.Errorf("unknown From: %d %s, want 400 naming the address", bad.status, bad.raw)
	}
	e.wantOnlyIn(relay.MessageID("nobody", domain), "")

	// The Gmail-compatible path: an address userId picks its mailbox.
	id := "<compat-1@example.com>"
	r := e.must("POST", "/gmail/v1/users/"+url.PathEscape("shop@example.com")+"/messages/send", apiToken, gmailRaw("shop@example.com", id))
	if r.status != 200 || r.body["id"] == nil {
		t.Fatalf("compat by userId: %d %s", r.status, r.raw)
	}
	e.wantOnlyIn(id, "shop")
	// "me" picks by the raw From.
	id = "<compat-2@example.com>"
	if r := e.must("POST", "/gmail/v1/users/me/messages/send", apiToken, gmailRaw("support@example.com", id)); r.status != 200 {
		t.Fatalf("compat me: %d %s", r.status, r.raw)
	}
	e.wantOnlyIn(id, "support")
	// A userId no mailbox is: Gmail's 400 naming it, nothing sent.
	id = "<compat-3@example.com>"
	r = e.must("POST", "/gmail/v1/users/"+url.PathEscape("ghost@example.com")+"/messages/send", apiToken, gmailRaw("support@example.com", id))
	ge, _ := r.body["error"].(map[string]any)
	if r.status != 400 || ge == nil || ge["status"] != "INVALID_ARGUMENT" || !strings.Contains(ge["message"].(string), "ghost@example.com") {
		t.Errorf("compat unknown userId: %d %s, want Gmail's 400 naming ghost@example.com", r.status, r.raw)
	}
	e.wantOnlyIn(id, "")
	// A userId and a From of different mailboxes: 400, nothing sent.
	id = "<compat-4@example.com>"
	if r := e.must("POST", "/gmail/v1/users/"+url.PathEscape("billing@example.com")+"/messages/send", apiToken, gmailRaw("support@example.com", id)); r.status != 400 {
		t.Errorf("compat userId billing, From support: %d %s, want 400", r.status, r.raw)
	}
	e.wantOnlyIn(id, "")
	// A queued job from the compat path carries the mailbox in its relay view.
	id = "<compat-5@example.com>"
	r = e.must("POST", "/gmail/v1/users/"+url.PathEscape("billing@example.com")+"/messages/send", apiToken,
		gmailRaw("billing@example.com", id), "X-Relay-When-Busy", "queue")
	if rv, _ := r.body["relay"].(map[string]any); r.status != 202 || rv["mailbox"] != "billing" {
		t.Errorf("compat queued: %d %s, want 202 with relay.mailbox billing", r.status, r.raw)
	}
	// The listing names every job's mailbox.
	for _, j := range jobsOf(t, e.must("GET", "/v1/jobs", apiToken, nil)) {
		if _, ok := boxAddress[j["mailbox"].(string)]; !ok {
			t.Errorf("listed job %v: mailbox %q is none of the three", j["message_id"], j["mailbox"])
		}
	}
	// Cancelling names it too.
	qid := relay.MessageID("queued", domain)
	if c := e.must("DELETE", "/v1/jobs/"+url.PathEscape(qid), apiToken, nil); c.status != 200 || c.body["mailbox"] != "billing" {
		t.Errorf("cancel: %d %s, want 200 naming billing", c.status, c.raw)
	}
}

// ?mailbox= filters the job listing (paging included), the log and the
// stats; an unknown name is 400 naming the mailboxes.
func TestEmulatorMailboxFilter(t *testing.T) {
	e := newEnv(t, envOpts{mailboxes: threeMailboxes})
	sent := map[string][]string{}
	for i, box := range []string{"support", "shop", "support", "billing", "support", "shop"} {
		key := box + "-" + string(rune('a'+i))
		if r := e.must("POST", "/v1/send", apiToken, mailboxSend(key, "", box)); r.status != 200 {
			t.Fatalf("send %s: %d %s", key, r.status, r.raw)
		}
		sent[box] = append(sent[box], relay.MessageID(key, domain))
	}
	for box, ids := range sent {
		got := map[string]bool{}
		after := ""
		for page := 0; ; page++ {
			if page > 10 {
				t.Fatalf("%s: paging does not end", box)
			}
			r := e.must("GET", "/v1/jobs?limit=1&mailbox="+box+"&after="+url.QueryEscape(after), apiToken, nil)
			for _, j := range jobsOf(t, r) {
				if j["mailbox"] != box {
					t.Errorf("?mailbox=%s listed %v of mailbox %v", box, j["message_id"], j["mailbox"])
				}
				got[j["message_id"].(string)] = true
			}
			after, _ = r.body["next"].(string)
			if after == "" {
				break
			}
		}
		if len(got) != len(ids) {
			t.Errorf("?mailbox=%s listed %d jobs, want %d (%v)", box, len(got), len(ids), ids)
		}
		for _, id := range ids {
			if !got[id] {
				t.Errorf("?mailbox=%s did not list %s", box, id)
			}
		}
		// The log: exactly the lines of the mailbox's jobs.
		want := 0
		mine := map[string]bool{}
		for _, id := range ids {
			want += len(e.Lines(id))
			mine[id] = true
		}
		r := e.must("GET", "/v1/log?limit=1000&mailbox="+box, apiToken, nil)
		lines, _ := r.body["lines"].([]any)
		if r.status != 200 || len(lines) != want {
			t.Errorf("/v1/log?mailbox=%s: %d, %d lines, want %d", box, r.status, len(lines), want)
		}
		for _, l := range lines {
			if id := l.(map[string]any)["message_id"].(string); !mine[id] {
				t.Errorf("/v1/log?mailbox=%s holds a line of %s", box, id)
			}
		}
		// Paged by 2, the log gives the same lines; next comes back
		// equal to after once the reader has caught up.
		n, seq := 0, "0"
		for page := 0; page < 50; page++ {
			r := e.must("GET", "/v1/log?limit=2&mailbox="+box+"&after="+seq, apiToken, nil)
			ls, _ := r.body["lines"].([]any)
			n += len(ls)
			next, _ := r.body["next"].(float64)
			if s := strconv.FormatUint(uint64(next), 10); s != seq {
				seq = s
				continue
			}
			break
		}
		if n != want {
			t.Errorf("/v1/log?mailbox=%s paged by 2: %d lines, want %d", box, n, want)
		}
		st := e.must("GET", "/v1/stats?mailbox="+box, apiToken, nil)
		mbs, _ := st.body["mailboxes"].(map[string]any)
		if st.status != 200 || len(mbs) != 1 || mbs[box] == nil {
			t.Errorf("/v1/stats?mailbox=%s: %d mailboxes %v, want only %s", box, st.status, mbs, box)
		}
	}
	for _, path := range []string{"/v1/jobs", "/v1/log", "/v1/stats"} {
		r := e.must("GET", path+"?mailbox=ghost", apiToken, nil)
		ae, _ := r.body["error"].(map[string]any)
		if r.status != 400 || ae["field"] != "mailbox" || !strings.Contains(string(r.raw), "billing, shop, support") {
			t.Errorf("%s?mailbox=ghost: %d %s, want 400 field mailbox naming billing, shop, support", path, r.status, r.raw)
		}
	}
}

// /v1/stats and /metrics report each mailbox on its own: a Gmail 429 in
// billing pauses billing only; a Message-ID rewrite in support marks
// support only untrusted; each mailbox's quota, queue and budget.
func TestEmulatorStatsAndMetricsPerMailbox(t *testing.T) {
	e := newEnv(t, envOpts{mailboxes: threeMailboxes})
	// support's first send is read back while the emulator rewrites.
	e.Emulator.SetRewriteMessageID(true)
	if r := e.must("POST", "/v1/send", apiToken, mailboxSend("s1", "", "support")); r.status != 200 {
		t.Fatalf("support send: %d %s", r.status, r.raw)
	}
	e.Emulator.SetRewriteMessageID(false)
	if r := e.must("POST", "/v1/send", apiToken, mailboxSend("p1", "", "shop")); r.status != 200 {
		t.Fatalf("shop send: %d %s", r.status, r.raw)
	}
	if _, err := e.Emulator.AddFault(gmailfake.Fault{Method: "send", Action: "error", Status: 429, Account: "billing@example.com"}); err != nil {
		t.Fatal(err)
	}
	if r := e.must("POST", "/v1/send", apiToken, mailboxSend("b1", "", "billing")); r.status != 202 || r.body["state"] != "queued" || r.body["eta"] == nil {
		t.Fatalf("billing send under a 429: %d %s, want 202 queued with an eta", r.status, r.raw)
	}
	// billing is paused; the other two keep sending at full rate, and
	// billing refuses (nothing sent) instead of slowing them.
	for i := range 20 {
		for _, box := range []string{"support", "shop"} {
			key := box + "-more-" + strconv.Itoa(i)
			if r := e.must("POST", "/v1/send", apiToken, mailboxSend(key, "", box)); r.status != 200 {
				t.Fatalf("%s send %d while billing is paused: %d %s", box, i, r.status, r.raw)
			}
			e.wantOnlyIn(relay.MessageID(key, domain), box)
		}
	}
	b2 := mailboxSend("b2", "", "billing")
	b2["when_busy"] = "reject"
	if r := e.must("POST", "/v1/send", apiToken, b2); r.status != 429 || r.header.Get("Retry-After") == "" {
		t.Errorf("billing send while paused: %d %s, want 429 + Retry-After", r.status, r.raw)
	}
	e.wantOnlyIn(relay.MessageID("b2", domain), "")
	st := e.must("GET", "/v1/stats", apiToken, nil)
	mbs, _ := st.body["mailboxes"].(map[string]any)
	if len(mbs) != 3 {
		t.Fatalf("stats mailboxes: %s", st.raw)
	}
	box := func(name string) map[string]any { m, _ := mbs[name].(map[string]any); return m }
	for name, addr := range boxAddress {
		m := box(name)
		if m["address"] != addr || m["ready"] != true {
			t.Errorf("%s: %v, want address %s and ready", name, m, addr)
		}
		if paused := m["paused_for_seconds"].(float64); (name == "billing") != (paused > 0) {
			t.Errorf("%s: paused_for_seconds %v, want > 0 for billing only", name, paused)
		}
		if untrusted := m["handle_untrusted"].(bool); (name == "support") != untrusted || m["handle_trusted"] == untrusted {
			t.Errorf("%s: handle_untrusted %v handle_trusted %v, want untrusted for support only", name, untrusted, m["handle_trusted"])
		}
		if m["quota_per_minute"].(float64) <= 0 || m["daily_send_limit"].(float64) <= 0 {
			t.Errorf("%s: quota_per_minute %v daily_send_limit %v", name, m["quota_per_minute"], m["daily_send_limit"])
		}
	}
	if box("support")["rewrites"] != float64(1) || box("shop")["rewrites"] != float64(0) {
		t.Errorf("rewrites: support %v shop %v, want 1 and 0", box("support")["rewrites"], box("shop")["rewrites"])
	}
	if box("billing")["daily_send_limit"] != float64(1) {
		t.Errorf("billing daily_send_limit %v, want 1", box("billing")["daily_send_limit"])
	}
	var sum float64
	for name := range boxAddress {
		spent := box(name)["quota_units_spent"].(float64)
		if spent <= 0 {
			t.Errorf("%s: quota_units_spent %v, want > 0 (it called Gmail)", name, spent)
		}
		sum += spent
	}
	if st.body["quota_units_spent"] != sum {
		t.Errorf("top-level quota_units_spent %v, want the mailboxes' sum %v", st.body["quota_units_spent"], sum)
	}

	m := e.scrape()
	for name := range boxAddress {
		for _, k := range []string{"gmailrelay_outbox_queue_depth", "gmailrelay_outbox_oldest_queued_age_seconds",
			"gmailrelay_daily_send_budget_left", "gmailrelay_mailbox_quota_units_spent_total", "gmailrelay_mailbox_handle_untrusted",
			"gmailrelay_mailbox_paused_seconds", "gmailrelay_mailbox_ready"} {
			if _, ok := m[k+",mailbox="+name]; !ok {
				t.Errorf("metric %s{mailbox=%q} missing", k, name)
			}
		}
		want := map[string]float64{"support": 21, "shop": 21, "billing": 1}[name]
		if got := m["gmailrelay_gmail_call_seconds,mailbox="+name+",method=send,result="+map[bool]string{true: "error", false: "ok"}[name == "billing"]]; got != want {
			t.Errorf("Gmail send calls observed for %s: %v, want %v", name, got, want)
		}
	}
	if m["gmailrelay_mailbox_handle_untrusted,mailbox=support"] != 1 || m["gmailrelay_mailbox_handle_untrusted,mailbox=shop"] != 0 {
		t.Errorf("handle_untrusted gauges: support %v shop %v, want 1 and 0",
			m["gmailrelay_mailbox_handle_untrusted,mailbox=support"], m["gmailrelay_mailbox_handle_untrusted,mailbox=shop"])
	}
	if m["gmailrelay_mailbox_paused_seconds,mailbox=billing"] <= 0 || m["gmailrelay_mailbox_paused_seconds,mailbox=shop"] != 0 {
		t.Errorf("paused gauges: billing %v shop %v, want > 0 and 0",
			m["gmailrelay_mailbox_paused_seconds,mailbox=billing"], m["gmailrelay_mailbox_paused_seconds,mailbox=shop"])
	}
	if got := m["gmailrelay_mailbox_quota_units_spent_total,mailbox=shop"]; got != box("shop")["quota_units_spent"] {
		t.Errorf("shop quota metric %v, stats %v", got, box("shop")["quota_units_spent"])
	}
}

// brokenProvider is a mailbox whose OAuth token no longer refreshes: no
// call leaves the process.
type brokenProvider struct{}

var errBroken = &relay.NotReachedError{Err: fmt.Errorf("%w: %w", relay.ErrTokenRefresh, errors.New("oauth2: invalid_grant"))}

func (brokenProvider) Send(context.Context, string, []byte, string) (relay.SentMessage, error) {
	return relay.SentMessage{}, errBroken
}

func (brokenProvider) List(context.Context, string, string, []string, string, int64) (relay.ListPage, error) {
	return relay.ListPage{}, errBroken
}

func (brokenProvider) GetHeader(context.Context, string, string) (relay.StoredHeader, error) {
	return relay.StoredHeader{}, errBroken
}

func (brokenProvider) SendAs(context.Context, string) ([]relay.SendAsAddress, error) {
	return nil, errBroken
}

func (brokenProvider) GetRaw(context.Context, string, string) ([]byte, error) { return nil, errBroken }

func (brokenProvider) Profile(context.Context, string) (uint64, error) { return 0, errBroken }

func (brokenProvider) History(context.Context, string, uint64, string, string) (relay.HistoryPage, error) {
	return relay.HistoryPage{}, errBroken
}

// A broken credential in billing: its sends are 503 naming billing,
// nothing reaches the emulator; support and shop send; stats, metrics and
// /readyz say billing is the one not ready.
func TestEmulatorBrokenMailboxCredential(t *testing.T) {
	e := newEnv(t, envOpts{mailboxes: threeMailboxes,
		wrapMailbox: func(name string, p relay.Provider) relay.MailboxConfig {
			if name != "billing" {
				return relay.MailboxConfig{Provider: p}
			}
			return relay.MailboxConfig{Provider: brokenProvider{}, Health: func() error { return errors.New("token refresh failing: invalid_grant") }}
		},
		configure: func(c *api.Config) {
			c.Probes = map[string]func(context.Context) error{}
			for name := range boxAddress {
				c.Probes[name] = func(context.Context) error {
					if name == "billing" {
						return errors.New("token refresh failing: invalid_grant")
					}
					return nil
				}
			}
		}})
	r := e.must("POST", "/v1/send", apiToken, mailboxSend("b1", "billing@example.com", ""))
	if r.status != 503 || r.header.Get("Retry-After") == "" || !strings.Contains(string(r.raw), "mailbox billing") {
		t.Errorf("billing send: %d %s, want 503 + Retry-After naming mailbox billing", r.status, r.raw)
	}
	e.wantOnlyIn(relay.MessageID("b1", domain), "")
	for _, box := range []string{"support", "shop"} {
		if r := e.must("POST", "/v1/send", apiToken, mailboxSend(box+"1", "", box)); r.status != 200 {
			t.Errorf("%s send: %d %s, want 200", box, r.status, r.raw)
		}
		e.wantOnlyIn(relay.MessageID(box+"1", domain), box)
	}
	rz := e.must("GET", "/readyz", "", nil)
	boxes, _ := rz.body["mailboxes"].(map[string]any)
	if rz.status != 200 || !strings.HasPrefix(fmt.Sprint(boxes["billing"]), "not ready") || boxes["support"] != "ready" || boxes["shop"] != "ready" {
		t.Errorf("/readyz: %d %s, want 200 with billing not ready and the others ready", rz.status, rz.raw)
	}
	st := e.must("GET", "/v1/stats", apiToken, nil)
	mbs, _ := st.body["mailboxes"].(map[string]any)
	for name := range boxAddress {
		m, _ := mbs[name].(map[string]any)
		if ready := m["ready"] == true; ready == (name == "billing") {
			t.Errorf("stats %s: ready %v (%v), want ready for all but billing", name, m["ready"], m["not_ready"])
		}
	}
	m := e.scrape()
	if m["gmailrelay_mailbox_ready,mailbox=billing"] != 0 || m["gmailrelay_mailbox_ready,mailbox=support"] != 1 {
		t.Errorf("ready gauges: billing %v support %v, want 0 and 1", m["gmailrelay_mailbox_ready,mailbox=billing"], m["gmailrelay_mailbox_ready,mailbox=support"])
	}
}

// A relay without a mailboxes policy has one mailbox, default: its jobs
// and stats name it, and ?mailbox= knows only it.
func TestEmulatorDefaultMailboxNamed(t *testing.T) {
	e := newEnv(t, envOpts{})
	r := e.must("POST", "/v1/send", apiToken, sendBody("d1"))
	if r.status != 200 || r.body["mailbox"] != "default" {
		t.Fatalf("send: %d %s, want 200 in mailbox default", r.status, r.raw)
	}
	if jobs := jobsOf(t, e.must("GET", "/v1/jobs?mailbox=default", apiToken, nil)); len(jobs) != 1 || jobs[0]["mailbox"] != "default" {
		t.Errorf("?mailbox=default: %v, want the one job", jobs)
	}
	if r := e.must("GET", "/v1/jobs?mailbox=billing", apiToken, nil); r.status != 400 || !strings.Contains(string(r.raw), "mailboxes: default") {
		t.Errorf("?mailbox=billing: %d %s, want 400 naming default", r.status, r.raw)
	}
	st := e.must("GET", "/v1/stats", apiToken, nil)
	mbs, _ := st.body["mailboxes"].(map[string]any)
	d, _ := mbs["default"].(map[string]any)
	if len(mbs) != 1 || d == nil || d["quota_units_spent"] != st.body["quota_units_spent"] || d["ready"] != true {
		t.Errorf("stats mailboxes: %v, want default alone with the relay's quota", mbs)
	}
	// A userId address on the Gmail path of such a relay sends as before.
	id := "<d2@example.com>"
	if r := e.must("POST", "/gmail/v1/users/"+url.PathEscape("someone@example.com")+"/messages/send", apiToken, gmailRaw("me@example.org", id)); r.status != 200 {
		t.Errorf("compat with an address userId on a one-mailbox relay: %d %s, want 200", r.status, r.raw)
	}
}
