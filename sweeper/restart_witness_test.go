package sweeper_test

import (
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay/acceptlog"
	"github.com/gmailrelay/gmailrelay/sweeper"
)

// Witnesses survive a restart: the newest send Gmail confirmed is kept in
// the mailbox's record, so after a restart the search of an ambiguous job
// still carries it. Here Gmail stored the ambiguous send, but the index is
// 15 minutes behind; a later send is confirmed, its verify gives up before
// the index catches up (ten looks, one a grace), and the relay restarts. Without the recorded
// witness the search's witness would be none, the time rule would count
// two misses and resend a message Gmail has (delivered twice). With it,
// the later send rides in the query, is not found (missing), no miss
// counts, and once the index caught up the job is found: sent, once.
func TestWitnessSurvivesRestart(t *testing.T) {
	h := newHarness(t, setup{indexLag: 15 * time.Minute})
	id := h.sendAmbiguous(retryChannel) // Gmail has it; searchable after 15m
	h.clock.Advance(10 * time.Second)
	later, res := h.send(retryChannel)
	h.wantState(later, res.Job, acceptlog.StateSent)
	for range 12 { // both searched; the later one's verify gives up after ten misses
		h.clock.Advance(grace)
		h.sweep()
		if h.job(later).NextCheckAt.IsZero() {
			break
		}
	}
	if j := h.job(later); !j.NextCheckAt.IsZero() {
		t.Fatalf("the later send is still due (%v); the test needs it settled before the restart", j.NextCheckAt)
	}
	mb, err := h.log.Mailbox(h.ctx, h.job(id).Mailbox)
	if err != nil || mb.LastSendID != later {
		t.Fatalf("mailbox record %+v (%v): want the later send %s as its newest", mb, err, later)
	}

	h.restart()
	h.sweeps(8)
	h.wantJob(id, acceptlog.StateSent, 1, 1, 1)
	h.wantDeliveries(id, 1, "not resent")
	missing := 0
	for _, l := range h.lines(id, acceptlog.KindSearch) {
		if l.Witness == sweeper.WitnessMissing {
			missing++
		}
		if l.Witness == sweeper.WitnessNone {
			t.Errorf("search line %+v: witness none, want the recorded send as witness", l)
		}
	}
	if missing == 0 {
		t.Error("no search with witness missing: the recorded send never rode in the query")
	}
}
