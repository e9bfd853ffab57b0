package api_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay/relay"
	"github.com/gmailrelay/gmailrelay/sweeper"
)

// Emulator result. A send to ok@example.org and x@bounce.test is sent;
// once the history tail read the emulator's report, the job view says
// delivery partly_bounced with x@bounce.test, its lines hold the bounce
// line (status "5.1.1"), and ?delivery=bounced lists it; an unknown
// delivery filter is 400 naming delivery.
func TestEmulatorJobViewDeliveryAndBouncedListing(t *testing.T) {
	e := newEnv(t, envOpts{})
	cfg := e.SweeperConfig()
	cfg.History = true
	sw := sweeper.New(cfg)
	pass := func() {
		t.Helper()
		if _, err := sw.RunOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	pass() // the history cursor starts
	body := map[string]any{"key": "deliv-1", "to": []string{"ok@example.org", "x@bounce.test"}, "subject": "Invoice", "body": "Attached."}
	if r := e.must("POST", "/v1/send", apiToken, body); r.status != 200 {
		t.Fatalf("send: %d %s", r.status, r.raw)
	}
	e.must("POST", "/v1/send", apiToken, sendBody("deliv-2")) // delivered to everyone
	e.Clock.Advance(35 * time.Second)
	pass()
	id := relay.MessageID("deliv-1", domain)
	r := e.must("GET", "/v1/jobs/"+url.PathEscape(id), apiToken, nil)
	d, _ := r.body["delivery"].(map[string]any)
	bounced, _ := d["bounced"].([]any)
	if r.body["state"] != "sent" || d["state"] != "partly_bounced" || len(bounced) != 1 || bounced[0] != "x@bounce.test" {
		t.Fatalf("job view: state %v, delivery %v; want sent, partly_bounced with x@bounce.test", r.body["state"], d)
	}
	found := false
	lines, _ := r.body["lines"].([]any)
	for _, l := range lines {
		if m, _ := l.(map[string]any); m["kind"] == "bounce" && m["status"] == "5.1.1" && m["recipient"] == "x@bounce.test" && m["action"] == "failed" {
			found = true
		}
	}
	if !found {
		t.Errorf("no bounce line with status 5.1.1 in %s", r.raw)
	}
	other := e.must("GET", "/v1/jobs/"+url.PathEscape(relay.MessageID("deliv-2", domain)), apiToken, nil)
	if d, _ := other.body["delivery"].(map[string]any); d["state"] != "no_report" {
		t.Errorf("a send without a report: delivery %v, want no_report", d)
	}
	list := e.must("GET", "/v1/jobs?delivery=bounced", apiToken, nil)
	jobs, _ := list.body["jobs"].([]any)
	if list.status != 200 || len(jobs) != 1 || jobs[0].(map[string]any)["message_id"] != id {
		t.Errorf("?delivery=bounced: %d %s, want only %s", list.status, list.raw, id)
	}
	bad := e.must("GET", "/v1/jobs?delivery=lost", apiToken, nil)
	if errBody, _ := bad.body["error"].(map[string]any); bad.status != 400 || errBody["field"] != "delivery" {
		t.Errorf("?delivery=lost: %d %s, want 400 naming delivery", bad.status, bad.raw)
	}
}
