package relay_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/acceptlog"
	"github.com/gmailrelay/gmailrelay/acceptlog/acceptlogtest"
	"github.com/gmailrelay/gmailrelay/api"
	"github.com/gmailrelay/gmailrelay/faultmodes"
	"github.com/gmailrelay/gmailrelay/gmailapi"
	"github.com/gmailrelay/gmailrelay/internal/testenv"
	"github.com/gmailrelay/gmailrelay/outbox"
	"github.com/gmailrelay/gmailrelay/policy"
	"github.com/gmailrelay/gmailrelay/relay"
	"github.com/gmailrelay/gmailrelay/sweeper"
)

// fakeClockLog is a bbolt log posing as one several replicas share, with a
// clock the test sets: the clock fence without PostgreSQL. peers are the
// other live replicas' offsets (set: one replica agreeing with the log);
// delay makes each measurement take that long, and the counters record
// how many ran, and how many at once.
type fakeClockLog struct {
	*acceptlog.Log
	mu          sync.Mutex
	offset, unc time.Duration
	peers       []time.Duration
	err         error
	delay       time.Duration
	started     chan struct{} // non-nil: told (without blocking) when a measurement starts

	calls, running, maxRunning int
}

var _ relay.ClockChecker = (*fakeClockLog)(nil)

func (l *fakeClockLog) Shared() bool { return true }

func (l *fakeClockLog) MeasureClock(context.Context, func() time.Time) (relay.ClockReading, error) {
	l.mu.Lock()
	l.calls++
	l.running++
	l.maxRunning = max(l.maxRunning, l.running)
	r, err, delay := relay.ClockReading{Offset: l.offset, Uncertainty: l.unc, Peers: slices.Clone(l.peers)}, l.err, l.delay
	if l.started != nil {
		select {
		case l.started <- struct{}{}:
		default:
		}
	}
	l.mu.Unlock()
	time.Sleep(delay)
	l.mu.Lock()
	l.running--
	l.mu.Unlock()
	return r, err
}

// set makes the log's clock offset ahead of this replica's (± unc), with
// one other live replica agreeing with the log.
func (l *fakeClockLog) set(offset, unc time.Duration, err error) {
	l.setPeers(offset, unc, err, 0)
}

func (l *fakeClockLog) setPeers(offset, unc time.Duration, err error, peers ...time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.offset, l.unc, l.err, l.peers = offset, unc, err, peers
}

// countLines returns how many lines of logs at level contain text.
func countLines(logs *testenv.LockedBuffer, level, text string) int {
	n := 0
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, `"level":"`+level+`"`) && strings.Contains(l, text) {
			n++
		}
	}
	return n
}

// The clock fence, with a fake log clock. A replica whose clock is 30 s
// ahead of the shared log's: /readyz says not ready naming the offset;
// a new send is refused (503 unavailable, Retry-After, naming the skew)
// with nothing logged and nothing sent; RecoverExpired, a sweeper pass
// and an outbox pass do nothing. The ERROR is logged once per change. A
// measurement that fails, or is not conclusive, leaves the verdict; once
// the clock is back within relay.MaxClockSkew, the fence lifts and sends
// go out. A manual clock has no fence.
func TestClockFenceStopsAReplicaWhoseClockIsOff(t *testing.T) {
	ctx := context.Background()
	var lg *fakeClockLog
	pol := policy.Default()
	pol.VerifyHandle = policy.VerifyNever
	logs := &testenv.LockedBuffer{}
	logger := zerolog.New(logs)
	opts := testenv.Options{Policy: pol, Logger: &logger, SendTimeout: 2 * time.Second,
		OpenLog: func(t testing.TB, now func() time.Time) gmailrelay.Store {
			lg = &fakeClockLog{Log: acceptlogtest.OpenPath(t, filepath.Join(t.TempDir(), "relay.db"), acceptlog.Options{Now: now})}
			return lg
		}}
	te := testenv.New(t, opts)
	clock, emu, svc := te.Clock, te.Emulator, te.Service
	// newManual is another Service over the same log on a manual clock.
	newManual := func() *relay.Service {
		opts.OpenLog = func(testing.TB, func() time.Time) gmailrelay.Store { return lg }
		opts.Configure = func(c *relay.Config) { c.ManualClock = true }
		return te.Replica(opts).Service
	}
	prepare := func(key string) relay.Prepared {
		p, err := relay.Prepare(relay.SendRequest{Key: key, To: relay.AddressList{"a@example.org"}, Subject: "s", Text: "b"},
			"", svcDomain, clock.Now())
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	// In step: an ambiguous send leaves an unknown job for the sweeper.
	drop := faultmodes.WithForced(ctx, faultmodes.Decision{Mode: faultmodes.ForwardThenDropResponse})
	dropped, err := svc.Send(drop, prepare("fence:dropped"), relay.SendOptions{})
	if err != nil || dropped.Job.State != gmailrelay.StateUnknown {
		t.Fatalf("dropped send: %s, %v; want unknown", dropped.Job.State, err)
	}
	calls := gmailCalls(emu)

	lg.set(-30*time.Second, time.Millisecond, nil)
	for range 2 {
		if err := svc.CheckClock(ctx); !errors.Is(err, relay.ErrClockSkew) {
			t.Fatalf("CheckClock 30 s ahead: %v, want the fence's error", err)
		}
	}
	if got := countLines(logs, "error", "30s (±1ms) ahead of"); got != 1 {
		t.Errorf("fence ERROR lines naming the offset = %d, want 1 (once per change)\n%s", got, logs.String())
	}

	srv := httptest.NewServer(api.New(api.Config{Relay: svc, Log: lg, Policy: pol, Now: clock.Now, MsgIDDomain: svcDomain, Logger: zerolog.Nop()}))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	var rz map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&rz)
	resp.Body.Close()
	if c, _ := rz["clock"].(string); resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(c, "30s (±1ms) ahead of") {
		t.Errorf("/readyz fenced: %d %v; want 503 with the clock's offset", resp.StatusCode, rz)
	}

	p := prepare("fence:new")
	_, err = svc.Send(ctx, p, relay.SendOptions{Queue: true})
	var re *relay.Error
	if !errors.As(err, &re) || re.Code != relay.CodeUnavailable || re.RetryAfter <= 0 || !strings.Contains(re.Message, "30s (±1ms) ahead of") {
		t.Errorf("send while fenced: %v; want unavailable with Retry-After naming the skew", err)
	}
	if _, err := lg.Get(ctx, p.MessageID); !errors.Is(err, gmailrelay.ErrNotFound) {
		t.Errorf("job of the refused send: %v; want none logged", err)
	}
	if n, err := svc.RecoverExpired(ctx); n != 0 || !errors.Is(err, relay.ErrClockSkew) {
		t.Errorf("RecoverExpired while fenced: %d, %v; want 0 and the fence's error", n, err)
	}
	clock.Advance(time.Hour) // the unknown job is due
	if _, err := sweeper.New(te.SweeperConfig()).RunOnce(ctx); !errors.Is(err, relay.ErrClockSkew) {
		t.Errorf("sweeper pass while fenced: %v; want the fence's error", err)
	}
	ob, err := outbox.New(outbox.Config{Log: lg, Relay: svc, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ob.RunOnce(ctx); !errors.Is(err, relay.ErrClockSkew) {
		t.Errorf("outbox pass while fenced: %v; want the fence's error", err)
	}
	if got := gmailCalls(emu); got != calls {
		t.Errorf("Gmail calls while fenced: %d, want none", got-calls)
	}
	if j, _ := lg.Get(ctx, dropped.Job.MessageID); j.State != gmailrelay.StateUnknown || j.Attempts != 1 {
		t.Errorf("unknown job after a fenced pass: %s, %d attempts; want untouched", j.State, j.Attempts)
	}

	// Neither a failed nor an inconclusive measurement lifts the fence.
	for _, m := range []struct {
		offset, unc time.Duration
		err         error
	}{{0, 0, errors.New("database unreachable")}, {relay.MaxClockSkew + time.Second, 2 * time.Second, nil}} {
		lg.set(m.offset, m.unc, m.err)
		if err := svc.CheckClock(ctx); !errors.Is(err, relay.ErrClockSkew) {
			t.Errorf("CheckClock with %v ±%v (%v): %v; want still fenced", m.offset, m.unc, m.err, err)
		}
	}

	lg.set(relay.MaxClockSkew-time.Second, time.Millisecond, nil)
	if err := svc.CheckClock(ctx); err != nil {
		t.Fatalf("CheckClock within the bound: %v, want nil", err)
	}
	if got := countLines(logs, "warn", "clock fence lifted"); got != 1 {
		t.Errorf("fence lifted lines = %d, want 1", got)
	}
	if res, err := svc.Send(ctx, p, relay.SendOptions{}); err != nil || res.Job.State != gmailrelay.StateSent {
		t.Errorf("send after the fence lifted: %s, %v; want sent", res.Job.State, err)
	}
	if got := emu.Deliveries(p.MessageID); got != 1 {
		t.Errorf("emulator results: %d deliveries, want 1", got)
	}

	// A manual clock runs apart from the log's by design: no fence.
	lg.set(-30*time.Second, 0, nil)
	if manual := newManual(); manual.CheckClock(ctx) != nil || manual.ClockStatus().On {
		t.Errorf("manual clock: fence %+v, want off", manual.ClockStatus())
	}
}

// fenceRelay is a Service, its Env, policy, logger (collected in logs)
// and Gmail client.
type fenceRelay struct {
	te     *testenv.Env
	svc    *relay.Service
	pol    *policy.Policy
	logger zerolog.Logger
	logs   *testenv.LockedBuffer
	gm     *gmailapi.Client
}

// fenceService is a Service on lg (a bbolt log posing as a shared one) on
// the host's clock, its logs collected.
func fenceService(t *testing.T, lg *fakeClockLog) fenceRelay {
	t.Helper()
	pol := policy.Default()
	pol.VerifyHandle = policy.VerifyNever
	logs := &testenv.LockedBuffer{}
	logger := zerolog.New(logs)
	te := testenv.New(t, testenv.Options{HostClock: true, Policy: pol, Logger: &logger, SendTimeout: 2 * time.Second,
		OpenLog: func(t testing.TB, now func() time.Time) gmailrelay.Store {
			lg.Log = acceptlogtest.OpenPath(t, filepath.Join(t.TempDir(), "relay.db"), acceptlog.Options{Now: now})
			return lg
		}})
	return fenceRelay{te: te, svc: te.Service, pol: pol, logger: logger, logs: logs, gm: te.Provider.(*gmailapi.Client)}
}

// The fence's reference is the other replicas, not the log's (the
// database's) clock: the median of the live replicas' clocks and the
// log's. Before, every replica was compared with the database alone, so a
// database 10 s off fenced every replica (a total outage). A replica with
// no peer's clock to compare with is compared with the database's, and
// Google's breaks the tie; a database clock off the replicas' (or off a
// lone replica's and Google's) is named in a warning (once) and in
// /readyz's status, and fences nobody.
func TestClockFenceComparesWithTheOtherReplicas(t *testing.T) {
	for _, tc := range []struct {
		name        string
		offset      time.Duration   // the database's clock minus this replica's
		peers       []time.Duration // the other live replicas'
		gmail       bool            // Google's clock measured (a Gmail call, on this replica's clock)
		fenced      bool
		status, log string // in ClockStatus().String(); in one WARN line ("" none)
	}{
		// Alone, the database decides: a replica starting first, or whose
		// peers have not published (an older version), still writes leases
		// and pauses the next replicas read (the review's finding: a
		// replica 2 h ahead starting first paused the next one for 2 h).
		{"alone 30 s ahead of the database", -30 * time.Second, nil, false, true,
			"fenced: this replica's clock is 30s (±1ms) ahead of the database's (no other replica has published its clock lately)", ""},
		// ... unless Google's clock agrees with this replica's.
		{"alone 30 s ahead of the database, in step with Google", -30 * time.Second, nil, true, false,
			"in step", "the database's clock is 30s behind this replica's (no other replica's clock published lately) and Google's: fix its time sync"},
		{"two replicas 10 s ahead of the database", -10 * time.Second, []time.Duration{-10 * time.Second}, false, false,
			"in step: this replica's clock is 0s (±1ms) ahead of the other replicas'", "the database's clock is 10s behind the replicas' (median): fix its time sync; replicas are not fenced for it"},
		{"12 s ahead of a replica and the database that agree", -12 * time.Second, []time.Duration{0}, false, true,
			"fenced: this replica's clock is 12s (±1ms) ahead of the other replicas' (the median of 1 other live replica and the database's", ""},
		{"12 s ahead of two replicas, the database 10 s behind them", -22 * time.Second, []time.Duration{-10 * time.Second, -10 * time.Second}, false, true,
			"fenced: this replica's clock is 12s (±1ms) ahead of the other replicas' (the median of 2 other live replicas", "the database's clock is 10s behind the replicas'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lg := &fakeClockLog{}
			lg.setPeers(tc.offset, time.Millisecond, nil, tc.peers...)
			fr := fenceService(t, lg) // New measures
			svc, logs, gm := fr.svc, fr.logs, fr.gm
			if tc.gmail {
				if _, err := gm.List(context.Background(), "me", "", nil, "", 1); err != nil {
					t.Fatal(err)
				}
			}
			for range 2 {
				if err := svc.CheckClock(context.Background()); (err != nil) != tc.fenced || (err != nil && !errors.Is(err, relay.ErrClockSkew)) {
					t.Errorf("CheckClock: %v, want fenced %v", err, tc.fenced)
				}
			}
			if st := svc.ClockStatus(); !strings.Contains(st.String(), tc.status) {
				t.Errorf("status %q, want it to contain %q", st, tc.status)
			}
			if tc.log != "" && countLines(logs, "warn", tc.log) != 1 {
				t.Errorf("WARN lines %q: %d, want 1\n%s", tc.log, countLines(logs, "warn", tc.log), logs.String())
			}
			if tc.log == "" && countLines(logs, "warn", "the database's clock") != 0 {
				t.Errorf("a warning about the database's clock, want none\n%s", logs.String())
			}
		})
	}
}

// /readyz takes no measurement of its own while the last one is younger
// than 10 s, and concurrent calls share one: 8 of them with a measurement
// of 400 ms make one, never two at once, and a sweeper pass started
// meanwhile waits for at most that one before measuring (before, every
// /readyz measured, all serialised on a mutex the sweeper's CheckClock
// queued behind). Waiting for a measurement honours the context.
func TestReadyzSharesOneClockMeasurement(t *testing.T) {
	const delay = 400 * time.Millisecond
	ctx := context.Background()
	lg := &fakeClockLog{}
	lg.set(0, time.Millisecond, nil)
	fr := fenceService(t, lg)
	svc := fr.svc
	srv := httptest.NewServer(api.New(api.Config{Relay: svc, Log: lg, Policy: fr.pol, MsgIDDomain: svcDomain, Logger: zerolog.Nop()}))
	defer srv.Close()
	counts := func() (calls, maxRunning int) {
		lg.mu.Lock()
		defer lg.mu.Unlock()
		return lg.calls, lg.maxRunning
	}
	readyz := func(n int) *sync.WaitGroup {
		var wg sync.WaitGroup
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := http.Get(srv.URL + "/readyz")
				if err != nil {
					t.Error(err)
					return
				}
				var rz map[string]any
				_ = json.NewDecoder(resp.Body).Decode(&rz)
				resp.Body.Close()
				if c, _ := rz["clock"].(string); resp.StatusCode != http.StatusOK || !strings.HasPrefix(c, "in step") {
					t.Errorf("/readyz: %d %v, want ready and in step", resp.StatusCode, rz)
				}
			}()
		}
		return &wg
	}

	readyz(8).Wait()
	if calls, _ := counts(); calls != 1 {
		t.Errorf("measurements after New and 8 /readyz: %d, want 1 (New's, still fresh)", calls)
	}

	lg.mu.Lock()
	lg.delay, lg.started = delay, make(chan struct{}, 1)
	lg.mu.Unlock()
	svc.ForgetClockMeasurement()
	wg := readyz(8)
	<-lg.started
	time.Sleep(100 * time.Millisecond) // the other /readyz calls are waiting too
	t0 := time.Now()
	if _, err := sweeper.New(fr.te.SweeperConfig()).RunOnce(ctx); err != nil {
		t.Errorf("sweeper pass: %v", err)
	}
	took := time.Since(t0)
	wg.Wait()
	calls, most := counts()
	if calls != 3 || most != 1 {
		t.Errorf("measurements: %d in all, %d at once; want 3 (New, one for the 8 /readyz, the sweeper's), 1 at once", calls, most)
	}
	if took > 2*delay+300*time.Millisecond {
		t.Errorf("sweeper pass took %v with 8 /readyz measuring, want at most one measurement's wait (%v) and its own", took, delay)
	}

	// A caller that stops waiting does not wait for the measurement.
	select {
	case <-lg.started: // the sweeper's
	default:
	}
	svc.ForgetClockMeasurement()
	done := make(chan struct{})
	go func() { _ = svc.CheckClock(ctx); close(done) }()
	<-lg.started
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	t0 = time.Now()
	st := svc.RecentClock(short)
	err := svc.CheckClock(short)
	if took := time.Since(t0); took > delay/2 || !st.On || err != nil {
		t.Errorf("RecentClock and CheckClock with 50 ms to wait: %v, %v after %v; want the last status within about 100 ms", st, err, took)
	}
	<-done
}
