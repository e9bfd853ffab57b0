package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmailrelay/gmailrelay/acceptlog"
	"github.com/gmailrelay/gmailrelay/api"
	"github.com/gmailrelay/gmailrelay/faultmodes"
	"github.com/gmailrelay/gmailrelay/gmailapi"
	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/internal/gctune"
	"github.com/gmailrelay/gmailrelay/policy"
	"github.com/gmailrelay/gmailrelay/relay"
)

// The send benchmark runs the emulator and the relay each in a process of
// its own (the benchmark's test binary started again, see RunChild), so
// that each one's CPU and allocations are its own: the test process holds
// only Google's client.
const (
	childRoleEnv     = "GMAILRELAY_BENCH_SERVE" // "emulator", "relay" or "proxy"
	childLatencyEnv  = "GMAILRELAY_BENCH_LATENCY"
	childEmulatorEnv = "GMAILRELAY_BENCH_EMULATOR"
	childDirEnv      = "GMAILRELAY_BENCH_DIR"
	childReadyPrefix = "BENCH-SERVE "
	// ProfileEnv, when set in the benchmark's environment, makes every
	// child write a CPU profile and an allocation profile named
	// <value>-<role>-<pid>-cpu.pprof and -allocs.pprof when it stops;
	// with <ProfileEnv>_EVERY_ALLOC set too, the allocation profile
	// records every allocation.
	ProfileEnv = "GMAILRELAY_BENCH_PROFILE"
)

// Child roles.
const (
	roleEmulator = "emulator"
	roleRelay    = "relay"
	roleProxy    = "proxy"
)

// IsChild says whether this process was started by SendOverhead as one of
// its servers. The benchmark's TestMain calls RunChild then.
func IsChild() bool { return os.Getenv(childRoleEnv) != "" }

// ChildStats are a child's figures since it started (CPU, Mallocs,
// Commits, Deliveries…) and what it recorded since the last read (the
// relay's send phases, the emulator's send arrivals).
type ChildStats struct {
	CPUNanos int64 `json:"cpu_ns"`
	// SysNanos is the system (kernel) part of CPUNanos.
	SysNanos int64  `json:"sys_ns"`
	Mallocs  uint64 `json:"mallocs"`
	// Waits and Preempted are the process's voluntary and involuntary
	// context switches (see Usage).
	Waits     int64 `json:"waits"`
	Preempted int64 `json:"preempted"`
	// GCNanos is the runtime's estimate of its collector's CPU (GCStats),
	// GCs the collections so far, HeapBytes the heap in use (HeapAlloc).
	GCNanos   int64  `json:"gc_ns"`
	GCs       uint64 `json:"gcs"`
	HeapBytes uint64 `json:"heap_bytes"`
	// Commits are the relay's acceptance-log commits (fsyncs); zero for
	// the other roles.
	Commits uint64 `json:"commits"`
	// Deliveries are the sends the emulator accepted.
	Deliveries int `json:"deliveries"`
	// Messages the emulator holds; only filled when asked for
	// (/bench/stats?messages=1): counting copies every stored message, so
	// the harness asks once, after its last measured sends.
	Messages int `json:"messages"`
	// Conns are the connections the child has accepted.
	Conns int64 `json:"conns"`
	// Phases are the relay's SendTimings since the last read.
	Phases []api.SendTiming `json:"phases,omitempty"`
	// Arrivals are the times (ns since the emulator started) at which the
	// emulator received each send request since the last read, in order.
	Arrivals []int64 `json:"arrivals,omitempty"`
}

// sub returns the counters of st minus those of before (what a stretch of
// sends cost between two reads); the recorded lists are st's.
func (st ChildStats) sub(before ChildStats) ChildStats {
	st.CPUNanos -= before.CPUNanos
	st.SysNanos -= before.SysNanos
	st.Mallocs -= before.Mallocs
	st.Waits -= before.Waits
	st.Preempted -= before.Preempted
	st.GCNanos -= before.GCNanos
	st.GCs -= before.GCs
	st.Commits -= before.Commits
	st.Deliveries -= before.Deliveries
	st.Conns -= before.Conns
	return st
}

// plus adds two stretches' counters and joins their recorded lists; the
// heap is o's (the later one).
func (st ChildStats) plus(o ChildStats) ChildStats {
	st.CPUNanos += o.CPUNanos
	st.SysNanos += o.SysNanos
	st.Mallocs += o.Mallocs
	st.Waits += o.Waits
	st.Preempted += o.Preempted
	st.GCNanos += o.GCNanos
	st.GCs += o.GCs
	st.HeapBytes = o.HeapBytes
	st.Commits += o.Commits
	st.Deliveries += o.Deliveries
	st.Conns += o.Conns
	st.Phases = append(slices.Clip(st.Phases), o.Phases...)
	st.Arrivals = append(slices.Clip(st.Arrivals), o.Arrivals...)
	return st
}

// RunChild serves the role named by the environment on a loopback port,
// prints "BENCH-SERVE <url>" on stdout, and serves until stdin is closed.
// Besides its role's API it answers GET /bench/stats (ChildStats, the
// phases and arrivals collected since the last call) on the same port. It
// returns the process's exit code.
func RunChild() int {
	if err := runChild(); err != nil {
		fmt.Fprintln(os.Stderr, "bench child:", err)
		return 1
	}
	return 0
}

func runChild() error {
	ctx := context.Background()
	if prefix := os.Getenv(ProfileEnv); prefix != "" {
		stop, err := profile(fmt.Sprintf("%s-%s-%d", prefix, os.Getenv(childRoleEnv), os.Getpid()))
		if err != nil {
			return err
		}
		defer stop()
	}
	var (
		handler http.Handler
		stats   func(st *ChildStats, full bool)
		cleanup = func() {}
	)
	role := os.Getenv(childRoleEnv)
	if role == roleRelay || role == roleProxy {
		// The relay's collector settings, as serve sets them; the proxy
		// gets them too (like the relay's server and transport): it is
		// measured as the relay's floor.
		gctune.Apply(os.Getenv, gctune.Limit(api.DefaultMaxInflightBytes))
	}
	switch role {
	case roleEmulator:
		lat, err := time.ParseDuration(os.Getenv(childLatencyEnv))
		if err != nil {
			return fmt.Errorf("%s: %w", childLatencyEnv, err)
		}
		emu := gmailfake.New(gmailfake.Options{Latency: lat, QuotaPerMinute: unlimited})
		arr := newArrivals()
		handler = arr.wrap(emu.Handler())
		stats = func(st *ChildStats, full bool) {
			st.Deliveries = emu.Stats().Deliveries
			st.Arrivals = arr.drain()
			if full {
				st.Messages = emu.Count("")
			}
		}
	case roleRelay:
		r, err := newChildRelay(ctx, os.Getenv(childEmulatorEnv), os.Getenv(childDirEnv))
		if err != nil {
			return err
		}
		handler, stats, cleanup = r.handler, r.stats, r.close
	case roleProxy:
		p, err := newChildProxy(os.Getenv(childEmulatorEnv))
		if err != nil {
			return err
		}
		handler, stats = p, func(*ChildStats, bool) {}
	default:
		return fmt.Errorf("%s=%q: want %s, %s or %s", childRoleEnv, role, roleEmulator, roleRelay, roleProxy)
	}
	defer cleanup()
	var conns atomic.Int64
	mux := http.NewServeMux()
	mux.Handle("/", handler)
	mux.HandleFunc("GET /bench/stats", func(w http.ResponseWriter, r *http.Request) {
		// The process's counters first: the rest of this call (the role's
		// figures, the JSON) is counted in the next stretch, the same for
		// every stretch as long as it does not grow with the stored state.
		u := ReadUsage()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		gc, gcs := GCStats()
		st := ChildStats{CPUNanos: int64(u.User + u.Sys), SysNanos: int64(u.Sys), Mallocs: ms.Mallocs,
			Waits: u.Waits, Preempted: u.Preempted, GCNanos: int64(gc), GCs: gcs, HeapBytes: ms.HeapAlloc,
			Conns: conns.Load()}
		stats(&st, r.URL.Query().Get("messages") == "1")
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(st)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	// The relay's own server settings (cmd/gmailrelay newHTTPServer).
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 2 * time.Minute,
		WriteTimeout: 5 * time.Minute, IdleTimeout: 90 * time.Second, MaxHeaderBytes: 64 << 10,
		ConnState: func(_ net.Conn, st http.ConnState) {
			if st == http.StateNew {
				conns.Add(1)
			}
		}}
	go func() { _ = srv.Serve(ln) }()
	fmt.Printf("%shttp://%s\n", childReadyPrefix, ln.Addr())
	_, _ = io.Copy(io.Discard, os.Stdin) // until the parent closes it
	return srv.Close()
}

// profile starts a CPU profile into prefix-cpu.pprof; the func it returns
// stops it and writes the allocation profile prefix-allocs.pprof.
func profile(prefix string) (func(), error) {
	if os.Getenv(ProfileEnv+"_EVERY_ALLOC") != "" {
		runtime.MemProfileRate = 1 // exact counts per call site (CPU figures then mean nothing)
	}
	f, err := os.Create(prefix + "-cpu.pprof")
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
		if m, err := os.Create(prefix + "-allocs.pprof"); err == nil {
			_ = pprof.Lookup("allocs").WriteTo(m, 0)
			_ = m.Close()
		}
	}, nil
}

// childRelay is the relay as `gmailrelay serve` wires it for a send:
// metrics (observer and timed provider), fault rules (none set), a JSON
// logger at info (into io.Discard), the Gmail adapter with its pooled
// transport, a bbolt log; quotas and a daily limit that never limit, and
// verify_handle never.
type childRelay struct {
	handler http.Handler
	log     *acceptlog.Log

	mu     sync.Mutex
	phases []api.SendTiming
}

func newChildRelay(ctx context.Context, emulator, dir string) (*childRelay, error) {
	if emulator == "" || dir == "" {
		return nil, fmt.Errorf("relay child needs %s and %s", childEmulatorEnv, childDirEnv)
	}
	lg, err := acceptlog.Open(filepath.Join(dir, "accept.db"), acceptlog.Options{})
	if err != nil {
		return nil, err
	}
	gm, err := gmailapi.New(ctx, gmailapi.Config{Endpoint: emulator})
	if err != nil {
		_ = lg.Close()
		return nil, err
	}
	logger := zerolog.New(io.Discard).Level(zerolog.InfoLevel).With().Timestamp().Logger()
	metrics := api.NewMetrics()
	pol := policy.Default()
	pol.MsgIDDomain = MsgIDDomain
	pol.VerifyHandle = policy.VerifyNever
	pol.Mailboxes = map[string]policy.Mailbox{policy.DefaultMailbox: {Name: policy.DefaultMailbox, DailySendLimit: unlimited}}
	faults := faultmodes.New(faultmodes.Options{Seed: 1})
	svc, err := relay.New(ctx, relay.Config{Log: lg, Provider: faultmodes.Wrap(metrics.Provider(gm), faults, nil), Policy: pol,
		Quota: relay.NewQuota(unlimited, nil), Logger: logger, Observer: metrics})
	if err != nil {
		_ = lg.Close()
		return nil, err
	}
	c := &childRelay{log: lg}
	c.handler = api.New(api.Config{Relay: svc, Log: lg, Policy: pol, Faults: faults, MsgIDDomain: MsgIDDomain, Metrics: metrics, Logger: logger, Mode: "gmail",
		OnSendTiming: func(t api.SendTiming) {
			c.mu.Lock()
			c.phases = append(c.phases, t)
			c.mu.Unlock()
		}})
	return c, nil
}

func (c *childRelay) stats(st *ChildStats, _ bool) {
	st.Commits = c.log.Commits()
	c.mu.Lock()
	st.Phases, c.phases = c.phases, nil
	c.mu.Unlock()
}

func (c *childRelay) close() { _ = c.log.Close() }

// newChildProxy is a bare reverse proxy to the emulator: what any Go
// proxy pays per request on this machine (server, a request cloned and
// forwarded over a pooled transport, the answer copied back), with no
// log, no decoding and no Google client. Its transport is the relay's
// Gmail client's (gmailapi.PooledTransport), and it is served with the
// relay's server settings (runChild), so that relay ÷ proxy is the cost
// of what the relay does beyond forwarding.
func newChildProxy(emulator string) (http.Handler, error) {
	if emulator == "" {
		return nil, fmt.Errorf("proxy child needs %s", childEmulatorEnv)
	}
	target, err := url.Parse(emulator)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", childEmulatorEnv, err)
	}
	p := httputil.NewSingleHostReverseProxy(target)
	p.Transport = gmailapi.PooledTransport()
	return p, nil
}

// arrivals records when each send request reaches the emulator (a clock
// read and an append under a lock per send, the same on every path).
type arrivals struct {
	start time.Time
	mu    sync.Mutex
	at    []int64
}

func newArrivals() *arrivals { return &arrivals{start: time.Now(), at: make([]int64, 0, 4096)} }

func (a *arrivals) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/messages/send") {
			t := int64(time.Since(a.start))
			a.mu.Lock()
			a.at = append(a.at, t)
			a.mu.Unlock()
		}
		h.ServeHTTP(w, r)
	})
}

// drain returns the arrivals since the last drain, in order.
func (a *arrivals) drain() []int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := slices.Clone(a.at)
	a.at = a.at[:0]
	slices.Sort(out) // appends race with each other by a few ns
	return out
}

// child is a running child server.
type child struct {
	URL   string
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

// startChild starts this test binary again as a server of role, with env
// added to its environment, and waits for its URL.
func startChild(role string, env ...string) (*child, error) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), childRoleEnv+"="+role), env...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s child: %w", role, err)
	}
	c := &child{cmd: cmd, stdin: stdin}
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if u, ok := strings.CutPrefix(sc.Text(), childReadyPrefix); ok {
			c.URL = u
			go func() { _, _ = io.Copy(io.Discard, stdout) }()
			return c, nil
		}
	}
	_ = c.stop()
	return nil, fmt.Errorf("%s child exited before serving (is bench.RunChild called from TestMain?)", role)
}

// stats reads the child's figures; with messages, the emulator counts the
// messages it holds (see ChildStats.Messages).
func (c *child) stats(ctx context.Context, messages bool) (ChildStats, error) {
	var st ChildStats
	u := c.URL + "/bench/stats"
	if messages {
		u += "?messages=1"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return st, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return st, fmt.Errorf("child stats: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("child stats: status %d", resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return st, fmt.Errorf("child stats: %w", err)
	}
	return st, nil
}

// stop closes the child's stdin and waits for it to exit.
func (c *child) stop() error {
	_ = c.stdin.Close()
	err := c.cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return fmt.Errorf("child exited: %w", err)
	}
	return err
}
