package sweeper_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/policy"
	"github.com/gmailrelay/gmailrelay/relay"
	"github.com/gmailrelay/gmailrelay/sweeper"
)

// companionDown answers 503 to the companion after: query (a list with no
// label) while on; every other Gmail call goes through to the emulator.
type companionDown struct {
	relay.Provider
	on    bool
	fails int
}

func (c *companionDown) List(ctx context.Context, mailbox, q string, labels []string, tok string, max int64) (relay.ListPage, error) {
	if c.on && strings.HasPrefix(q, "after:") && len(labels) == 0 {
		c.fails++
		return relay.ListPage{}, &relay.ProviderError{Status: http.StatusServiceUnavailable, Reason: "backendError", Message: "Backend Error"}
	}
	return c.Provider.List(ctx, mailbox, q, labels, tok, max)
}

// slowIndexFor makes the emulator index the next message it stores only
// after lag, and every later one at once: an ambiguous copy Gmail indexes
// late while the sends after it are searchable, so they witness the misses.
func (h *harness) slowIndexFor(lag time.Duration, send func() string) string {
	h.t.Helper()
	h.srv.SetIndexLagDistribution(gmailfake.LagDistribution{P50: lag, P99: lag, Max: lag}, gmailfake.IndexRandom)
	id := send()
	h.srv.SetIndexLagDistribution(gmailfake.LagDistribution{P50: time.Second, P99: time.Second, Max: time.Second}, gmailfake.IndexRandom)
	return id
}

// wantFoundBySearch checks that the ambiguous job id ended sent on its
// first attempt, its copy found by a search (one effect line, source
// search), and that the emulator delivered it once.
func (h *harness) wantFoundBySearch(id, why string) {
	h.t.Helper()
	h.wantDeliveries(id, 1, why)
	j := h.job(id)
	h.wantState(id, j, gmailrelay.StateSent)
	effects := h.lines(id, gmailrelay.KindEffect)
	if len(effects) != 1 || effects[0].Source != gmailrelay.SourceSearch {
		h.t.Fatalf("effect lines %+v, want one with source search", effects)
	}
}

// A companion after: query Gmail answers with an error found no witness:
// the miss does not count (witness missing), and the ambiguous send Gmail
// stored is found once the index shows it, never resent.
func TestEmulatorCompanionErrorCountsNoMiss(t *testing.T) {
	h := newHarness(t, setup{indexLag: 5 * time.Minute})
	// A channel whose verify comes late, so that the later send is not in
	// the ambiguous job's batch: only the companion can witness.
	h.te.Policy.Channels["late"] = policy.Channel{Name: "late", OnUnknown: policy.Retry, Grace: 10 * time.Minute, Checks: 2, MaxAttempts: 3}
	down := &companionDown{Provider: h.prov, on: true}
	h.prov = down
	h.build(0)
	id := h.sendAmbiguous(retryChannel) // stored, searchable after 5 min
	h.clock.Advance(10 * time.Second)
	h.send("late") // a later send Gmail confirmed, searchable after 5 min
	h.sweeps(3)
	if down.fails == 0 {
		t.Fatal("the companion query was never made")
	}
	for _, l := range h.lines(id, gmailrelay.KindSearch) {
		if l.Witness != sweeper.WitnessMissing {
			t.Errorf("search line %+v while the companion failed: want witness missing", l)
		}
	}
	if j := h.job(id); j.State != gmailrelay.StateUnknown || j.Checks != 0 || j.Attempts != 1 {
		t.Fatalf("job %s after the failed companions: %s, %d checks, %d attempts; want unknown, no miss counted, 1 attempt",
			id, j.State, j.Checks, j.Attempts)
	}
	h.sweeps(3)
	h.wantFoundBySearch(id, "resent although no witness showed the index had caught up")
}

// A resend decided on misses and then held back by the daily budget is
// not made a day later on those old misses: the job is searched again when
// the budget frees, and the ambiguous copy, searchable long since, is found.
func TestEmulatorResendHeldByBudgetSearchesAgain(t *testing.T) {
	h := newHarness(t, setup{})
	h.te.Policy.Mailboxes = map[string]policy.Mailbox{policy.DefaultMailbox: {Name: policy.DefaultMailbox, DailySendLimit: 3}}
	h.build(0)
	id := h.slowIndexFor(30*time.Minute, func() string { return h.sendAmbiguous(retryChannel) })
	h.clock.Advance(10 * time.Second)
	h.send(retryChannel)
	h.send(retryChannel) // the witnesses; the budget of 3 is spent
	h.clock.Advance(50 * time.Second)
	h.sweep() // check 1: a witnessed miss
	h.clock.Advance(grace)
	r := h.sweep() // check 2: the resend is refused by the budget
	if r.Resent != 0 || h.job(id).Checks != 2 {
		t.Fatalf("pass %+v, job %+v: want the last miss recorded and no resend", r, h.job(id))
	}
	h.wantDeliveries(id, 1, "")
	for range 25 {
		h.clock.Advance(time.Hour)
		h.sweep()
	}
	h.wantFoundBySearch(id, "resent a day after the misses, without searching again")
	if j := h.job(id); j.Attempts != 1 {
		t.Errorf("job %s: %d attempts, want 1 (no resend)", id, j.Attempts)
	}
	// The misses, then the search once the budget freed, which found it.
	searches := h.lines(id, gmailrelay.KindSearch)
	if len(searches) < 3 || searches[2].Hits != 1 || searches[2].Time.Sub(searches[1].Time) < relay.BudgetWindow-time.Hour {
		t.Errorf("search lines %+v: want two misses, then a search that found the copy once the budget freed", searches)
	}
}

// A resend Gmail refused with a rate limit leaves the job failed and
// retryable; its earlier attempt was ambiguous, so the retry, once the
// miss behind it is stale, searches first: the copy that became searchable
// meanwhile is found (failed → sent) and nothing is sent twice.
func TestEmulatorRetryAfterAmbiguousAttemptSearchesAgain(t *testing.T) {
	h := newHarness(t, setup{})
	id := h.slowIndexFor(30*time.Minute, func() string { return h.sendAmbiguous(retryChannel) })
	h.clock.Advance(10 * time.Second)
	h.send(retryChannel) // the witness
	h.clock.Advance(50 * time.Second)
	h.sweep() // check 1
	h.emulatorFault(gmailfake.Fault{Method: gmailfake.MethodSend, Action: gmailfake.ActionError, Status: http.StatusTooManyRequests, Count: -1})
	h.clock.Advance(grace)
	h.sweep() // check 2 → resend → Gmail 429
	j := h.job(id)
	if j.State != gmailrelay.StateFailed || !j.Retryable || j.Attempts != 2 {
		t.Fatalf("job %s after the rate-limited resend: %s (retryable %v), %d attempts; want failed, retryable, 2",
			id, j.State, j.Retryable, j.Attempts)
	}
	for h.clock.Now().Sub(j.AmbiguousAt) < 35*time.Minute {
		h.clock.Advance(grace)
		h.sweep()
	}
	h.srv.ClearFaults() // Gmail takes sends again
	for range 30 {      // past the longest rate-limit pause (15 min)
		h.clock.Advance(grace)
		h.sweep()
	}
	h.wantFoundBySearch(id, "retried on the misses made before Gmail's rate limit, without searching again")
	// Every retry of the failed job followed a search of its own.
	retries, searched := 0, 0
	for _, l := range h.lines(id, "") {
		switch {
		case l.Kind == gmailrelay.KindReceived && l.Reason == sweeper.ReasonRetry:
			retries++
		case l.Kind == gmailrelay.KindSearch && l.Check > 2 && l.Hits == 0:
			searched++
		}
	}
	if retries == 0 || searched != retries {
		t.Errorf("%d retries, %d searches of the failed job that missed: want a search before every retry", retries, searched)
	}
	for _, l := range h.lines(id, gmailrelay.KindNotSent) {
		if l.Reason != gmailrelay.ReasonRateLimited {
			t.Errorf("not_sent line %+v: want only rate-limited attempts", l)
		}
	}
}

// A resend refused by the relay's daily budget defers that job alone, to
// when the budget frees: the mailbox's other searches and verifies go on,
// and an ambiguous send Gmail stored is found within minutes.
func TestEmulatorBudgetRefusalKeepsSweeping(t *testing.T) {
	h := newHarness(t, setup{})
	h.te.Policy.Mailboxes = map[string]policy.Mailbox{policy.DefaultMailbox: {Name: policy.DefaultMailbox, DailySendLimit: 3}}
	h.build(0)
	lost := h.sendLost(retryChannel) // Gmail 500, nothing stored
	h.clock.Advance(10 * time.Second)
	witness, _ := h.send(retryChannel)
	h.clock.Advance(50 * time.Second)
	h.sweep() // lost: check 1
	h.clock.Advance(30 * time.Second)
	stored := h.sendAmbiguous(retryChannel) // stored, answered 500; the budget is spent
	h.clock.Advance(30 * time.Second)
	r := h.sweep() // lost: check 2, its resend refused by the budget
	if r.Wait != 0 || r.Resent != 0 {
		t.Errorf("pass %+v: want no resend and no wait (only the refused job waits)", r)
	}
	if j := h.job(lost); j.State != gmailrelay.StateUnknown || j.NextCheckAt.Sub(h.clock.Now()) < relay.BudgetWindow-time.Hour {
		t.Errorf("job %s: %s, next check %v; want unknown, checked again when the budget frees (about 24 h)", lost, j.State, j.NextCheckAt)
	}
	h.sweeps(3)
	h.wantFoundBySearch(stored, "")
	if j := h.job(witness); !j.Verified && j.VerifyLooks == 0 {
		t.Errorf("job %s: not verified while the budget was spent", witness)
	}
	h.wantDeliveries(lost, 0, "resent while the daily budget was spent")
	for range 26 {
		h.clock.Advance(time.Hour)
		h.sweep()
	}
	h.wantDeliveries(lost, 1, "the resend once the budget freed")
	h.wantJob(lost, gmailrelay.StateSent, 2, 1, 1)
}
