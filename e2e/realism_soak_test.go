package e2e_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/e2e"
	"github.com/gmailrelay/gmailrelay/gmailfake"
)

// realism is the Gmail-like emulator of the realism soak: a long-tailed
// index lag (fifo), Sent copies folded (--sent-dedupe), rate-limit answers
// with the retry time only in the text (no Retry-After header) from a real
// per-minute quota, a "user" who trashes Sent copies while the relay
// works, and, for the last part of the run, a fraction of Message-IDs
// rewritten. Rewriting starts late because its first detected rewrite
// makes the mailbox untrusted, and from then on every ambiguous job goes
// to review without a search: the earlier part is where the witness rule
// and the lag tail decide.
type realism struct {
	seed    int64
	rewrite float64
	// rewriteAfter is the chaos step (one per request) from which the
	// fraction applies; until then Gmail rewrites only malformed ids
	// (none: the relay's are strict).
	rewriteAfter int64
	lag          gmailfake.LagDistribution
	quota        int // the emulator's per-minute units (the relay's own budget stays far above)
	trashPer     int // per mille of chaos steps where the user trashes a Sent copy
	longPer      int // per mille of chaos steps where a long stretch of time passes

	relay   *relayProc // set by runSoak
	steps   atomic.Int64
	trashed atomic.Int64
	longs   atomic.Int64
}

// options sets the emulator's Gmail-like behaviours.
func (re *realism) options(o *gmailfake.Options) {
	o.Seed = re.seed
	o.Rewrite = gmailfake.RewritePolicy{Mode: gmailfake.RewriteMalformed}
	o.IndexLagDistribution, o.IndexOrder = re.lag, gmailfake.IndexFIFO
	o.SentDedupe = true
	o.RateLimitHeader = false // Gmail-like: the retry time is only in the message text
	o.QuotaPerMinute = re.quota
}

// chaos is the realism's step after each request, next to the soak's own:
// a user trashing a random Sent copy by hand, or a long stretch of time
// (minutes: longer than checks × grace, up to the lag tail's max) passing
// with a sweep.
func (re *realism) chaos(r *relayProc, rng *rand.Rand) {
	if re.steps.Add(1) == re.rewriteAfter {
		r.Emu.SetRewrite(gmailfake.RewritePolicy{Mode: gmailfake.RewriteFraction, Fraction: re.rewrite})
	}
	switch n := rng.IntN(1000); {
	case n < re.trashPer:
		var sent []string
		for _, m := range r.Emu.Messages("") {
			if !m.Trashed && !m.Deleted && slices.Contains(m.LabelIDs, "SENT") {
				sent = append(sent, m.ID)
			}
		}
		if len(sent) > 0 && r.Emu.Trash(sent[rng.IntN(len(sent))]) == nil {
			re.trashed.Add(1)
		}
	case n < re.trashPer+re.longPer:
		re.longs.Add(1)
		_ = r.advance(time.Duration(2+rng.IntN(11)) * time.Minute)
		_ = r.admin("POST", "/admin/sweep", "", 200, nil)
	}
}

// TestRealismSoak is the randomized soak (TestSoak's callers, faults and
// SIGKILLs) against the Gmail-like emulator: Message-IDs rewritten at
// random, an index lag of p50=2s,p99=2m,max=10m in fifo order, Sent copies
// folded, rate limits without a Retry-After header, and a user trashing
// Sent copies; the relay runs its history tail (serve's default). The
// ground truth is the emulator's deliveries, never its
// copies: 0 Message-IDs delivered more than once outside review, 0 lost,
// 0 stuck (emulator results).
func TestRealismSoak(t *testing.T) {
	forEachSoakSeed(t, func(t *testing.T, seed int64) {
		rng := rand.New(rand.NewPCG(uint64(seed), 0x7ea1))
		re := &realism{
			seed:     seed,
			rewrite:  0.02 + 0.03*rng.Float64(),
			lag:      gmailfake.LagDistribution{P50: 2 * time.Second, P99: 2 * time.Minute, Max: 10 * time.Minute},
			quota:    6_000, // 60 sends per emulated minute: Gmail answers 429s, the retry time only in the text
			trashPer: 20,
			longPer:  8,
		}
		jobs := max(1, *soakJobs*3/4)         // two seeds in about a minute on 2 cores
		re.rewriteAfter = int64(jobs) * 2 / 3 // requests: ≥ jobs
		rep, line := runSoak(t, soakConfig{seed: seed, jobs: jobs, duration: *soakDuration, realism: re})
		t.Log(line)
		double := re.doubleStored(t, rep)
		sum := re.summary(t, rep, len(double))
		reportSoak(t, rep, sum)
		// Every delivery twice outside review fails the soak, one send
		// Gmail stored twice included: the relay can see both copies
		// (the verify pass keeps looking while the index is behind,
		// and the late look comes after the lag tail's max).
		if rep.Summary.Duplicates != 0 || rep.Summary.Lost != 0 {
			t.Errorf("delivered more than once outside review = %d (%d of them one attempt Gmail stored twice), lost = %d; want 0 and 0",
				rep.Summary.Duplicates, len(double), rep.Summary.Lost)
		}
	})
}

// doubleStored names the jobs delivered more than once outside review by
// a single attempt: Gmail stored that one send twice (the emulator's
// duplicate fault) and the verify pass never saw the second copy. The soak
// fails on them as on any other; they are named apart in the summary line
// because the cause differs (a look missed, not a resend).
func (re *realism) doubleStored(t *testing.T, rep e2e.Report) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, v := range rep.Violations {
		if v.Rule != e2e.RuleDuplicate || out[v.MessageID] {
			continue
		}
		forwards := 0
		for _, l := range re.relay.Job(t, v.MessageID).Lines {
			if l.Kind == gmailrelay.KindForwarding {
				forwards++
			}
		}
		if forwards == 1 {
			out[v.MessageID] = true
		}
	}
	return out
}

// summary is the realism soak's one emulator-result line: what the
// Gmail-like emulator did and what the checker found, by deliveries.
func (re *realism) summary(t *testing.T, rep e2e.Report, doubleStored int) string {
	t.Helper()
	emu := re.relay.Emu
	rewritten, copies, trashedSeen := 0, 0, 0
	for _, m := range emu.Messages("") {
		copies++
		if m.OriginalMessageID != "" {
			rewritten++
		}
		if m.Trashed {
			trashedSeen++
		}
	}
	st := emu.Stats()
	stuck := 0
	for _, v := range rep.Violations {
		if v.Rule == e2e.RuleNotStuck {
			stuck++
		}
	}
	for _, v := range rep.Violations {
		if v.Rule != e2e.RuleDuplicate {
			continue
		}
		tr := emu.Lookup("", v.MessageID)
		t.Logf("emulator truth of %s: %d copies, %d deliveries", v.MessageID, tr.Count, tr.Deliveries)
		for _, m := range tr.Messages {
			t.Logf("  copy %s labels=%v original=%q stored=%s visible=%s", m.ID, m.LabelIDs, m.OriginalMessageID, m.StoredAt.Format(time.RFC3339), m.VisibleAt.Format(time.RFC3339))
		}
		re.logOtherSends(t, v.MessageID)
	}
	witness := map[string]int{}
	unverifiable := 0
	for _, l := range re.relay.Log(t) {
		switch {
		case l.Kind == gmailrelay.KindSearch && l.Witness != "":
			witness[l.Witness]++
		case l.Kind == gmailrelay.KindReview && l.Reason == gmailrelay.ReasonIndexUnverifiable:
			unverifiable++
		}
	}
	s := rep.Summary
	return fmt.Sprintf("emulator result: realism soak: seed=%d jobs=%d attempts=%d rewrite=%.3f(from request %d) rewritten=%d trashed=%d folded=%d rate_limited=%d long_waits=%d "+
		"witness_found=%d witness_missing=%d witness_none=%d index_unverifiable=%d sent=%d review=%d delivered_twice_in_review=%d delivered_twice_outside_review=%d (gmail_stored_one_send_twice_unseen=%d) lost=%d stuck=%d",
		re.seed, s.Jobs, s.Attempts, re.rewrite, re.rewriteAfter, rewritten, trashedSeen, st.Deliveries-copies, st.RateLimited, re.longs.Load(),
		witness["found"], witness["missing"], witness["none"], unverifiable,
		s.Sent, s.Review, s.DuplicatesInReview, s.Duplicates, doubleStored, s.Lost, stuck)
}

// logOtherSends logs, for a job the sweeper resent, how many attempts of
// other jobs were handed to Gmail between its ambiguous outcome and the
// resend: with any, the witness should have been missing, not none.
func (re *realism) logOtherSends(t *testing.T, id string) {
	t.Helper()
	var ambiguous, resent time.Time
	for _, l := range re.relay.Job(t, id).Lines {
		switch {
		case l.Kind == gmailrelay.KindAmbiguous && resent.IsZero():
			ambiguous = l.Time
		case l.Kind == gmailrelay.KindReceived && l.Reason == gmailrelay.ReasonSweeperResend && !ambiguous.IsZero() && resent.IsZero():
			resent = l.Time
		}
	}
	if resent.IsZero() {
		return
	}
	others := 0
	for _, l := range re.relay.Log(t) {
		if l.Kind == gmailrelay.KindForwarding && l.MessageID != id && l.Time.After(ambiguous) && !l.Time.After(resent) {
			others++
		}
	}
	t.Logf("  resent at %s after the ambiguous outcome at %s; %d attempts of other jobs handed to Gmail in between",
		resent.Format(time.RFC3339), ambiguous.Format(time.RFC3339), others)
}
