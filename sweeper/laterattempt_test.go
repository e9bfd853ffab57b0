package sweeper_test

import (
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay/acceptlog"
	"github.com/gmailrelay/gmailrelay/sweeper"
)

// A later send the sweeper has not yet seen in a pass is a later message
// all the same: found by the realism soak (seed 3607539641800771766: an
// ambiguous send Gmail stored, indexed 6.5 min late in fifo order, was
// resent after two misses with witness "none", and Gmail folded the resend
// into the one Sent copy — two deliveries, the job left sent). Between the
// two checks the relay had handed a later send to Gmail, not yet due for
// its verify pass, so the sweeper's memory of confirmed sends did not hold
// it and the companion after: query found nothing (fifo: the later copy is
// hidden at least as long). The acceptance log knows that send (its
// forwarding line): the witness is missing, not none, and no miss counts
// until the index shows the later message or the ambiguous one.
func TestLaterSendNotYetVerifiedKeepsTheWitnessMissing(t *testing.T) {
	h := newHarness(t, setup{indexLag: 5 * time.Minute})
	ambiguous := h.sendAmbiguous(retryChannel) // stored; searchable only 5 min later

	h.clock.Advance(grace)
	h.sweep() // check 1: nothing after the attempt anywhere (the time rule)
	h.clock.Advance(grace / 2)
	later, res := h.send(retryChannel) // Gmail confirms it; its verify is due one grace later
	h.wantState(later, res.Job, acceptlog.StateSent)
	h.clock.Advance(grace / 2)
	h.sweep() // check 2 of the ambiguous job, before the later send is due

	for range 8 {
		h.clock.Advance(grace)
		h.sweep()
	}
	if d := h.srv.Deliveries(ambiguous); d != 1 {
		t.Fatalf("emulator result: %d deliveries of the ambiguous send, want 1 (never resent)", d)
	}
	h.wantJob(ambiguous, acceptlog.StateSent, 1, 1, 1)
	searches := h.lines(ambiguous, acceptlog.KindSearch)
	if len(searches) < 2 {
		t.Fatalf("%d search lines, want at least 2", len(searches))
	}
	if w := searches[1].Witness; w != sweeper.WitnessMissing {
		t.Errorf("second search's witness %q, want %q (a later send was handed to Gmail)", w, sweeper.WitnessMissing)
	}
}

// The same after a restart between the later send and the check: the
// sweeper's memory is gone, the log's forwarding line is not.
func TestLaterSendAcrossARestartKeepsTheWitnessMissing(t *testing.T) {
	h := newHarness(t, setup{indexLag: 5 * time.Minute})
	ambiguous := h.sendAmbiguous(retryChannel)
	h.clock.Advance(grace)
	h.sweep()
	h.clock.Advance(grace / 2)
	h.send(retryChannel)
	h.restart()
	for range 9 {
		h.clock.Advance(grace / 2)
		h.sweep()
	}
	if d := h.srv.Deliveries(ambiguous); d != 1 {
		t.Fatalf("emulator result: %d deliveries of the ambiguous send, want 1 (never resent)", d)
	}
	h.wantJob(ambiguous, acceptlog.StateSent, 1, 1, 1)
}
