package sweeper_test

import (
	"context"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay/acceptlog"
	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/sweeper"

	"github.com/gmailrelay/gmailrelay/internal/testclock"
)

// With a small Gmail budget, 500 unknown jobs are all resolved correctly by
// passes that stop when the budget is spent; Gmail's rate-limit answers
// never come twice in a pass (each one pauses the sweeper), and a send
// still gets through while the sweeper has work.
func TestQuota(t *testing.T) {
	tests := []struct {
		name          string
		relayQuota    int
		emulatorQuota int
		quotaStatus   int // the emulator's over-quota answer
		found, lost   int
		foreground    bool
	}{
		{"relay budget matches gmail", 600, 600, 429, 400, 100, true},
		{"gmail stricter than the relay budget, 429", 1200, 600, 429, 100, 20, false},
		{"gmail stricter than the relay budget, 403", 1200, 600, 403, 100, 20, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, setup{indexLag: 30 * time.Second, emulatorQuota: 1 << 30, quotaStatus: tt.quotaStatus, limit: 100})
			h.emulatorFault(gmailfake.Fault{Method: gmailfake.MethodSend, Action: gmailfake.ActionAcceptThenError, Status: 500, Count: tt.found})
			found := h.sendMany(tt.found, retryChannel)
			h.emulatorFault(gmailfake.Fault{Method: gmailfake.MethodSend, Action: gmailfake.ActionError, Status: 500, Count: tt.lost})
			lost := h.sendMany(tt.lost, retryChannel)

			// From now on Gmail's budget is small, and so is the relay's.
			unitsBefore := h.srv.Stats().QuotaUnits
			h.srv.SetQuotaPerMinute(tt.emulatorQuota)
			h.set.relayQuota = tt.relayQuota
			h.build(tt.relayQuota)
			h.clock.Advance(grace)

			var foreground string
			prevLimited := h.srv.Stats().RateLimited
			unresolved := func() int {
				st, err := h.log.Stats(h.ctx)
				if err != nil {
					t.Fatalf("stats: %v", err)
				}
				return st.ByState[acceptlog.StateUnknown] + st.ByState[acceptlog.StateFailed] + st.ByState[acceptlog.StateForwarding]
			}
			pass := 0
			for ; unresolved() > 0; pass++ {
				if pass > 3000 {
					t.Fatalf("%d jobs unresolved after %d passes", unresolved(), pass)
				}
				r := h.sweep()
				limited := h.srv.Stats().RateLimited
				if limited-prevLimited > 1 {
					t.Fatalf("pass %d: %d rate-limit answers in one pass, want at most 1 (then pause)", pass, limited-prevLimited)
				}
				prevLimited = limited
				if tt.foreground && pass == 2 {
					id, res := h.send(retryChannel)
					h.wantState(id, res.Job, acceptlog.StateSent)
					foreground = id
				}
				step := r.Wait
				if step <= 0 {
					step = 10 * time.Second
				}
				h.clock.Advance(step)
			}
			totals := h.sw.Totals()
			if totals.Found != tt.found || totals.Resent != tt.lost || totals.Reviewed != 0 || totals.Duplicates != 0 {
				t.Errorf("totals %+v: want %d found, %d resent, none reviewed", totals, tt.found, tt.lost)
			}
			for _, id := range found {
				h.wantJob(id, acceptlog.StateSent, 1, 1, 1)
			}
			for _, id := range lost {
				// One ambiguous attempt and one resend; a resend that Gmail
				// refused with a rate limit sent nothing and was retried.
				j := h.job(id)
				h.wantJob(id, acceptlog.StateSent, j.Attempts, 1, 1)
				limited := 0
				for _, l := range h.lines(id, acceptlog.KindNotSent) {
					if l.Reason == "rate_limited" {
						limited++
					}
				}
				if j.Attempts-limited != 2 {
					t.Errorf("job %s: %d attempts, %d of them rate limited; want 2 others", id, j.Attempts, limited)
				}
			}
			if foreground != "" {
				h.wantJob(foreground, acceptlog.StateSent, 1, 1, 1)
			}
			st := h.srv.Stats()
			if tt.relayQuota <= tt.emulatorQuota && st.RateLimited != 0 {
				t.Errorf("%d rate-limit answers although the relay's budget is within Gmail's", st.RateLimited)
			}
			// The relay's budget spends exactly what Gmail charged: asking
			// whether a search fits takes nothing (a peek, not a take).
			if got, want := h.svc.Quota().Spent(), int64(st.QuotaUnits-unitsBefore); tt.relayQuota <= tt.emulatorQuota && got != want {
				t.Errorf("the relay's quota spent %d units, Gmail charged %d for the same calls", got, want)
			}
			t.Logf("%d passes, %v of fake time, emulator %+v, sweeper totals %+v", pass, h.clock.Now().Sub(testclock.New().Now()), st, totals)
		})
	}
}

// The loop runs a pass at start and another one on Wake, reported through
// Passes; Stop waits for it and is safe twice.
func TestStartWakeStop(t *testing.T) {
	h := newHarness(t, setup{})
	id := h.sendAmbiguous(retryChannel)
	h.sw.Stop() // before Start: nothing to stop

	ctx, cancel := context.WithCancel(h.ctx)
	defer cancel()
	h.sw.Start(ctx)
	h.sw.Start(ctx) // already started: nothing happens
	first := waitPass(t, h.sw)
	wantResult(t, first, sweeper.Result{})

	h.clock.Advance(grace)
	h.sw.Wake()
	second := waitPass(t, h.sw)
	wantResult(t, second, sweeper.Result{Checked: 1, Found: 1})
	h.wantJob(id, acceptlog.StateSent, 1, 1, 1)

	h.sw.Stop()
	h.sw.Stop()
	if got := h.sw.Totals(); got.Found != 1 || got.Checked != 1 {
		t.Errorf("totals %+v, want the second pass's counts", got)
	}
	// Stopped: a Wake runs nothing, RunOnce still works.
	h.sw.Wake()
	wantResult(t, h.sweep(), sweeper.Result{})
	select {
	case r := <-h.sw.Passes():
		wantResult(t, r, sweeper.Result{})
	default:
		t.Errorf("RunOnce's pass was not reported on Passes")
	}
	select {
	case r := <-h.sw.Passes():
		t.Errorf("a pass ran after Stop: %+v", r)
	default:
	}
}

// waitPass waits for the next finished pass. The timeout only turns a hang
// into a failure; nothing waits on it in a passing run.
func waitPass(t *testing.T, sw *sweeper.Sweeper) sweeper.Result {
	t.Helper()
	select {
	case r := <-sw.Passes():
		return r
	case <-time.After(10 * time.Second):
		t.Fatalf("no pass finished")
	}
	return sweeper.Result{}
}
