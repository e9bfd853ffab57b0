package api_test

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay/relay"
)

// TestListCarriesRecipientsAndSubject: every item of GET /v1/jobs carries
// to (the To addresses) and subject, read from the stored message; a job
// whose message retention dropped has both empty, not absent.
func TestListCarriesRecipientsAndSubject(t *testing.T) {
	e := newEnv(t, envOpts{retention: 24 * time.Hour})
	ctx := context.Background()
	old := "cus_1:order.shipped:ord_old"
	if r := e.must("POST", "/v1/send", apiToken, sendBody(old)); r.status != 200 {
		t.Fatalf("send: %d %s", r.status, r.raw)
	}
	for range 2 {
		e.Clock.Advance(24 * time.Hour)
		if _, err := e.sw.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
	}
	e.Clock.Advance(48 * time.Hour)
	if r := e.must("POST", "/admin/sweep", adminToken, nil); r.status != 200 {
		t.Fatalf("sweep: %d %s", r.status, r.raw)
	}
	fresh := "cus_2:invoice.paid:ord_new"
	body := map[string]any{"key": fresh, "to": []string{"Ann Lee <ann@example.org>", "bob@example.com"},
		"subject": "Reçu INV-2", "body": "Paid."}
	if r := e.must("POST", "/v1/send", apiToken, body); r.status != 200 {
		t.Fatalf("send: %d %s", r.status, r.raw)
	}

	r := e.must("GET", "/v1/jobs", apiToken, nil)
	var list struct {
		Jobs []map[string]json.RawMessage `json:"jobs"`
	}
	if err := json.Unmarshal(r.raw, &list); err != nil || r.status != 200 {
		t.Fatalf("GET /v1/jobs: %d %s", r.status, r.raw)
	}
	want := map[string]relay.Summary{
		relay.MessageID(old, domain):   {To: []string{}, Subject: ""},
		relay.MessageID(fresh, domain): {To: []string{"ann@example.org", "bob@example.com"}, Subject: "Reçu INV-2"},
	}
	if len(list.Jobs) != len(want) {
		t.Fatalf("jobs listed: %s", r.raw)
	}
	for _, item := range list.Jobs {
		var id string
		var got relay.Summary
		_ = json.Unmarshal(item["message_id"], &id)
		if item["to"] == nil || item["subject"] == nil {
			t.Errorf("%s: to or subject absent: %s", id, r.raw)
		}
		_ = json.Unmarshal(item["to"], &got.To)
		_ = json.Unmarshal(item["subject"], &got.Subject)
		if !reflect.DeepEqual(got, want[id]) {
			t.Errorf("%s: got %+v, want %+v", id, got, want[id])
		}
	}
}
