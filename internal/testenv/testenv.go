// Package testenv is the one test harness for "a relay over the Gmail
// emulator and an acceptance log": it starts a gmailfake server, opens an
// acceptance log (by default bbolt in a temporary directory, checked for
// its invariants when the test ends, see acceptlogtest; Options.OpenLog
// opens another, such as PostgreSQL) and builds a relay.Service that
// reaches the emulator through Google's real client, everything on one
// injected manual clock (or the host's, Options.HostClock; or the relay
// on a clock of its own, Options.Now). Replica builds more relays over
// the same emulator and log, as replicas of one deployment. Packages'
// tests add what they test on top (a sweeper, an outbox, the api, the
// console), wired from the Env's fields as cmd/gmailrelay wires a relay
// process: nothing is asked of the Service but its own work.
package testenv

import (
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/acceptlog"
	"github.com/gmailrelay/gmailrelay/acceptlog/acceptlogtest"
	"github.com/gmailrelay/gmailrelay/faultmodes"
	"github.com/gmailrelay/gmailrelay/gmailapi"
	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/internal/testclock"
	"github.com/gmailrelay/gmailrelay/policy"
	"github.com/gmailrelay/gmailrelay/relay"
	"github.com/gmailrelay/gmailrelay/sweeper"
)

// Options configure an Env; the zero value is a working relay.
type Options struct {
	// Emulator configures the gmailfake server; its Now is always the
	// Env's clock (the host's with HostClock).
	Emulator gmailfake.Options
	// Clock, when set, is the Env's manual clock (one the test made
	// before the Env, to build another clock on); nil means a new one.
	Clock *testclock.Clock
	// HostClock runs the emulator, and the relay unless Now is set, on
	// the host's clock (time.Now): the Env has no manual Clock.
	HostClock bool
	// Now, when set, is the relay's clock (its log, Gmail client, fault
	// rules, quota, Service and SweeperConfig) apart from the emulator's.
	Now func() time.Time
	// OpenLog, when set, opens the acceptance log the relay runs on
	// instead of the bbolt log at Path (a PostgreSQL schema, a bbolt log
	// behind a test's decorator, a log filled beforehand); now is the
	// relay's clock. It registers its own cleanup.
	OpenLog func(t testing.TB, now func() time.Time) gmailrelay.Store
	// Provider, when set, is the relay's Gmail client instead of a new
	// one for the emulator (a test's wrapper around another Env's
	// Provider); the Env's fault rules still wrap it.
	Provider relay.Provider
	// HTTPClient, when set, is the HTTP client of the Gmail client Dial
	// makes (a transport between the relay and the emulator).
	HTTPClient *http.Client
	// Faults are the fault rules wrapping the relay's Gmail client
	// outermost, as serve wraps it; nil means a new set without rules.
	Faults *faultmodes.Set
	// Policy is the relay's policy; nil means DefaultPolicy().
	Policy *policy.Policy
	// QuotaPerMinute is the relay's Gmail budget; 0 means 1,000,000
	// (never the limit); below 0 leaves it to the relay (the policy's
	// quota_per_minute, shared between replicas).
	QuotaPerMinute int
	// SendTimeout bounds each Gmail call; 0 means 5 s.
	SendTimeout time.Duration
	// Logger is the relay's logger; nil means none.
	Logger *zerolog.Logger
	// Configure, when set, edits the relay's Config last (wrap the
	// Provider, set an Observer, OnQueued, ManualClock, …).
	Configure func(*relay.Config)
}

// Env is a running relay over the Gmail emulator. Log, Store and Service
// change on Open and Restart.
type Env struct {
	T testing.TB
	// Clock is the emulator's manual clock, and the relay's unless
	// Options.Now is set; nil with Options.HostClock.
	Clock *testclock.Clock
	// Now is the relay's clock: Options.Now, else Clock.Now (time.Now
	// with Options.HostClock).
	Now         func() time.Time
	Emulator    *gmailfake.Server
	EmulatorURL string
	// Path is the bbolt acceptance log's file, kept across restarts.
	Path   string
	Policy *policy.Policy
	Faults *faultmodes.Set
	// Store is the acceptance log the Service runs on: Log, or what
	// Options.OpenLog opened.
	Store gmailrelay.Store
	// Log is Store when it is a bbolt log (nil otherwise).
	Log      *acceptlog.Log
	Provider relay.Provider
	// Logger is the relay's logger (Options.Logger, or none).
	Logger zerolog.Logger
	// Quota is the default mailbox's Gmail quota budget as Build made it
	// (or Options.Configure replaced it, or the relay made it).
	Quota   *relay.Quota
	Service *relay.Service

	opts     Options
	endpoint string
}

// DefaultPolicy is policy.Default() with a "billing" channel whose unknown
// sends go to review after one check a minute later, with one attempt.
func DefaultPolicy() *policy.Policy {
	p := policy.Default()
	p.Channels["billing"] = policy.Channel{Name: "billing", OnUnknown: policy.Review, Grace: time.Minute, Checks: 1, MaxAttempts: 1}
	return p
}

// New starts the emulator and opens the log and the service.
func New(t testing.TB, o Options) *Env {
	t.Helper()
	e := Start(t, o)
	e.Open(e.EmulatorURL)
	return e
}

// Start starts the emulator and makes the relay's Gmail client
// (Provider), opening no log and building no Service: the ground for a
// test that builds each of its relays with Replica.
func Start(t testing.TB, o Options) *Env {
	t.Helper()
	e := &Env{T: t, Path: filepath.Join(t.TempDir(), "accept.db")}
	em := o.Emulator
	if !o.HostClock {
		e.Clock = o.Clock
		if e.Clock == nil {
			e.Clock = testclock.New()
		}
		em.Now = e.Clock.Now
	}
	e.Emulator, e.EmulatorURL = gmailfake.NewTestServer(t, em)
	e.configure(o)
	e.Dial(e.EmulatorURL)
	return e
}

// configure sets what Options decide on the relay's side.
func (e *Env) configure(o Options) {
	e.opts = o
	switch {
	case o.Now != nil:
		e.Now = o.Now
	case e.Clock != nil:
		e.Now = e.Clock.Now
	default:
		e.Now = time.Now
	}
	e.Policy = o.Policy
	if e.Policy == nil {
		e.Policy = DefaultPolicy()
	}
	e.Faults = o.Faults
	if e.Faults == nil {
		e.Faults = faultmodes.New(faultmodes.Options{Seed: 1, Now: e.Now})
	}
	e.Logger = zerolog.Nop()
	if o.Logger != nil {
		e.Logger = *o.Logger
	}
}

// Open (re)opens the log and builds a new Service (running its crash
// recovery) whose Gmail client calls endpoint: OpenLog, Dial, Build.
func (e *Env) Open(endpoint string) {
	e.T.Helper()
	e.OpenLog()
	e.Dial(endpoint)
	e.Build(0)
}

// OpenLog opens the log (after the test closed the previous one): the
// bbolt log at Path, or Options.OpenLog's.
func (e *Env) OpenLog() {
	e.T.Helper()
	if e.opts.OpenLog != nil {
		e.Store = e.opts.OpenLog(e.T, e.Now)
		e.Log, _ = e.Store.(*acceptlog.Log)
		return
	}
	e.Log = acceptlogtest.OpenPath(e.T, e.Path, acceptlog.Options{Now: e.Now})
	e.Store = e.Log
}

// Dial makes a new Gmail client for endpoint, through Google's real
// client, as Provider (Options.Provider instead, when set).
func (e *Env) Dial(endpoint string) {
	e.T.Helper()
	e.endpoint = endpoint
	if e.opts.Provider != nil {
		e.Provider = e.opts.Provider
		return
	}
	gm, err := gmailapi.New(context.Background(), gmailapi.Config{Endpoint: endpoint, Now: e.Now, HTTPClient: e.opts.HTTPClient})
	if err != nil {
		e.T.Fatalf("gmail client: %v", err)
	}
	e.Provider = gm
}

// Build makes a new Service (running its crash recovery) over Store and
// Provider (which a test may have wrapped), with a fresh quota budget of
// perMinute Gmail units; 0 means Options.QuotaPerMinute.
func (e *Env) Build(perMinute int) {
	e.T.Helper()
	if perMinute == 0 {
		perMinute = e.opts.QuotaPerMinute
	}
	if perMinute == 0 {
		perMinute = 1_000_000
	}
	timeout := e.opts.SendTimeout
	if timeout == 0 {
		timeout = 5 * time.Second
	}
	cfg := relay.Config{Log: e.Store, Provider: e.Provider, Policy: e.Policy, Now: e.Now,
		Logger: e.Logger, SendTimeout: timeout}
	if perMinute > 0 {
		cfg.Quota = relay.NewQuota(perMinute, e.Now)
	}
	if e.opts.Configure != nil {
		e.opts.Configure(&cfg)
	}
	e.wrapFaults(&cfg)
	e.Quota = cfg.Quota
	var err error
	if e.Service, err = relay.New(context.Background(), cfg); err != nil {
		e.T.Fatalf("relay.New: %v", err)
	}
	if e.Quota == nil {
		if m, err := e.Service.MailboxOf(policy.DefaultMailbox); err == nil {
			e.Quota = m.Quota()
		}
	}
}

// wrapFaults puts the Env's fault rules around every Gmail client of cfg,
// outermost (around whatever Configure wrapped), as serve does.
func (e *Env) wrapFaults(cfg *relay.Config) {
	if cfg.Provider != nil {
		cfg.Provider = faultmodes.Wrap(cfg.Provider, e.Faults, nil)
	}
	if len(cfg.Mailboxes) == 0 {
		return
	}
	boxes := make(map[string]relay.MailboxConfig, len(cfg.Mailboxes)) // Configure's map stays as it gave it
	for name, mc := range cfg.Mailboxes {
		if mc.Provider != nil {
			mc.Provider = faultmodes.Wrap(mc.Provider, e.Faults, nil)
		}
		boxes[name] = mc
	}
	cfg.Mailboxes = boxes
}

// SweeperConfig is a relay process's sweeper.Config over the Env: its
// log, policy, clock and logger, and its Service as mailboxes and send
// path. Call it again after Open or Restart.
func (e *Env) SweeperConfig() sweeper.Config {
	return sweeper.Config{Log: e.Store, Policy: e.Policy, Mailboxes: e.Service, Attempter: e.Service, Replicas: e.Service,
		Logger: &e.Logger, Now: e.Now}
}

// Restart closes the log and opens everything again on the same file and
// endpoint, as a process restart would.
func (e *Env) Restart() {
	e.T.Helper()
	if err := e.Store.Close(); err != nil {
		e.T.Fatalf("close log: %v", err)
	}
	e.Open(e.endpoint)
}

// Job reads a job from the log.
func (e *Env) Job(messageID string) gmailrelay.Job {
	e.T.Helper()
	j, err := e.Store.Get(context.Background(), messageID)
	if err != nil {
		e.T.Fatalf("job %s: %v", messageID, err)
	}
	return j
}

// Lines reads a job's lines from the log.
func (e *Env) Lines(messageID string) []gmailrelay.Line {
	e.T.Helper()
	lines, err := e.Store.JobLines(context.Background(), messageID)
	if err != nil {
		e.T.Fatalf("lines of %s: %v", messageID, err)
	}
	return lines
}

// Count returns how many of lines are of kind k.
func Count(lines []gmailrelay.Line, k gmailrelay.Kind) int {
	n := 0
	for _, l := range lines {
		if l.Kind == k {
			n++
		}
	}
	return n
}

// WantInvalid fails t unless err is a CodeInvalid *relay.Error naming
// field.
func WantInvalid(t testing.TB, err error, field string) {
	t.Helper()
	var e *relay.Error
	if !errors.As(err, &e) {
		t.Fatalf("err = %v, want a *relay.Error with field %q", err, field)
	}
	if e.Code != relay.CodeInvalid || e.Field != field {
		t.Fatalf("err = %v (code %s, field %q), want code %s, field %q", err, e.Code, e.Field, relay.CodeInvalid, field)
	}
}
