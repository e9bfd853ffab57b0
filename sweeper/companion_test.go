package sweeper_test

import (
	"strings"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay/acceptlog"
	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/sweeper"
)

// The companion after: query (CONTRACT, "Witness before a miss"): when no
// confirmed later send rides in the OR query, one messages.list with
// q=after:<epoch seconds>, maxResults=1, finds any message dated after the
// attempt. Here a later job's message is stored (its answer was lost, so
// the relay has confirmed no later send): without the companion query the
// lost job's witness would be missing (a later job is known) and no miss
// would count; the companion query finds that message, so the witness is
// found and the miss counts.
func TestCompanionQueryFindsWitness(t *testing.T) {
	h := newHarness(t, setup{})
	lost := h.sendLost(retryChannel)
	h.clock.Advance(10 * time.Second)
	stored := h.sendAmbiguous(retryChannel) // Gmail has it; the relay does not know yet
	before := h.srv.Stats()
	h.clock.Advance(grace)
	wantResult(t, h.sweep(), sweeper.Result{Checked: 2, Found: 1, Missed: 1})
	searches := h.lines(lost, acceptlog.KindSearch)
	if len(searches) != 1 || searches[0].Witness != sweeper.WitnessFound {
		t.Fatalf("search lines %+v, want one with witness found", searches)
	}
	if j := h.job(lost); j.Checks != 1 {
		t.Errorf("checks %d, want 1: the miss counts", j.Checks)
	}
	h.wantJob(stored, acceptlog.StateSent, 1, 1, 1)
	after := h.srv.Stats()
	if got := after.Calls[gmailfake.MethodList] - before.Calls[gmailfake.MethodList]; got != 2 {
		t.Errorf("emulator result: %d list calls, want 2 (the OR query and one companion query)", got)
	}
	if got := after.QuotaUnits - before.QuotaUnits; got != 5+5+5 {
		t.Errorf("emulator result: %d quota units, want 15 (list 5, get 5 to attribute the hit, companion list 5)", got)
	}
	// The lost job is resent after its second miss, once.
	h.sweeps(3)
	h.wantJob(lost, acceptlog.StateSent, 2, 1, 1)
	h.wantDeliveries(lost, 1, "")
}

// A message a person sent from Gmail itself (not through the relay) is a
// witness too: any message dated after the attempt.
func TestCompanionQueryFindsForeignMessage(t *testing.T) {
	h := newHarness(t, setup{})
	lost := h.sendLost(retryChannel)
	h.clock.Advance(10 * time.Second)
	raw := "From: " + gmailfake.DefaultAccount + "\r\nTo: someone@example.net\r\nSubject: by hand\r\n\r\nHello.\r\n"
	if _, err := h.prov.Send(h.ctx, "me", []byte(raw), ""); err != nil {
		t.Fatalf("send by hand: %v", err)
	}
	h.clock.Advance(grace)
	h.sweep()
	if s := h.lines(lost, acceptlog.KindSearch); len(s) != 1 || s[0].Witness != sweeper.WitnessFound {
		t.Fatalf("search lines %+v, want one with witness found", s)
	}
}

// No message at all dated after the attempt: the companion query answers
// nothing, the witness is none and the time rule decides (the miss counts;
// resent after checks × grace), and the companion's 5 units are spent once
// per pass.
func TestCompanionQueryNoneTimeRule(t *testing.T) {
	h := newHarness(t, setup{})
	lost := h.sendLost(retryChannel)
	before := h.srv.Stats()
	h.clock.Advance(grace)
	wantResult(t, h.sweep(), sweeper.Result{Checked: 1, Missed: 1})
	after := h.srv.Stats()
	if got := after.Calls[gmailfake.MethodList] - before.Calls[gmailfake.MethodList]; got != 2 {
		t.Errorf("emulator result: %d list calls, want 2 (the search and the companion query)", got)
	}
	if got := after.QuotaUnits - before.QuotaUnits; got != 10 {
		t.Errorf("emulator result: %d quota units, want 10", got)
	}
	s := h.lines(lost, acceptlog.KindSearch)
	if len(s) != 1 || s[0].Witness != sweeper.WitnessNone || !strings.Contains(s[0].Query, "rfc822msgid:") {
		t.Fatalf("search lines %+v, want one with witness none", s)
	}
	h.clock.Advance(grace)
	h.sweep()
	h.wantJob(lost, acceptlog.StateSent, 2, 1, 1)
	h.wantDeliveries(lost, 1, "")
}

// The companion query never sees the job's own copy: its seconds are the
// attempt end rounded up, and Gmail's after: is "at or after". A stored
// ambiguous send whose Message-ID Gmail rewrote is not found by its search
// and must not be its own witness.
func TestCompanionQueryIgnoresOwnCopy(t *testing.T) {
	h := newHarness(t, setup{})
	h.clock.Advance(300 * time.Millisecond) // an attempt end inside a second
	h.srv.SetRewrite(gmailfake.RewritePolicy{Mode: gmailfake.RewriteAlways})
	id := h.sendAmbiguous(retryChannel)
	h.srv.SetRewrite(gmailfake.RewritePolicy{})
	h.clock.Advance(grace)
	h.sweep()
	if s := h.lines(id, acceptlog.KindSearch); len(s) != 1 || s[0].Witness != sweeper.WitnessNone {
		t.Fatalf("search lines %+v, want one with witness none (its own copy is no witness)", s)
	}
}
