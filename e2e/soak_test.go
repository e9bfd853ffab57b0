package e2e_test

import (
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/e2e"
	"github.com/gmailrelay/gmailrelay/gmailfake"
)

var (
	soakJobs     = flag.Int("soak.jobs", 1200, "requests the soak makes (keys drawn so that some repeat)")
	soakDuration = flag.Duration("soak.duration", 25*time.Second, "longest the soak's load phase runs")
	soakSeed     = flag.Int64("soak.seed", 0, "seed of the soak (0: a fixed seed and a random one)")
)

// fixedSoakSeed is the seed CI always runs, next to a random one.
const fixedSoakSeed = 20261202

// soakConfig is one soak run.
type soakConfig struct {
	seed     int64
	jobs     int
	duration time.Duration
	binary   string // "" = the good build
	// dropRate, when > 0, installs a global forward-then-drop-response
	// rule with that probability at the start (rules do not survive a
	// restart; the dropped jobs' retries come before the first kill, mostly).
	dropRate float64
	// noRateLimits turns the emulator's injected 429s into 500s (same
	// random stream). The broken build needs it: after a 429 the relay
	// queues new sends and refuses a caller's retry of an unknown job while
	// jobs wait, so the broken resend it must show would depend on timing.
	noRateLimits bool
	// realism, when set, runs the soak against the Gmail-like emulator
	// (realism_soak_test.go): its options, its user's chaos, and no fixed
	// index lag changes that would replace its lag distribution.
	realism *realism
}

// soakStats counts what the load and the chaos did.
type soakStats struct {
	requests atomic.Int64 // HTTP requests made by callers
	kills    atomic.Int64 // relay processes that died (SIGKILL from outside or a crash fault)
	emuFault atomic.Int64 // emulator fault rules installed
	relFault atomic.Int64 // relay fault rules installed
	chaos    atomic.Int64 // chaos steps taken (one after every request)
}

// TestSoak is the randomized soak against the real binary and the Gmail
// emulator (emulator results). Callers retry like n8n's Retry On Fail,
// some race on the same key; relay and emulator faults and SIGKILLs are
// injected at random. After the load stops, the relay is swept to
// quiescence and the checker must find no violation. The seed is logged:
// rerun with -soak.seed to replay the same plan (the interleaving of the
// goroutines and processes is not replayable).
func TestSoak(t *testing.T) {
	forEachSoakSeed(t, func(t *testing.T, seed int64) {
		rep, line := runSoak(t, soakConfig{seed: seed, jobs: *soakJobs, duration: *soakDuration})
		reportSoak(t, rep, line)
		if rep.Summary.Duplicates != 0 || rep.Summary.Lost != 0 {
			t.Errorf("duplicates outside review = %d, lost = %d; want 0 and 0", rep.Summary.Duplicates, rep.Summary.Lost)
		}
	})
}

// forEachSoakSeed runs soak as a subtest for -soak.seed, or when that is 0
// for the fixed seed CI always runs and a random one; in -short mode it
// skips.
func forEachSoakSeed(t *testing.T, soak func(t *testing.T, seed int64)) {
	t.Helper()
	if testing.Short() {
		t.Skip("the soak runs real processes for tens of seconds; skipped in -short mode")
	}
	seeds := []int64{*soakSeed}
	if *soakSeed == 0 {
		seeds = []int64{fixedSoakSeed, rand.Int64N(1<<62) + 1}
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { soak(t, seed) })
	}
}

// TestCheckerCatchesBrokenRelay proves that the checker can fail: the
// relay built with -tags gmailrelay_broken resends an ambiguous job when a
// caller retries, and the checker must say so — in a targeted scenario and
// in a soak.
func TestCheckerCatchesBrokenRelay(t *testing.T) {
	t.Parallel()
	bin, err := bins.broken()
	if err != nil {
		t.Fatalf("build the broken relay: %v", err)
	}
	t.Run("dropped response then caller retry", func(t *testing.T) {
		t.Parallel()
		r := startRelay(t, relayOptions{binary: bin})
		key := "cus_9:order.shipped:broken"
		id := msgID(key)
		r.AddFault(t, fmt.Sprintf(`{"mode":"forward-then-drop-response","key":%q,"count":1}`, key))
		first := r.Send(request(key, ""), 1, 1)
		retry := r.Send(request(key, ""), 1, 2)
		history := []e2e.Op{first, retry}
		if got := r.Emu.Deliveries(id); got != 2 {
			t.Fatalf("emulator deliveries = %d, want 2 (the broken relay resends)", got)
		}
		rep := e2e.Check(r.Observe(t, history))
		for _, rule := range []string{e2e.RuleDuplicate, e2e.RuleNoBlindResend} {
			if !rep.Has(rule) {
				t.Errorf("checker before sweeping: no %s violation; got %v", rule, rep.Violations)
			}
		}
		// The verify pass moves the duplicate to review; the blind resend
		// stays in the log for the checker to see.
		r.SweepUntilQuiet(t)
		rep = e2e.Check(r.Observe(t, history))
		if !rep.Has(e2e.RuleNoBlindResend) {
			t.Errorf("checker after sweeping: no %s violation; got %v", e2e.RuleNoBlindResend, rep.Violations)
		}
		t.Logf("emulator result: broken relay: checker reports %d violation(s), e.g. %v", len(rep.Violations), rep.Violations)
	})
	t.Run("soak", func(t *testing.T) {
		if testing.Short() {
			t.Skip("the soak runs real processes; skipped in -short mode")
		}
		t.Parallel()
		rep, line := runSoak(t, soakConfig{seed: fixedSoakSeed, jobs: 120, duration: 10 * time.Second, binary: bin, dropRate: 0.3, noRateLimits: true})
		t.Log(line + " (broken build)")
		if rep.OK() {
			t.Fatal("the checker found nothing wrong with the broken relay")
		}
		if !rep.Has(e2e.RuleNoBlindResend) {
			t.Errorf("checker: no %s violation; got %v", e2e.RuleNoBlindResend, rep.Violations)
		}
		t.Logf("checker caught the broken relay: %d violation(s), first: %s", len(rep.Violations), rep.Violations[0])
	})
}

// runSoak runs one soak and returns the checker's report and the summary
// line.
func runSoak(t *testing.T, c soakConfig) (e2e.Report, string) {
	t.Logf("soak: seed=%d jobs=%d duration=%s (replay with -soak.seed=%d)", c.seed, c.jobs, c.duration, c.seed)
	rng := rand.New(rand.NewPCG(uint64(c.seed), 0x5eed))
	ro := relayOptions{binary: c.binary, seed: c.seed, timeout: 2 * time.Second,
		indexLag: time.Duration(rng.IntN(31)) * time.Second}
	if c.realism != nil {
		ro.gmail = c.realism.options
		ro.history = true // the realism soak runs with the history tail, as serve does by default
	}
	r := startRelay(t, ro)
	if c.realism != nil {
		c.realism.relay = r
	}
	if c.dropRate > 0 {
		r.AddFault(t, fmt.Sprintf(`{"mode":"forward-then-drop-response","probability":%g}`, c.dropRate))
	}
	var st soakStats

	// The plan: which key each request uses, and who sends it.
	plan := soakPlan(rng, c.jobs)
	var history opLog
	chaosRNG := sharedRand(rng.Uint64(), rng.Uint64())
	deadline := time.Now().Add(c.duration)
	try := func(req sendRequest, id, n int) e2e.Op {
		op := r.Send(req, id, n)
		st.requests.Add(1)
		history.add(op)
		st.chaos.Add(1)
		chaos(t, r, chaosRNG, &st, c.noRateLimits, c.realism != nil)
		if c.realism != nil {
			c.realism.chaos(r, chaosRNG)
		}
		return op
	}

	// A supervisor restarts the relay whenever its process dies (SIGKILL
	// from chaos, or a crash-after-forward fault).
	stop := make(chan struct{})
	var bg sync.WaitGroup
	bg.Add(1)
	go func() {
		defer bg.Done()
		for {
			exited := r.Exited()
			select {
			case <-stop:
				return
			case <-exited:
			}
			st.kills.Add(1)
			if err := r.start(""); err != nil {
				t.Errorf("restart the relay: %v", err)
				return
			}
		}
	}()

	runPlan(plan, deadline, try)
	close(stop)
	bg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	// Load has stopped: the relay must be up, without fault rules, and
	// swept until nothing is left to decide.
	select {
	case <-r.Exited():
		st.kills.Add(1)
		r.Restart(t)
	default:
	}
	clearFaults(t, r, func() { st.kills.Add(1); r.Restart(t) })
	emuHits := clearEmulatorFaults(r.Emu)
	rounds := r.SweepUntilQuiet(t)

	hist := history.all()
	obs := r.Observe(t, hist)
	rep := e2e.Check(obs)
	logViolatingJobs(t, obs, rep, 5)
	relayFaults, seen := tally(obs, hist)
	s := rep.Summary
	t.Logf("soak review: %s", reviewReasons(obs))
	t.Logf("soak history: callers saw ok=%d fail=%d unknown=%d; chaos steps=%d", seen[e2e.OK], seen[e2e.Fail], seen[e2e.Info], st.chaos.Load())
	t.Logf("soak detail: requests=%d relay_rules=%d emulator_rules=%d relay_fault_lines=%d emulator_fault_hits=%d failed=%d duplicates_in_review=%d sweeps_to_quiet=%d",
		st.requests.Load(), st.relFault.Load(), st.emuFault.Load(), relayFaults, emuHits, s.Failed, s.DuplicatesInReview, rounds)
	line := fmt.Sprintf("soak: seed=%d jobs=%d attempts=%d faults=%d kills=%d sent=%d review=%d duplicates=%d lost=%d",
		c.seed, s.Jobs, s.Attempts, relayFaults+emuHits, st.kills.Load(), s.Sent, s.Review, s.Duplicates, s.Lost)
	return rep, line
}

// sharedRand returns a random generator the callers can share: a Rand
// keeps no state but its source, and the source is locked. One caller's
// draws are the ones a lone generator on the same seeds would make.
func sharedRand(seed1, seed2 uint64) *rand.Rand {
	return rand.New(&lockedSource{src: rand.NewPCG(seed1, seed2)})
}

// lockedSource is a rand.Source safe for concurrent use.
type lockedSource struct {
	mu  sync.Mutex
	src rand.Source
}

func (s *lockedSource) Uint64() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.src.Uint64()
}

// chaos is taken by a caller after each of its requests: with a small
// probability it does one random thing to the relay or the emulator, while
// the other callers go on. Errors of the relay's admin API are expected
// (the process may just have died) and ignored.
func chaos(t *testing.T, r *relayProc, rng *rand.Rand, st *soakStats, noRateLimits, keepLag bool) {
	switch n := rng.IntN(1000); {
	case n < 20: // a relay fault rule
		modes := []string{"fail-before-forward", "fail-before-forward", "forward-then-drop-response",
			"forward-then-drop-response", "crash-after-forward", "forward-and-respond"}
		mode := modes[rng.IntN(len(modes))]
		spec := fmt.Sprintf(`{"mode":%q,"count":%d,"probability":%.2f`, mode, 1+rng.IntN(8), 0.2+rng.Float64()*0.6)
		if rng.IntN(3) == 0 {
			spec += `,"channel":"billing"`
		}
		spec += "}"
		if mode == "crash-after-forward" {
			spec = `{"mode":"crash-after-forward","count":1,"probability":0.3}`
		}
		if err := r.admin(http.MethodPost, "/admin/faults", spec, http.StatusCreated, nil); err == nil {
			st.relFault.Add(1)
		}
	case n < 60: // an emulator fault
		faults := []gmailfake.Fault{
			{Method: gmailfake.MethodSend, Action: gmailfake.ActionError, Status: 500},
			{Method: gmailfake.MethodSend, Action: gmailfake.ActionError, Status: 429},
			{Method: gmailfake.MethodSend, Action: gmailfake.ActionAcceptThenError, Status: 500},
			{Method: gmailfake.MethodSend, Action: gmailfake.ActionAcceptThenError, Status: 503},
			{Method: gmailfake.MethodSend, Action: gmailfake.ActionLatency, Latency: 50 * time.Millisecond},
			{Method: gmailfake.MethodSend, Action: gmailfake.ActionDuplicate},
			{Method: gmailfake.MethodList, Action: gmailfake.ActionError, Status: 500},
		}
		f := faults[rng.IntN(len(faults))]
		if rng.IntN(10) == 0 {
			// Longer than --send-timeout: the relay times out after Gmail
			// stored the message.
			f = gmailfake.Fault{Method: gmailfake.MethodSend, Action: gmailfake.ActionLatency, Latency: 2500 * time.Millisecond}
		}
		if noRateLimits && f.Status == 429 {
			f.Status = 500
		}
		f.Count = 1 + rng.IntN(3)
		if _, err := r.Emu.AddFault(f); err != nil {
			t.Errorf("emulator fault %+v: %v", f, err)
			return
		}
		st.emuFault.Add(1)
	case n < 65: // search index lag changes
		if !keepLag {
			r.Emu.SetIndexLag(time.Duration(rng.IntN(31)) * time.Second)
		}
	case n < 72: // SIGKILL from outside; the supervisor restarts
		r.Kill()
	case n < 92: // time passes and the sweeper runs while callers work
		_ = r.advance(time.Duration(10+rng.IntN(60)) * time.Second)
		_ = r.admin(http.MethodPost, "/admin/sweep", "", http.StatusOK, nil)
	}
}

// logViolatingJobs logs the lines of the first n jobs with a violation, so
// that a failure can be understood without rerunning.
func logViolatingJobs(t *testing.T, obs e2e.Observation, rep e2e.Report, n int) {
	seen := map[string]bool{}
	for _, v := range rep.Violations {
		if len(seen) == n || v.MessageID == "" || seen[v.MessageID] {
			continue
		}
		seen[v.MessageID] = true
		for _, j := range obs.Jobs {
			if j.MessageID != v.MessageID {
				continue
			}
			t.Logf("job %s (key %s, channel %s) is %s after %d attempts:", j.MessageID, j.Key, j.Channel, j.State, j.Attempts)
			for _, l := range j.Lines {
				b, _ := json.Marshal(l)
				t.Logf("  %s", b)
			}
		}
	}
}

// reviewReasons sums up why jobs are in review: the reason of each one's
// last review line, and for duplicates whether one attempt stored twice
// (the emulator's duplicate fault) or several attempts each stored one.
func reviewReasons(obs e2e.Observation) string {
	count := map[string]int{}
	for _, j := range obs.Jobs {
		if j.State != gmailrelay.StateReview {
			continue
		}
		why := "?"
		forwards := 0
		for _, l := range j.Lines {
			switch l.Kind {
			case gmailrelay.KindReview:
				why = string(l.Reason)
			case gmailrelay.KindForwarding:
				forwards++
			}
		}
		if why == "duplicate" {
			why = fmt.Sprintf("duplicate(after %d forwards)", forwards)
		}
		count[why]++
	}
	keys := make([]string, 0, len(count))
	for k := range count {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := ""
	for _, k := range keys {
		out += fmt.Sprintf("%s=%d ", k, count[k])
	}
	return strings.TrimSpace(out)
}

// recordSummary appends the soak's summary line to the file named by
// GMAILRELAY_SOAK_SUMMARY, so CI can print it without -v.
func recordSummary(t *testing.T, line string) {
	path := os.Getenv("GMAILRELAY_SOAK_SUMMARY")
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Errorf("record soak summary: %v", err)
		return
	}
	defer f.Close()
	fmt.Fprintln(f, line+" (emulator results)")
}

// clearFaults deletes every relay fault rule through r and waits for the
// outbox and sweeper passes in flight. The last request of a load, or an
// attempt those passes decided before the clear, may fire a crash fault:
// then r is dead (perhaps not yet reaped when the caller looked), so a
// refused request waits for the exit, calls restart and tries again.
func clearFaults(t *testing.T, r *relayProc, restart func()) {
	t.Helper()
	for try := 0; ; try++ {
		// Clear the rules, then let the passes in flight finish (an outbox
		// and a sweep pass wait for the background ones): an attempt decided
		// under a crash rule before the clear kills the relay when its Gmail
		// call returns, and that must happen here, not in the checks after.
		err := r.admin(http.MethodDelete, "/admin/faults", "", http.StatusOK, nil)
		if err == nil {
			err = r.admin(http.MethodPost, "/admin/outbox", "", http.StatusOK, nil)
		}
		if err == nil {
			err = r.admin(http.MethodPost, "/admin/sweep", "", http.StatusOK, nil)
		}
		if err == nil {
			return
		}
		if try == 3 {
			t.Fatal(err)
		}
		select {
		case <-r.Exited():
			restart()
		case <-time.After(10 * time.Second):
			t.Fatalf("%v (and the relay did not exit)", err)
		}
	}
}
