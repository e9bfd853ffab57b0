package e2e_test

import (
	"flag"
	"fmt"
	mrand "math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/e2e"
	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/internal/testclock"
	"github.com/gmailrelay/gmailrelay/internal/testenv"
	"github.com/gmailrelay/gmailrelay/pglog/pgtest"
)

var (
	replicaJobs     = flag.Int("replicas.jobs", 1000, "requests the three-replica soak makes")
	replicaDuration = flag.Duration("replicas.duration", 25*time.Second, "longest the three-replica soak's load phase runs")
	replicaKills    = flag.Int("replicas.kills", 24, "SIGKILLs of random replicas during the three-replica soak")
)

// testDatabaseURL returns the URL of a fresh schema (dropped at the end)
// on the PostgreSQL test server (pgtest: skipped when none, failed with CI=true).
func testDatabaseURL(t *testing.T) string {
	t.Helper()
	u, _ := pgtest.SchemaURL(t)
	return u
}

// replicaSet is several `gmailrelay serve --database` processes on one
// schema in front of one in-process emulator. The processes' manual clocks
// and the emulator's move together: clockMu orders every advance with
// every (re)start, so a process starting is never advanced twice.
type replicaSet struct {
	t       *testing.T
	Emu     *gmailfake.Server
	clock   *testclock.Clock
	clockMu sync.Mutex
	procs   []*relayProc
	next    atomic.Int64 // round-robin
}

// startReplicas starts n replicas of bin (the good build when "") on
// dbURL, with the soak's policy and a 2 s send timeout.
func startReplicas(t *testing.T, bin string, n int, dbURL string, seed int64, indexLag time.Duration) *replicaSet {
	t.Helper()
	if bin == "" {
		var err error
		if bin, err = bins.good(); err != nil {
			t.Fatalf("build gmailrelay: %v", err)
		}
	}
	clock := testclock.At(time.Now())
	emu, emuURL := gmailfake.NewTestServer(t, gmailfake.Options{Now: clock.Now, IndexLag: indexLag, QuotaPerMinute: 10_000_000})
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(pol, []byte(testPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	const timeout = 2 * time.Second
	rs := &replicaSet{t: t, Emu: emu, clock: clock}
	for i := range n {
		r := &relayProc{
			t: t, bin: bin, Emu: emu, clock: clock, out: &testenv.LockedBuffer{},
			client: &http.Client{Timeout: timeout + 10*time.Second},
			args: []string{"serve", "--addr", "127.0.0.1:0", "--database", dbURL,
				"--gmail-endpoint", emuURL, "--policy", pol, "--api-token", apiToken, "--admin-token", adminToken,
				"--allow-crash-faults", "--fault-seed", fmt.Sprint(seed + int64(i)), "--sweep-interval", "1h",
				"--clock", "manual", "--send-timeout", timeout.String(), "--quota-per-minute", "10000000"},
		}
		rs.procs = append(rs.procs, r)
		t.Cleanup(func() {
			r.Kill()
			if t.Failed() {
				t.Logf("replica %d output (last 32 KiB):\n%s", i, r.out.Tail(32<<10))
			}
		})
	}
	var wg sync.WaitGroup
	for _, r := range rs.procs {
		wg.Go(func() {
			if err := rs.start(r); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	return rs
}

func (rs *replicaSet) start(r *relayProc) error {
	rs.clockMu.Lock()
	defer rs.clockMu.Unlock()
	return r.start("")
}

// pick returns the next replica, round-robin.
func (rs *replicaSet) pick() *relayProc {
	return rs.procs[int(rs.next.Add(1))%len(rs.procs)]
}

// up returns a running replica (nil when none runs).
func (rs *replicaSet) up() *relayProc {
	for range len(rs.procs) {
		if r := rs.pick(); r.URL() != "" {
			return r
		}
	}
	return nil
}

// advance moves the emulator's clock and every running replica's by d
// (a replica that does not answer is dying: its next start catches up).
func (rs *replicaSet) advance(d time.Duration) {
	rs.clockMu.Lock()
	defer rs.clockMu.Unlock()
	rs.clock.Advance(d)
	for _, r := range rs.procs {
		if u := r.URL(); u != "" {
			_ = r.postClock(u, d)
		}
	}
}

// sweepUntilQuiet is SweepUntilQuiet over every replica: advance by the
// grace, run each replica's outbox and sweeper, until no job is queued,
// forwarding or unknown and none has a check scheduled.
func (rs *replicaSet) sweepUntilQuiet(t *testing.T) int {
	t.Helper()
	for round := 1; round <= maxSweeps; round++ {
		rs.advance(grace)
		for _, r := range rs.procs {
			if err := r.admin(http.MethodPost, "/admin/outbox", "", http.StatusOK, nil); err != nil {
				t.Fatal(err)
			}
			r.Sweep(t)
		}
		busy := 0
		for _, j := range rs.procs[round%len(rs.procs)].AllJobs(t) {
			if j.State == gmailrelay.StateQueued || j.State == gmailrelay.StateForwarding || j.State == gmailrelay.StateUnknown || !j.NextCheckAt.IsZero() {
				busy++
			}
		}
		if busy == 0 {
			return round
		}
	}
	t.Fatalf("jobs still unresolved after %d sweeps over the replicas", maxSweeps)
	return 0
}

// TestSoakThreeReplicasOnePostgres is the soak against three real `serve`
// processes on one PostgreSQL and one emulator (emulator results): n8n-style
// callers spread round-robin over the replicas (a retry goes to the next
// one, as behind a load balancer), random relay fault rules (added through
// any replica, shared by all) and emulator faults, at least
// -replicas.kills SIGKILLs of random replicas, each restarted at once.
// Then every replica sweeps to quiescence and the checker reads the log
// from one replica: 0 deliveries > 1 outside review, 0 lost, 0 stuck.
func TestSoakThreeReplicasOnePostgres(t *testing.T) {
	if testing.Short() {
		t.Skip("the soak runs real processes for tens of seconds; skipped in -short mode")
	}
	dbURL := testDatabaseURL(t)
	seed := *soakSeed
	if seed == 0 {
		seed = mrand.Int64N(1<<62) + 1
	}
	t.Logf("replicas soak: seed=%d jobs=%d kills>=%d (replay the plan with -soak.seed=%d)", seed, *replicaJobs, *replicaKills, seed)
	rng := mrand.New(mrand.NewPCG(uint64(seed), 0x5eed))
	rs := startReplicas(t, "", 3, dbURL, seed, time.Duration(rng.IntN(31))*time.Second)

	plan := soakPlan(rng, *replicaJobs)
	// Kills are spread over the requests: one every killEvery.
	killEvery := max(1, *replicaJobs*2/(*replicaKills+2))

	var (
		history  opLog
		requests atomic.Int64
		kills    atomic.Int64 // SIGKILLs from outside
		deaths   atomic.Int64 // every exit (kills and crash faults)
		relRules atomic.Int64
		emuRules atomic.Int64
	)
	chaosRNG := sharedRand(rng.Uint64(), rng.Uint64())
	chaos := func() {
		n := requests.Add(1)
		if n%int64(killEvery) == 0 {
			if rs.procs[chaosRNG.IntN(len(rs.procs))].Kill() {
				kills.Add(1)
			}
			return
		}
		switch x := chaosRNG.IntN(1000); {
		case x < 20: // a relay fault rule, through any replica
			modes := []string{"fail-before-forward", "forward-then-drop-response", "forward-and-respond", "crash-after-forward"}
			mode := modes[chaosRNG.IntN(len(modes))]
			spec := fmt.Sprintf(`{"mode":%q,"count":%d,"probability":%.2f}`, mode, 1+chaosRNG.IntN(6), 0.2+chaosRNG.Float64()*0.6)
			if mode == "crash-after-forward" {
				spec = `{"mode":"crash-after-forward","count":1,"probability":0.3}`
			}
			if r := rs.up(); r != nil && r.admin(http.MethodPost, "/admin/faults", spec, http.StatusCreated, nil) == nil {
				relRules.Add(1)
			}
		case x < 55: // an emulator fault
			faults := []gmailfake.Fault{
				{Method: gmailfake.MethodSend, Action: gmailfake.ActionError, Status: 500},
				{Method: gmailfake.MethodSend, Action: gmailfake.ActionError, Status: 429},
				{Method: gmailfake.MethodSend, Action: gmailfake.ActionAcceptThenError, Status: 503},
				{Method: gmailfake.MethodSend, Action: gmailfake.ActionLatency, Latency: 2500 * time.Millisecond},
				{Method: gmailfake.MethodSend, Action: gmailfake.ActionDuplicate},
				{Method: gmailfake.MethodList, Action: gmailfake.ActionError, Status: 500},
			}
			f := faults[chaosRNG.IntN(len(faults))]
			f.Count = 1 + chaosRNG.IntN(3)
			if _, err := rs.Emu.AddFault(f); err != nil {
				t.Errorf("emulator fault %+v: %v", f, err)
				return
			}
			emuRules.Add(1)
		case x < 60:
			rs.Emu.SetIndexLag(time.Duration(chaosRNG.IntN(31)) * time.Second)
		case x < 85: // time passes; a replica's outbox and sweeper run while callers work
			rs.advance(time.Duration(10+chaosRNG.IntN(60)) * time.Second)
			if r := rs.up(); r != nil {
				_ = r.admin(http.MethodPost, "/admin/outbox", "", http.StatusOK, nil)
				_ = r.admin(http.MethodPost, "/admin/sweep", "", http.StatusOK, nil)
			}
		}
	}
	try := func(req sendRequest, id, n int) e2e.Op {
		op := rs.pick().Send(req, id, n)
		history.add(op)
		chaos()
		return op
	}

	// One supervisor per replica restarts it whenever it dies.
	stop := make(chan struct{})
	var bg sync.WaitGroup
	for _, r := range rs.procs {
		bg.Go(func() {
			for {
				select {
				case <-stop:
					return
				case <-r.Exited():
				}
				deaths.Add(1)
				if err := rs.start(r); err != nil {
					t.Errorf("restart a replica: %v", err)
					return
				}
			}
		})
	}
	runPlan(plan, time.Now().Add(*replicaDuration), try)
	// Top the kills up to the minimum if the load ended early.
	for kills.Load() < int64(*replicaKills) {
		if rs.procs[chaosRNG.IntN(len(rs.procs))].Kill() {
			kills.Add(1)
		}
		rs.advance(5 * time.Second)
	}
	close(stop)
	bg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	for _, r := range rs.procs {
		select {
		case <-r.Exited():
			deaths.Add(1)
			if err := rs.start(r); err != nil {
				t.Fatal(err)
			}
		default:
		}
	}

	// Quiescence: no fault rules (shared: the first clear is for all),
	// no emulator faults, every replica swept. Each replica settles in
	// turn: an attempt one of them decided under a crash rule before the
	// clear kills it when its Gmail call returns, and that must happen
	// here (and be restarted), not in the sweeps after.
	for _, r := range rs.procs {
		clearFaults(t, r, func() {
			deaths.Add(1)
			if err := rs.start(r); err != nil {
				t.Fatal(err)
			}
		})
	}
	emuHits := clearEmulatorFaults(rs.Emu)
	rounds := rs.sweepUntilQuiet(t)

	hist := history.all()
	reader := rs.procs[rng.IntN(len(rs.procs))]
	obs := reader.Observe(t, hist)
	rep := e2e.Check(obs)
	logViolatingJobs(t, obs, rep, 5)
	relayFaults, seen := tally(obs, hist)
	stuck := 0
	for _, j := range obs.Jobs {
		if j.State == gmailrelay.StateQueued || j.State == gmailrelay.StateForwarding || j.State == gmailrelay.StateUnknown {
			stuck++
		}
	}
	s := rep.Summary
	t.Logf("replicas soak review: %s", reviewReasons(obs))
	t.Logf("replicas soak history: callers saw ok=%d fail=%d unknown=%d; requests=%d relay_rules=%d emulator_rules=%d emulator_fault_hits=%d exits=%d sweeps_to_quiet=%d",
		seen[e2e.OK], seen[e2e.Fail], seen[e2e.Info], requests.Load(), relRules.Load(), emuRules.Load(), emuHits, deaths.Load(), rounds)
	line := fmt.Sprintf("replicas soak: replicas=3 seed=%d jobs=%d attempts=%d faults=%d sigkills=%d exits=%d sent=%d review=%d duplicates=%d lost=%d stuck=%d",
		seed, s.Jobs, s.Attempts, relayFaults+emuHits, kills.Load(), deaths.Load(), s.Sent, s.Review, s.Duplicates, s.Lost, stuck)
	reportSoak(t, rep, line)
	if s.Duplicates != 0 || s.Lost != 0 || stuck != 0 {
		t.Errorf("duplicates outside review = %d, lost = %d, stuck = %d; want 0, 0 and 0", s.Duplicates, s.Lost, stuck)
	}
	if kills.Load() < int64(*replicaKills) {
		t.Errorf("%d SIGKILLs of replicas, want at least %d", kills.Load(), *replicaKills)
	}
}

// The replicas' harness can fail: the broken build (it resends an
// ambiguous job when a caller retries) behind two replicas, a dropped
// answer on one and the caller's retry on the other, and the checker,
// reading the log through the second, reports the duplicate and the blind
// resend (emulator results).
func TestReplicasCheckerCatchesBrokenRelay(t *testing.T) {
	dbURL := testDatabaseURL(t)
	bin, err := bins.broken()
	if err != nil {
		t.Fatalf("build the broken relay: %v", err)
	}
	rs := startReplicas(t, bin, 2, dbURL, 1, 0)
	a, b := rs.procs[0], rs.procs[1]
	key := "cus_9:order.shipped:broken-replicas"
	id := msgID(key)
	a.AddFault(t, fmt.Sprintf(`{"mode":"forward-then-drop-response","key":%q,"count":1}`, key))
	first := a.Send(request(key, ""), 1, 1)
	retry := b.Send(request(key, ""), 1, 2)
	if got := rs.Emu.Deliveries(id); got != 2 {
		t.Fatalf("emulator results: %d deliveries, want 2 (the broken relay resends on the other replica)", got)
	}
	rep := e2e.Check(b.Observe(t, []e2e.Op{first, retry}))
	for _, rule := range []string{e2e.RuleDuplicate, e2e.RuleNoBlindResend} {
		if !rep.Has(rule) {
			t.Errorf("checker: no %s violation; got %v", rule, rep.Violations)
		}
	}
	t.Logf("emulator result: broken relay behind two replicas: checker reports %d violation(s)", len(rep.Violations))
}
