package sweeper_test

import (
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay/acceptlog"
	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/sweeper"
)

// Gmail stored one send twice (the emulator's duplicate fault) and its
// index shows neither copy for longer than the verify pass's two looks
// (lag 3 min, grace 1 min). The handle check read the message back under
// our Message-ID: the index is behind, so the verify pass keeps looking
// (at most lateLookGraces looks) instead of giving up, and sees both
// copies: review duplicate. Before, the second miss gave up and the job
// stayed sent with two deliveries (the realism soak's
// gmail_stored_one_send_twice_unseen).
func TestVerifyKeepsLookingWhileTheIndexIsBehind(t *testing.T) {
	h := newHarness(t, setup{indexLag: 3 * time.Minute})
	h.emulatorFault(gmailfake.Fault{Method: gmailfake.MethodSend, Action: gmailfake.ActionDuplicate})
	id, res := h.send(retryChannel)
	h.wantState(id, res.Job, acceptlog.StateSent)
	for range 4 {
		h.clock.Advance(grace)
		h.sweep()
	}
	if d := h.srv.Deliveries(id); d != 2 {
		t.Fatalf("emulator result: %d deliveries, want 2 (Gmail stored the send twice)", d)
	}
	if got := h.job(id).State; got != acceptlog.StateReview {
		t.Fatalf("state %s, want review (two copies once the index caught up)", got)
	}
	if r := h.lines(id, acceptlog.KindReview); len(r) != 1 || r[0].Reason != sweeper.ReasonDuplicate {
		t.Fatalf("review lines %+v, want one with reason %s", r, sweeper.ReasonDuplicate)
	}
}

// The index never shows a sent message that Gmail still holds under our
// Message-ID: the verify pass looks a bounded number of times and then
// gives up (the job stays sent, as Gmail's answer said).
func TestVerifyGivesUpAfterBoundedLooksWhileTheIndexIsBehind(t *testing.T) {
	h := newHarness(t, setup{indexLag: 24 * time.Hour})
	id, _ := h.send(retryChannel)
	looks := 0
	for range 30 {
		h.clock.Advance(grace)
		looks += h.sweep().Checked
	}
	j := h.job(id)
	if j.State != acceptlog.StateSent || !j.NextCheckAt.IsZero() {
		t.Fatalf("state %s, next check %v; want sent with nothing scheduled", j.State, j.NextCheckAt)
	}
	if looks != 10 {
		t.Errorf("%d verify looks, want 10 (lateLookGraces)", looks)
	}
	if got := h.lines(id, acceptlog.KindSearch); got[len(got)-1].Reason != sweeper.ReasonVerifyGaveUp {
		t.Errorf("last search line %+v, want reason %s", got[len(got)-1], sweeper.ReasonVerifyGaveUp)
	}
}
