package sweeper_test

import (
	"strings"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay/acceptlog"
	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/sweeper"
)

// Found by the realism soak: an ambiguous send whose Message-ID Gmail
// replaced, before the verify pass had seen any rewrite in the mailbox,
// missed every search (the witness, a later send, was found), and was
// resent: delivered twice, outside review. Before a resend the sweeper now
// lists the Sent messages of the attempt's window; one carrying a
// Message-ID Gmail made sends the job to review instead.
func TestRewrittenAmbiguousSendNotResent(t *testing.T) {
	h := newHarness(t, setup{})
	h.srv.SetRewrite(gmailfake.RewritePolicy{Mode: gmailfake.RewriteAlways})
	id := h.sendAmbiguous(retryChannel) // stored under a Message-ID Gmail made
	h.srv.SetRewrite(gmailfake.RewritePolicy{})
	h.clock.Advance(10 * time.Second)
	h.send(retryChannel) // the witness: later, confirmed, searchable
	h.sweeps(4)
	h.wantJob(id, acceptlog.StateReview, 1, 0, 0)
	h.wantDeliveries(id, 1, "not resent")
	rl := h.lines(id, acceptlog.KindReview)
	if len(rl) != 1 || rl[0].Reason != sweeper.ReasonHandleUntrusted || !strings.Contains(rl[0].Note, "Gmail made") {
		t.Fatalf("review lines %+v, want one %q naming the Gmail-made id", rl, sweeper.ReasonHandleUntrusted)
	}
	for _, l := range h.lines(id, acceptlog.KindSearch) {
		if l.Witness != sweeper.WitnessFound {
			t.Errorf("search line %+v: want witness found (the misses counted; the window check decided)", l)
		}
	}
}

// A lost send (Gmail stored nothing) next to other relay sends in the same
// second is still resent once: their Message-IDs are the relay's.
func TestLostSendResentDespiteNeighbours(t *testing.T) {
	h := newHarness(t, setup{})
	h.send(retryChannel)
	lost := h.sendLost(retryChannel)
	h.send(retryChannel)
	h.sweeps(4)
	h.wantJob(lost, acceptlog.StateSent, 2, 1, 1)
	h.wantDeliveries(lost, 1, "")
}
