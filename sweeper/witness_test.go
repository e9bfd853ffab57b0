package sweeper_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/relay"
	"github.com/gmailrelay/gmailrelay/sweeper"
)

// blindGmail makes every rfc822msgid query one the emulator cannot parse,
// which it answers, like Gmail (no --strict-queries), with 200 and no
// messages: a query Gmail silently cannot match.
type blindGmail struct{ relay.Provider }

func (g blindGmail) List(ctx context.Context, mailbox, q string, labels []string, token string, max int64) (relay.ListPage, error) {
	if strings.Contains(q, "rfc822msgid:") {
		q += " unsupported-operator:x"
	}
	return g.Provider.List(ctx, mailbox, q, labels, token, max)
}

// (d) A query Gmail silently cannot match: the later confirmed send that
// rides in the same OR query is not found either, so the witness is
// missing, no miss is counted and nothing is resent; after max_unwitnessed
// (1h by default) the job goes to review index_unverifiable.
func TestSilentlyUnmatchedQueryNeverResends(t *testing.T) {
	h := newHarness(t, setup{})
	h.prov = blindGmail{h.prov}
	h.build(0)
	lost := h.sendLost(retryChannel) // Gmail really does not have it
	h.clock.Advance(10 * time.Second)
	later, res := h.send(retryChannel) // a later send Gmail confirmed
	h.wantState(later, res.Job, gmailrelay.StateSent)

	for i := 0; i < 80; i++ {
		h.clock.Advance(grace)
		h.sweep()
		if h.job(lost).State != gmailrelay.StateUnknown {
			break
		}
	}
	j := h.wantJob(lost, gmailrelay.StateReview, 1, 0, 0)
	if got := reviewReason(h, lost); got != sweeper.ReasonIndexUnverifiable {
		t.Fatalf("review reason %q, want %q", got, sweeper.ReasonIndexUnverifiable)
	}
	h.wantDeliveries(lost, 0, "never resent")
	if waited := j.UpdatedAt.Sub(j.AmbiguousAt); waited < time.Hour || waited > time.Hour+2*grace {
		t.Errorf("review after %s, want just after max_unwitnessed (1h)", waited)
	}
	searches := h.lines(lost, gmailrelay.KindSearch)
	if len(searches) < 2 {
		t.Fatalf("%d search lines", len(searches))
	}
	for _, l := range searches {
		if l.Witness != sweeper.WitnessMissing || l.Check != 1 {
			t.Errorf("search line %+v: want witness missing and no miss counted (check stays 1)", l)
		}
	}
	if h.job(lost).Checks != 0 {
		t.Errorf("checks %d, want 0: no miss counted", h.job(lost).Checks)
	}
}

// The same job with the old rule (every miss counts): resent after two
// checks, though the search could never have found it.
func TestSilentlyUnmatchedQueryOldRuleResends(t *testing.T) {
	h := newHarness(t, setup{})
	h.prov = blindGmail{h.prov}
	h.build(0)
	cfg := h.te.SweeperConfig()
	cfg.DisableWitness = true
	h.sw = sweeper.New(cfg)
	id := h.sendAmbiguous(retryChannel) // Gmail has it
	h.sweeps(3)
	if d := h.srv.Deliveries(id); d != 2 {
		t.Fatalf("emulator result with the old rule: %d deliveries, want 2 (the resend this issue prevents)", d)
	}
}

// A lost send in a mailbox whose index caught up (the later send that
// rides in the query is found): the witness is found, the misses count,
// and the job is resent once.
func TestWitnessFoundCountsTheMiss(t *testing.T) {
	h := newHarness(t, setup{})
	lost := h.sendLost(retryChannel)
	h.clock.Advance(10 * time.Second)
	h.send(retryChannel)
	h.sweeps(3)
	h.wantJob(lost, gmailrelay.StateSent, 2, 1, 1)
	h.wantDeliveries(lost, 1, "")
	for _, l := range h.lines(lost, gmailrelay.KindSearch) {
		if l.Hits == 0 && l.Witness != sweeper.WitnessFound {
			t.Errorf("search line %+v: want witness found", l)
		}
	}
}

// The companion after: query (docs/design.md#the-witness-rule): when no
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
	searches := h.lines(lost, gmailrelay.KindSearch)
	if len(searches) != 1 || searches[0].Witness != sweeper.WitnessFound {
		t.Fatalf("search lines %+v, want one with witness found", searches)
	}
	if j := h.job(lost); j.Checks != 1 {
		t.Errorf("checks %d, want 1: the miss counts", j.Checks)
	}
	h.wantJob(stored, gmailrelay.StateSent, 1, 1, 1)
	after := h.srv.Stats()
	if got := after.Calls[gmailfake.MethodList] - before.Calls[gmailfake.MethodList]; got != 2 {
		t.Errorf("emulator result: %d list calls, want 2 (the OR query and one companion query)", got)
	}
	if got := after.QuotaUnits - before.QuotaUnits; got != 5+5+5 {
		t.Errorf("emulator result: %d quota units, want 15 (list 5, get 5 to attribute the hit, companion list 5)", got)
	}
	// The lost job is resent after its second miss, once.
	h.sweeps(3)
	h.wantJob(lost, gmailrelay.StateSent, 2, 1, 1)
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
	h.wantOneSearch(lost, sweeper.WitnessFound, "the message sent by hand")
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
	if s := h.wantOneSearch(lost, sweeper.WitnessNone, "no message after the attempt"); !strings.Contains(s.Query, "rfc822msgid:") {
		t.Fatalf("search line %+v, want an rfc822msgid: query", s)
	}
	h.clock.Advance(grace)
	h.sweep()
	h.wantJob(lost, gmailrelay.StateSent, 2, 1, 1)
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
	h.wantOneSearch(id, sweeper.WitnessNone, "its own copy is no witness")
}

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
	// Gmail rewrote the id: no copy carries the relay's id, yet one was delivered.
	h.wantJobCopies(id, gmailrelay.StateReview, 1, 0, 1, 0) // delivered once, not resent
	rl := h.lines(id, gmailrelay.KindReview)
	if len(rl) != 1 || rl[0].Reason != sweeper.ReasonHandleUntrusted || !strings.Contains(rl[0].Note, "Gmail made") {
		t.Fatalf("review lines %+v, want one %q naming the Gmail-made id", rl, sweeper.ReasonHandleUntrusted)
	}
	for _, l := range h.lines(id, gmailrelay.KindSearch) {
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
	h.wantJob(lost, gmailrelay.StateSent, 2, 1, 1)
	h.wantDeliveries(lost, 1, "")
}

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
	h.wantState(later, res.Job, gmailrelay.StateSent)
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
	h.wantJob(id, gmailrelay.StateSent, 1, 1, 1)
	h.wantDeliveries(id, 1, "not resent")
	missing := 0
	for _, l := range h.lines(id, gmailrelay.KindSearch) {
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
	h.wantState(later, res.Job, gmailrelay.StateSent)
	h.clock.Advance(grace / 2)
	h.sweep() // check 2 of the ambiguous job, before the later send is due

	for range 8 {
		h.clock.Advance(grace)
		h.sweep()
	}
	if d := h.srv.Deliveries(ambiguous); d != 1 {
		t.Fatalf("emulator result: %d deliveries of the ambiguous send, want 1 (never resent)", d)
	}
	h.wantJob(ambiguous, gmailrelay.StateSent, 1, 1, 1)
	searches := h.lines(ambiguous, gmailrelay.KindSearch)
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
	h.wantJob(ambiguous, gmailrelay.StateSent, 1, 1, 1)
}
