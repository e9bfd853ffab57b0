package sweeper_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay/acceptlog"
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
	h.wantState(later, res.Job, acceptlog.StateSent)

	for i := 0; i < 80; i++ {
		h.clock.Advance(grace)
		h.sweep()
		if h.job(lost).State != acceptlog.StateUnknown {
			break
		}
	}
	j := h.wantJob(lost, acceptlog.StateReview, 1, 0, 0)
	if got := reviewReason(h, lost); got != sweeper.ReasonIndexUnverifiable {
		t.Fatalf("review reason %q, want %q", got, sweeper.ReasonIndexUnverifiable)
	}
	h.wantDeliveries(lost, 0, "never resent")
	if waited := j.UpdatedAt.Sub(j.AmbiguousAt); waited < time.Hour || waited > time.Hour+2*grace {
		t.Errorf("review after %s, want just after max_unwitnessed (1h)", waited)
	}
	searches := h.lines(lost, acceptlog.KindSearch)
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
	cfg := sweeper.ConfigFor(h.svc)
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
	h.wantJob(lost, acceptlog.StateSent, 2, 1, 1)
	h.wantDeliveries(lost, 1, "")
	for _, l := range h.lines(lost, acceptlog.KindSearch) {
		if l.Hits == 0 && l.Witness != sweeper.WitnessFound {
			t.Errorf("search line %+v: want witness found", l)
		}
	}
}
