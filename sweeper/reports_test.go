package sweeper_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/relay"
)

// sendTo sends a message to the given recipients through the front door
// and returns the job.
func (h *harness) sendTo(key string, to ...string) gmailrelay.Job {
	h.t.Helper()
	p, err := relay.Prepare(relay.SendRequest{Key: key, Channel: retryChannel, From: gmailfake.DefaultAccount,
		To: relay.AddressList(to), Subject: "Your invoice", Text: "Attached."}, "", "relay.test", h.clock.Now())
	if err != nil {
		h.t.Fatalf("prepare: %v", err)
	}
	res, err := h.svc.Send(h.ctx, p, relay.SendOptions{})
	if err != nil {
		h.t.Fatalf("send %s: %v", key, err)
	}
	return res.Job
}

// Emulator result. A send to ok@example.org and x@bounce.test is sent; the
// emulator's report for x@bounce.test (RFC 3464, in INBOX 30 s later) is
// read by the history tail within 30 s of its arrival: one bounce line
// (failed, 5.1.1, the report's gmail id), the job still sent with
// Bounced 1, delivery partly_bounced. Reading INBOX costs the listing it
// shares with SENT, 5 units for the report's sender and 5 for the report.
func TestEmulatorBounceRecordedOnTheJob(t *testing.T) {
	h := newHarness(t, setup{history: true, policy: historyPolicy(0, "")})
	h.sweep()
	j := h.sendTo("bounce-1", "ok@example.org", "x@bounce.test")
	if j.State != gmailrelay.StateSent {
		t.Fatalf("send: %s, want sent", j.State)
	}
	if b := h.srv.Bounced(j.MessageID); len(b) != 1 || b[0] != "x@bounce.test" {
		t.Fatalf("emulator ground truth: bounced %v, want [x@bounce.test]", b)
	}
	h.clock.Advance(30 * time.Second) // the emulator's report arrives
	units := h.srv.Stats().QuotaUnits
	took := h.passEvery(5*time.Second, time.Minute, func() bool { return h.job(j.MessageID).Bounced > 0 })
	if took > 30*time.Second {
		t.Fatalf("after %s the report is not on the job", took)
	}
	got := h.wantJob(j.MessageID, gmailrelay.StateSent, 1, 1, 1)
	bounces := h.lines(j.MessageID, gmailrelay.KindBounce)
	if got.Bounced != 1 || len(bounces) != 1 || bounces[0].Recipient != "x@bounce.test" || bounces[0].Action != "failed" ||
		bounces[0].DSNStatus != "5.1.1" || bounces[0].GmailID == "" {
		t.Fatalf("job bounced %d, bounce lines %+v; want one failed 5.1.1 for x@bounce.test", got.Bounced, bounces)
	}
	if d := gmailrelay.DeliveryOf(h.lines(j.MessageID, ""), 2); d.State != gmailrelay.DeliveryPartlyBounced {
		t.Errorf("delivery %+v, want partly_bounced", d)
	}
	spent := h.srv.Stats().QuotaUnits - units
	t.Logf("emulator result: the report was on the job after %s, for %d quota units", took, spent)
	if passes := int(took / (5 * time.Second)); spent > 2*passes+10 {
		t.Errorf("reading the report cost %d units over %d passes, want at most 2 a pass plus 10", spent, passes)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(h.sw.ReportCollector())
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var series []string
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			labels := ""
			for _, l := range m.GetLabel() {
				labels += l.GetName() + "=" + l.GetValue() + ","
			}
			series = append(series, fmt.Sprintf("%s{%s} %v", f.GetName(), labels, m.GetCounter().GetValue()))
		}
	}
	if want := "gmailrelay_bounces_total{action=failed,mailbox=default,} 1"; !slices.Contains(series, want) {
		t.Errorf("metrics %q, want %s", series, want)
	}
	// Read again (a cursor re-read) changes nothing.
	h.passEvery(5*time.Second, 20*time.Second, func() bool { return false })
	if n := len(h.lines(j.MessageID, gmailrelay.KindBounce)); n != 1 {
		t.Errorf("%d bounce lines after more passes, want 1", n)
	}
}

// Emulator result. The daily limit is 3 and Gmail keeps answering 200 for
// 2 sends past it: sends 4 and 5 are stored, never delivered, and Gmail's
// nobody@gmail.com notice follows. Every send of the window is put in
// review (sending_limit_bounce) — no job stays sent that the emulator did
// not deliver — and the next send waits for the daily budget.
func TestEmulatorSendingLimitNoticePutsTheWindowInReview(t *testing.T) {
	h := newHarness(t, setup{history: true, policy: historyPolicy(0, ""), dailyLimit: 3, dailyLag: 2})
	h.sweep()
	var ids []string
	for i := range 5 {
		j := h.sendTo("limit-"+string(rune('a'+i)), "customer@example.net")
		if j.State != gmailrelay.StateSent {
			t.Fatalf("send %d: %s, want sent (Gmail answered 200)", i+1, j.State)
		}
		ids = append(ids, j.MessageID)
	}
	if !h.srv.Undelivered(ids[3]) || !h.srv.Undelivered(ids[4]) || h.srv.Undelivered(ids[2]) {
		t.Fatalf("emulator ground truth: undelivered %v %v %v, want false true true", h.srv.Undelivered(ids[2]), h.srv.Undelivered(ids[3]), h.srv.Undelivered(ids[4]))
	}
	h.clock.Advance(30 * time.Second)
	h.passEvery(5*time.Second, time.Minute, func() bool { return h.job(ids[4]).State == gmailrelay.StateReview })
	for _, id := range ids {
		j := h.job(id)
		if j.State != gmailrelay.StateReview {
			t.Errorf("%s: %s, want review", id, j.State)
		}
		reviews := h.lines(id, gmailrelay.KindReview)
		if len(reviews) != 1 || reviews[0].Reason != gmailrelay.ReasonSendingLimitBounce {
			t.Errorf("%s: review lines %+v, want one sending_limit_bounce", id, reviews)
		}
		if j.State == gmailrelay.StateSent && h.srv.Undelivered(id) {
			t.Errorf("%s is sent but the emulator never delivered it", id)
		}
	}
	p, err := relay.Prepare(relay.SendRequest{Key: "limit-after", Channel: retryChannel, From: gmailfake.DefaultAccount,
		To: relay.AddressList{"customer@example.net"}, Subject: "s", Text: "t"}, "", "relay.test", h.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	res, err := h.svc.Send(h.ctx, p, relay.SendOptions{Queue: true})
	if err != nil || res.Job.State != gmailrelay.StateQueued {
		t.Errorf("a send after the notice: %+v, %v; want queued for the daily budget", res.Job.State, err)
	}
	if d := h.srv.Deliveries(p.MessageID); d != 0 {
		t.Errorf("emulator result: the send after the notice was delivered %d times, want 0", d)
	}
}
