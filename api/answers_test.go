package api_test

import (
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/relay"
)

// TestSentAnswerAlwaysCarriesGmailFields: the 200 answer of /v1/send holds
// every field docs/api.md lists, gmail_id, thread_id and label_ids included
// (empty when not known), here on the replay of a job an operator marked
// sent, whose Gmail id nobody learned; the 202 answer leaves them out.
// Before, the 200 answer left them out too.
func TestSentAnswerAlwaysCarriesGmailFields(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.addFault(map[string]any{"mode": "forward-then-drop-response", "drop": "504"})
	if r := e.must("POST", "/v1/send", apiToken, sendBody("marked-1")); r.status != 504 {
		t.Fatalf("dropped send: %d %s", r.status, r.raw)
	}
	id := relay.MessageID("marked-1", domain)
	r := e.must("POST", "/v1/send", apiToken, sendBody("marked-1"))
	if r.status != 202 || strings.Contains(string(r.raw), "gmail_id") || strings.Contains(string(r.raw), "label_ids") {
		t.Errorf("replay of the unknown job: %d %s, want 202 without gmail_id and label_ids", r.status, r.raw)
	}
	if r := e.must("POST", "/v1/jobs/"+url.PathEscape(id)+"/resolve", adminToken, map[string]any{"action": "mark-sent"}); r.status != 200 {
		t.Fatalf("mark-sent: %d %s", r.status, r.raw)
	}
	r = e.must("POST", "/v1/send", apiToken, sendBody("marked-1"))
	if r.status != 200 || r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay of the marked job: %d %s, want a 200 replay", r.status, r.raw)
	}
	for _, f := range []string{"message_id", "state", "gmail_id", "thread_id", "label_ids", "attempts", "channel"} {
		if _, ok := r.body[f]; !ok {
			t.Errorf("sent answer %s has no %s", r.raw, f)
		}
	}
	for _, want := range []string{`"state":"sent"`, `"gmail_id":""`, `"thread_id":""`, `"label_ids":[]`} {
		if !strings.Contains(string(r.raw), want) {
			t.Errorf("sent answer %s, want %s", r.raw, want)
		}
	}
}

// A duplicate the relay's own attempts made (two effect lines, review
// reason duplicate_delivery) counts in duplicates_found and
// gmailrelay_duplicates_found_total like one the search found (two
// copies, duplicate). Before, only the second counted: a relay whose
// mailbox folds same-id copies (the emulator's --sent-dedupe case) reported 0.
func TestDuplicatesFoundCountsOwnDeliveries(t *testing.T) {
	e := newEnv(t, envOpts{})
	for i, reason := range []gmailrelay.Reason{gmailrelay.ReasonDuplicate, gmailrelay.ReasonDuplicateDelivery} {
		r := e.must("POST", "/v1/send", apiToken, sendBody(fmt.Sprintf("dup%d", i)))
		id, _ := r.body["message_id"].(string)
		if _, _, err := e.Log.Mutate(t.Context(), id, func(cur *gmailrelay.Job) (gmailrelay.Change, error) {
			j := *cur
			return gmailrelay.Change{Job: &j, Lines: []gmailrelay.Line{gmailrelay.Move(&j, gmailrelay.StateReview,
				gmailrelay.Line{Kind: gmailrelay.KindReview, Attempt: j.Attempts, Reason: reason})}}, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	st := e.must("GET", "/v1/stats", apiToken, nil)
	if got := st.body["duplicates_found"]; got != float64(2) {
		t.Errorf("duplicates_found = %v, want 2 (one duplicate, one duplicate_delivery)", got)
	}
	if got := e.scrape()["gmailrelay_duplicates_found_total"]; got != 2 {
		t.Errorf("gmailrelay_duplicates_found_total = %v, want 2", got)
	}
}
