package api_test

import (
	"encoding/base64"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/api"
	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/outbox"
	"github.com/gmailrelay/gmailrelay/relay"
)

// TestEmulatorBusyQueuesRejectRefusesAndCancel: with the budget spent,
// /v1/send answers 202 queued with Location and eta (nothing sent),
// when_busy reject keeps 429 + Retry-After, the Gmail-compatible path
// keeps 429 without X-Relay-When-Busy and queues with it; DELETE of the
// queued job abandons it (never delivered), of a sent job is 409.
func TestEmulatorBusyQueuesRejectRefusesAndCancel(t *testing.T) {
	e := newEnv(t, envOpts{quota: 100}) // one send a minute
	if r := e.must("POST", "/v1/send", apiToken, sendBody("o1")); r.status != 200 {
		t.Fatalf("first: %d %s", r.status, r.raw)
	}
	r := e.must("POST", "/v1/send", apiToken, sendBody("o2"))
	id := relay.MessageID("o2", domain)
	if r.status != 202 || r.body["state"] != "queued" || r.header.Get("Location") == "" || r.body["eta"] == nil {
		t.Fatalf("busy send: %d %v %s, want 202 queued with Location and eta", r.status, r.header, r.raw)
	}
	if _, err := time.Parse(time.RFC3339, r.body["eta"].(string)); err != nil {
		t.Errorf("eta %v is not RFC 3339", r.body["eta"])
	}
	if again := e.must("POST", "/v1/send", apiToken, sendBody("o2")); again.status != 202 || again.body["state"] != "queued" {
		t.Errorf("same key again: %d %s, want a 202 replay of the queued job", again.status, again.raw)
	}
	b := sendBody("o3")
	b["when_busy"] = "reject"
	if r := e.must("POST", "/v1/send", apiToken, b); r.status != 429 || r.header.Get("Retry-After") == "" {
		t.Errorf("when_busy reject: %d %v, want 429 with Retry-After", r.status, r.header)
	}
	raw := base64.RawURLEncoding.EncodeToString([]byte("From: a@example.com\r\nTo: b@example.org\r\nMessage-ID: <gm1@example.com>\r\nSubject: x\r\n\r\nhi\r\n"))
	gm := map[string]any{"raw": raw}
	if r := e.must("POST", "/gmail/v1/users/me/messages/send", apiToken, gm); r.status != 429 {
		t.Errorf("Gmail path while busy: %d %s, want 429", r.status, r.raw)
	}
	if r := e.must("POST", "/gmail/v1/users/me/messages/send", apiToken, gm, "X-Relay-When-Busy", "queue"); r.status != 202 {
		t.Errorf("Gmail path with X-Relay-When-Busy: queue: %d %s, want 202", r.status, r.raw)
	}
	list := e.must("GET", "/v1/jobs?state=queued", apiToken, nil)
	if jobs, _ := list.body["jobs"].([]any); len(jobs) != 2 || jobs[0].(map[string]any)["eta"] == nil {
		t.Errorf("queued listing: %s, want 2 jobs with eta", list.raw)
	}
	st := e.must("GET", "/v1/stats", apiToken, nil)
	ob, _ := st.body["outbox"].(map[string]any)
	if ob == nil || ob["queue_depth"] != float64(2) || ob["budget_left_today"] == nil {
		t.Errorf("stats outbox: %v, want queue_depth 2 and budget_left_today", ob)
	}
	if r := e.must("DELETE", "/v1/jobs/"+url.PathEscape(id), apiToken, nil); r.status != 200 || r.body["state"] != "abandoned" {
		t.Fatalf("cancel queued: %d %s, want 200 abandoned", r.status, r.raw)
	}
	j, lines := e.job(id)
	last := lines[len(lines)-1]
	if j.State != gmailrelay.StateAbandoned || last.Kind != gmailrelay.KindResolved || last.Reason != gmailrelay.ReasonCancelled || last.Actor == "" {
		t.Errorf("cancelled job %s, last line %+v; want abandoned with a resolved cancelled line and an actor", j.State, last)
	}
	if r := e.must("DELETE", "/v1/jobs/"+url.PathEscape(relay.MessageID("o1", domain)), apiToken, nil); r.status != 409 {
		t.Errorf("cancel sent: %d %s, want 409", r.status, r.raw)
	}
	e.Clock.Advance(time.Hour)
	if d := e.Emulator.Deliveries(id); d != 0 {
		t.Errorf("cancelled job delivered %d times, want 0", d)
	}
}

// docs/api.md#outbox: Gmail's own rate limit on the attempt (not the
// relay's budget) queues the job too — 202 queued on /v1/send and on the
// Gmail-compatible path with X-Relay-When-Busy: queue, and the outbox
// delivers it once after the pause; the Gmail path without the header
// keeps Gmail's 429 and the job fails, retryable.
func TestEmulatorGmailRateLimitOnTheAttemptQueues(t *testing.T) {
	e := newEnv(t, envOpts{configure: func(c *api.Config) {
		var err error
		if c.Outbox, err = outbox.New(outbox.Config{Log: c.Log, Relay: c.Relay.(outbox.Relay), Now: c.Now}); err != nil {
			t.Fatal(err)
		}
	}})
	limitNextSend := func() {
		t.Helper()
		if _, err := e.Emulator.AddFault(gmailfake.Fault{Method: "send", Action: "error", Status: 429}); err != nil {
			t.Fatal(err)
		}
	}
	raw := func(id string) map[string]any {
		return map[string]any{"raw": base64.RawURLEncoding.EncodeToString([]byte(
			"From: a@example.com\r\nTo: b@example.org\r\nMessage-ID: " + id + "\r\nSubject: x\r\n\r\nhi\r\n"))}
	}
	queuedThenDelivered := func(what string, r reply, state any, id string) {
		t.Helper()
		j, lines := e.job(id)
		last := lines[len(lines)-1]
		if r.status != 202 || state != "queued" || j.State != gmailrelay.StateQueued ||
			last.Kind != gmailrelay.KindNotSent || last.Reason != gmailrelay.ReasonRateLimited {
			t.Fatalf("%s under Gmail's 429: %d %s, job %s, last line %+v; want 202 queued, a not_sent rate_limited line",
				what, r.status, r.raw, j.State, last)
		}
		e.Clock.Advance(time.Hour) // past the pause
		if p := e.must("POST", "/admin/outbox", adminToken, nil); p.status != 200 {
			t.Fatalf("outbox pass: %d %s", p.status, p.raw)
		}
		if j, _ := e.job(id); j.State != gmailrelay.StateSent || e.Emulator.Deliveries(id) != 1 {
			t.Errorf("%s after the pause: %s, %d deliveries; want sent once", what, j.State, e.Emulator.Deliveries(id))
		}
	}
	limitNextSend()
	r := e.must("POST", "/v1/send", apiToken, sendBody("rl1"))
	if r.body["eta"] == nil {
		t.Errorf("/v1/send queued answer without eta: %s", r.raw)
	}
	queuedThenDelivered("/v1/send", r, r.body["state"], relay.MessageID("rl1", domain))

	limitNextSend()
	r = e.must("POST", "/gmail/v1/users/me/messages/send", apiToken, raw("<rl2@example.com>"), "X-Relay-When-Busy", "queue")
	view, _ := r.body["relay"].(map[string]any)
	if view["eta"] == nil {
		t.Errorf("Gmail path's queued answer without eta: %s", r.raw)
	}
	queuedThenDelivered("Gmail path with X-Relay-When-Busy: queue", r, view["state"], "<rl2@example.com>")

	limitNextSend()
	if r := e.must("POST", "/gmail/v1/users/me/messages/send", apiToken, raw("<rl3@example.com>")); r.status != 429 {
		t.Errorf("Gmail path without the header under Gmail's 429: %d %s, want 429", r.status, r.raw)
	}
	if j, _ := e.job("<rl3@example.com>"); j.State != gmailrelay.StateFailed || !j.Retryable || e.Emulator.Deliveries("<rl3@example.com>") != 0 {
		t.Errorf("Gmail path job: %s retryable %v, want failed, retryable, not delivered", j.State, j.Retryable)
	}
}

// X-Relay-When-Busy: reject used to be ignored on a JSON /v1/send: under
// Gmail's own 429 to the attempt the send answered 202 queued, while the
// body's when_busy "reject" answered 429. The header now does what the
// field does, on every path: 429 + Retry-After, the job failed and
// retryable, nothing delivered (emulator ground truth), nothing queued.
func TestEmulatorWhenBusyRejectHeaderUnderGmail429(t *testing.T) {
	e := newEnv(t, envOpts{configure: func(c *api.Config) {
		var err error
		if c.Outbox, err = outbox.New(outbox.Config{Log: c.Log, Relay: c.Relay.(*relay.Service), Now: c.Now}); err != nil {
			t.Fatal(err)
		}
	}})
	limitNextSend := func() {
		t.Helper()
		if _, err := e.Emulator.AddFault(gmailfake.Fault{Method: "send", Action: "error", Status: 429}); err != nil {
			t.Fatal(err)
		}
	}
	rawMsg := func(id string) string {
		return "From: a@example.com\r\nTo: b@example.org\r\nMessage-ID: " + id + "\r\nSubject: x\r\n\r\nhi\r\n"
	}
	field := sendBody("wb-field")
	field["when_busy"] = "reject"
	cases := []struct {
		name string
		id   string
		send func() reply
	}{
		{"JSON /v1/send, body when_busy reject", relay.MessageID("wb-field", domain), func() reply {
			return e.must("POST", "/v1/send", apiToken, field)
		}},
		{"JSON /v1/send, X-Relay-When-Busy: reject", relay.MessageID("wb-json", domain), func() reply {
			return e.must("POST", "/v1/send", apiToken, sendBody("wb-json"), "X-Relay-When-Busy", "reject")
		}},
		{"raw /v1/send, X-Relay-When-Busy: reject", relay.MessageID("wb-raw", domain), func() reply {
			return e.must("POST", "/v1/send", apiToken, []byte("From: a@example.com\r\nTo: b@example.org\r\nSubject: x\r\n\r\nhi\r\n"),
				"Idempotency-Key", "wb-raw", "X-Relay-When-Busy", "reject")
		}},
		{"Gmail path, X-Relay-When-Busy: reject", "<wb-gmail@example.com>", func() reply {
			return e.must("POST", "/gmail/v1/users/me/messages/send", apiToken,
				map[string]any{"raw": base64.RawURLEncoding.EncodeToString([]byte(rawMsg("<wb-gmail@example.com>")))},
				"X-Relay-When-Busy", "reject")
		}},
	}
	for _, c := range cases {
		e.Clock.Advance(time.Hour) // past the pause the previous 429 set
		limitNextSend()
		r := c.send()
		if r.status != 429 {
			t.Errorf("%s under Gmail's 429: %d %s, want 429", c.name, r.status, r.raw)
			continue
		}
		if j, _ := e.job(c.id); j.State != gmailrelay.StateFailed || !j.Retryable || e.Emulator.Deliveries(c.id) != 0 {
			t.Errorf("%s: job %s retryable %v, %d deliveries; want failed, retryable, none", c.name, j.State, j.Retryable, e.Emulator.Deliveries(c.id))
		}
	}
	if q := e.must("GET", "/v1/jobs?state=queued", apiToken, nil); len(q.body["jobs"].([]any)) != 0 {
		t.Errorf("queued jobs after rejects: %s, want none", q.raw)
	}
}

// A queued job cancelled with the API token used to answer its key with "an
// operator abandoned this job". The resolved line now names the token
// (actor "api", or "api:NAME" with ?actor=, which can no longer pass for
// the console's "ui"), and the answer to the key says an API caller
// cancelled it; a job an operator abandons still says so.
func TestCancelledJobSaysAnAPICallerCancelledIt(t *testing.T) {
	e := newEnv(t, envOpts{quota: 100}) // one send a minute
	if r := e.must("POST", "/v1/send", apiToken, sendBody("c0")); r.status != 200 {
		t.Fatalf("first: %d %s", r.status, r.raw)
	}
	for _, c := range []struct{ key, query, token, actor, who string }{
		{"c1", "", apiToken, "api", "an API caller"},
		{"c2", "?actor=ui", apiToken, "api:ui", "an API caller"},
		{"c3", "", adminToken, "admin", "an operator with the admin token"},
	} {
		if r := e.must("POST", "/v1/send", apiToken, sendBody(c.key)); r.status != 202 {
			t.Fatalf("%s: %d %s, want 202 queued", c.key, r.status, r.raw)
		}
		id := relay.MessageID(c.key, domain)
		if r := e.must("DELETE", "/v1/jobs/"+url.PathEscape(id)+c.query, c.token, nil); r.status != 200 {
			t.Fatalf("cancel %s: %d %s", c.key, r.status, r.raw)
		}
		_, lines := e.job(id)
		if last := lines[len(lines)-1]; last.Reason != gmailrelay.ReasonCancelled || last.Actor != c.actor {
			t.Errorf("%s: resolved line %+v; want reason cancelled, actor %q", c.key, last, c.actor)
		}
		r := e.must("POST", "/v1/send", apiToken, sendBody(c.key))
		msg, _ := r.body["error"].(map[string]any)["message"].(string)
		if r.status != 409 || !strings.Contains(msg, "cancelled while queued by "+c.who) || strings.Contains(msg, "an operator abandoned") {
			t.Errorf("%s again: %d %q; want 409 saying it was cancelled while queued by %s", c.key, r.status, msg, c.who)
		}
	}
}
