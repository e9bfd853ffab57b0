package api_test

import (
	"encoding/base64"
	"net/url"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay/acceptlog"
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
	if j.State != acceptlog.StateAbandoned || last.Kind != acceptlog.KindResolved || last.Reason != acceptlog.ReasonCancelled || last.Actor == "" {
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
