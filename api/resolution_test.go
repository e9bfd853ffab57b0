package api_test

import (
	"net/url"
	"testing"

	"github.com/gmailrelay/gmailrelay/relay"
)

// The job view says how the outcome became known and how long after the
// ambiguous attempt: an answered send by the response, at once; an
// unknown one says nothing yet, then, marked sent by an operator, "human"
// with the seconds it took.
func TestEmulatorJobViewResolvedBy(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.must("POST", "/v1/send", apiToken, sendBody("res-1"))
	e.addFault(map[string]any{"mode": "forward-then-drop-response", "drop": "504"})
	e.must("POST", "/v1/send", apiToken, sendBody("res-2"))
	view := func(key string) reply {
		t.Helper()
		r := e.must("GET", "/v1/jobs/"+url.PathEscape(relay.MessageID(key, domain)), apiToken, nil)
		if r.status != 200 {
			t.Fatalf("GET job %s: %d %s", key, r.status, r.raw)
		}
		return r
	}
	if r := view("res-1"); r.body["resolved_by"] != "response" || r.body["truth_after_s"] != 0.0 {
		t.Errorf("answered send: resolved_by %v, truth_after_s %v; want response, 0", r.body["resolved_by"], r.body["truth_after_s"])
	}
	if r := view("res-2"); r.body["resolved_by"] != nil || r.body["truth_after_s"] != nil {
		t.Errorf("unknown job: resolved_by %v, truth_after_s %v; want neither", r.body["resolved_by"], r.body["truth_after_s"])
	}
	e.Clock.Advance(90e9)
	id := relay.MessageID("res-2", domain)
	if r := e.must("POST", "/v1/jobs/"+url.PathEscape(id)+"/resolve", adminToken, map[string]any{"action": "mark-sent"}); r.status != 200 {
		t.Fatalf("mark-sent: %d %s", r.status, r.raw)
	}
	if r := view("res-2"); r.body["resolved_by"] != "human" || r.body["truth_after_s"] != 90.0 {
		t.Errorf("marked sent 90 s later: resolved_by %v, truth_after_s %v; want human, 90", r.body["resolved_by"], r.body["truth_after_s"])
	}
}
