package e2e_test

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay/e2e"
	"github.com/gmailrelay/gmailrelay/gmailfake"
)

// Emulator results, the real binary with its history tail (serve's
// default): under a search index lag of p50 60 s, p99 5 min, ten sends
// whose answer the relay's fault dropped (Gmail stored each) are all sent
// within 30 s of the relay's clock — resolved_by "history" in the job
// view — and each is delivered once. The search path alone could not know
// before grace and a lagging index.
func TestEmulatorHistoryResolvesDroppedResponsesWithin30s(t *testing.T) {
	t.Parallel()
	r := startRelay(t, relayOptions{history: true, gmail: func(o *gmailfake.Options) {
		o.IndexLagDistribution = gmailfake.LagDistribution{P50: time.Minute, P99: 5 * time.Minute, Max: 10 * time.Minute}
	}})
	var ops []e2e.Op
	var ids []string
	for i := range 10 {
		key := fmt.Sprintf("cus_%d:order.shipped:history", i)
		r.AddFault(t, fmt.Sprintf(`{"mode":"forward-then-drop-response","key":%q,"count":1}`, key))
		op := r.Send(request(key, "default"), 1, 1)
		if op.Outcome != e2e.Info {
			t.Fatalf("send %d: %s, want an unknown outcome (answer dropped)", i, opString(op))
		}
		ops, ids = append(ops, op), append(ids, msgID(key))
	}
	for waited := time.Duration(0); waited < 30*time.Second; waited += 5 * time.Second {
		r.Advance(t, 5*time.Second)
		r.Sweep(t)
	}
	for _, id := range ids {
		var v map[string]any
		if err := r.admin(http.MethodGet, "/v1/jobs/"+url.PathEscape(id), "", http.StatusOK, &v); err != nil {
			t.Fatal(err)
		}
		if v["state"] != "sent" || v["resolved_by"] != "history" {
			t.Errorf("%s after 30 s: state %v, resolved_by %v; want sent, history", id, v["state"], v["resolved_by"])
		}
		if d := r.Emu.Deliveries(id); d != 1 {
			t.Errorf("emulator result: %s delivered %d times, want 1", id, d)
		}
	}
	wantClean(t, r, ops)
}

// Emulator results, the real binary: a send to ok@example.org and
// x@bounce.test is sent; 30 s later the emulator's report is in the
// mailbox, and within 30 s more the job view says partly_bounced with
// x@bounce.test and a bounce line, ?delivery=bounced lists the job, and
// /metrics counts the bounce.
func TestEmulatorBounceReachesTheJobWithin30s(t *testing.T) {
	t.Parallel()
	r := startRelay(t, relayOptions{history: true})
	req := sendRequest{Key: "cus_1:invoice:bounce", To: "ok@example.org, x@bounce.test", Subject: "Invoice", Body: "Attached.", Channel: "default"}
	op := r.Send(req, 1, 1)
	if op.Status != http.StatusOK {
		t.Fatalf("send: %s, want 200 sent", opString(op))
	}
	id := msgID(req.Key)
	r.Advance(t, 30*time.Second) // the emulator's --bounce-delay
	for waited := time.Duration(0); waited < 30*time.Second; waited += 5 * time.Second {
		r.Advance(t, 5*time.Second)
		r.Sweep(t)
	}
	var v struct {
		State    string `json:"state"`
		Delivery struct {
			State   string   `json:"state"`
			Bounced []string `json:"bounced"`
		} `json:"delivery"`
		Lines []struct {
			Kind, Recipient, Action string
			Status                  any
		} `json:"lines"`
	}
	if err := r.admin(http.MethodGet, "/v1/jobs/"+url.PathEscape(id), "", http.StatusOK, &v); err != nil {
		t.Fatal(err)
	}
	if v.State != "sent" || v.Delivery.State != "partly_bounced" || len(v.Delivery.Bounced) != 1 || v.Delivery.Bounced[0] != "x@bounce.test" {
		t.Fatalf("job after the report: state %s, delivery %+v; want sent, partly_bounced with x@bounce.test", v.State, v.Delivery)
	}
	bounces := 0
	for _, l := range v.Lines {
		if l.Kind == "bounce" && l.Recipient == "x@bounce.test" && l.Action == "failed" && l.Status == "5.1.1" {
			bounces++
		}
	}
	if bounces != 1 {
		t.Errorf("bounce lines for x@bounce.test: %d, want 1", bounces)
	}
	var list struct {
		Jobs []struct {
			MessageID string `json:"message_id"`
		} `json:"jobs"`
	}
	if err := r.admin(http.MethodGet, "/v1/jobs?delivery=bounced", "", http.StatusOK, &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Jobs) != 1 || list.Jobs[0].MessageID != id {
		t.Errorf("?delivery=bounced: %+v, want only %s", list.Jobs, id)
	}
	status, metrics, err := r.do(r.URL(), http.MethodGet, "/metrics", adminToken, "")
	if err != nil || status != http.StatusOK || !strings.Contains(string(metrics), `gmailrelay_bounces_total{action="failed",mailbox="default"} 1`) {
		t.Errorf("/metrics: %d, %v; want gmailrelay_bounces_total{action=\"failed\",mailbox=\"default\"} 1", status, err)
	}
	if d := r.Emu.Deliveries(id); d != 1 {
		t.Errorf("emulator result: %d deliveries, want 1", d)
	}
}
