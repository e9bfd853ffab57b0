package sweeper_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/policy"
)

// truthRun is one mode's run of the time-to-truth scenario.
type truthRun struct {
	delivered, lost []time.Duration // time to truth of each job
	units           int             // quota units the passes spent
	resends         int
}

// timeToTruth sends delivered ambiguous sends (Gmail stored them, the
// answer was lost) and lost ones (not stored), then runs a pass every 5 s
// until every job is sent, and measures for each the time from its
// ambiguous attempt to its truth: sent for a delivered one, the resend
// sent for a lost one. Emulator result.
func timeToTruth(t *testing.T, history bool, pol *policy.Policy, lag gmailfake.LagDistribution, delivered, lost int) truthRun {
	h := newHarness(t, setup{history: history, policy: pol, lagDist: lag})
	h.sweep()
	var del, lst []string
	for range delivered {
		del = append(del, h.sendAmbiguous(retryChannel))
	}
	for range lost {
		lst = append(lst, h.sendLost(retryChannel))
	}
	units := h.srv.Stats().QuotaUnits
	truth := map[string]time.Duration{}
	all := append(slices.Clone(del), lst...)
	for elapsed := time.Duration(0); len(truth) < len(all) && elapsed < 2*time.Hour; elapsed += 5 * time.Second {
		h.clock.Advance(5 * time.Second)
		h.sweep()
		for _, id := range all {
			if _, ok := truth[id]; ok {
				continue
			}
			if j := h.job(id); j.State == gmailrelay.StateSent {
				truth[id] = h.clock.Now().Sub(j.AmbiguousAt)
			}
		}
	}
	if len(truth) < len(all) {
		t.Fatalf("history %v: %d of %d jobs without truth after 2 h", history, len(all)-len(truth), len(all))
	}
	var r truthRun
	// Sends count 100 units each on the emulator: the resends are taken
	// out, so units are what the sweeper spent beyond the sends.
	r.units = h.srv.Stats().QuotaUnits - units
	for _, id := range del {
		h.wantDeliveries(id, 1, "delivered once")
		r.delivered = append(r.delivered, truth[id])
	}
	for _, id := range lst {
		h.wantDeliveries(id, 1, "resent once")
		r.lost = append(r.lost, truth[id])
		r.resends++
	}
	r.units -= 100 * r.resends
	return r
}

func quantile(d []time.Duration, q float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// Side by side in one run, emulator results: time to truth of delivered
// and lost ambiguous sends, and the quota units spent beyond the sends,
// with the history tail (witness: history, history_settle 60s) and with
// the search path alone, under a Gmail-like index lag (p50 2 s, p99
// 2 min) and the default channel. The history must be faster for both,
// within 10 units an ambiguous job; an idle mailbox's tail within 200
// units an hour. The table goes to docs/benchmarks.md.
func TestEmulatorHistoryBesideSearchOnly(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two hours of passes on the manual clock")
	}
	lag := gmailfake.LagDistribution{P50: 2 * time.Second, P99: 2 * time.Minute, Max: 20 * time.Minute}
	const delivered, lost = 40, 10
	hist := timeToTruth(t, true, historyPolicy(0, policy.WitnessHistory), lag, delivered, lost)
	search := timeToTruth(t, false, historyPolicy(0, ""), lag, delivered, lost)
	row := func(name string, r truthRun) string {
		return fmt.Sprintf("| %s | %s | %s | %s | %s | %.1f |", name,
			quantile(r.delivered, 0.5), quantile(r.delivered, 0.99), quantile(r.lost, 0.5), quantile(r.lost, 0.99),
			float64(r.units)/float64(delivered+lost))
	}
	t.Logf("emulator results, index lag p50 2s p99 2m, %d delivered + %d lost ambiguous sends, passes every 5 s:\n"+
		"| mode | delivered p50 | delivered p99 | lost p50 | lost p99 | units / ambiguous job |\n|---|---|---|---|---|---|\n%s\n%s",
		delivered, lost, row("history tail", hist), row("search only", search))
	if quantile(hist.delivered, 0.99) >= quantile(search.delivered, 0.5) || quantile(hist.lost, 0.99) >= quantile(search.lost, 0.5) {
		t.Errorf("history p99 not below the search path's p50")
	}
	if per := float64(hist.units) / float64(delivered+lost); per > 10 {
		t.Errorf("history tail: %.1f quota units an ambiguous job, want at most 10", per)
	}

	// An idle mailbox: an hour of passes every 5 s.
	h := newHarness(t, setup{history: true, policy: historyPolicy(0, "")})
	units := h.srv.Stats().QuotaUnits
	for range 720 {
		h.clock.Advance(5 * time.Second)
		h.sweep()
	}
	idle := h.srv.Stats().QuotaUnits - units
	t.Logf("emulator result: an idle mailbox's tail spends %d quota units an hour", idle)
	if idle > 200 {
		t.Errorf("idle mailbox: %d units an hour, want at most 200", idle)
	}
}
