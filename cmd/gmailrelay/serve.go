package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/acceptlog"
	"github.com/gmailrelay/gmailrelay/api"
	"github.com/gmailrelay/gmailrelay/console"
	"github.com/gmailrelay/gmailrelay/faultmodes"
	"github.com/gmailrelay/gmailrelay/gmailapi"
	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/internal/gctune"
	"github.com/gmailrelay/gmailrelay/internal/testclock"
	"github.com/gmailrelay/gmailrelay/outbox"
	"github.com/gmailrelay/gmailrelay/pglog"
	"github.com/gmailrelay/gmailrelay/policy"
	"github.com/gmailrelay/gmailrelay/relay"
	"github.com/gmailrelay/gmailrelay/retention"
	"github.com/gmailrelay/gmailrelay/sweeper"
)

// relayServer is a running relay: its listener, HTTP server, sweeper and log.
type relayServer struct {
	URL         string
	EmulatorURL string // sandbox only
	Emulator    *gmailfake.Server

	logger       zerolog.Logger
	http         *http.Server
	stopEmulator func()
	sweeper      *sweeper.Sweeper
	outbox       *outbox.Outbox
	retention    *retention.Pass
	ui           *console.Console
	logWatch     *relay.LogWatch
	svc          *relay.Service
	log          gmailrelay.Store
	listener     net.Listener
	served       chan error

	// onShutdownStep, when set (tests), is called before each of close's
	// steps with the step's name.
	onShutdownStep func(step string)
}

// startRelay opens the log, builds the provider, recovers, starts the
// sweeper and serves on a listener it opens first.
func startRelay(ctx context.Context, c serveConfig, logger zerolog.Logger) (*relayServer, error) {
	rs := &relayServer{logger: logger, served: make(chan error, 2)}
	ok := false
	defer func() {
		if !ok {
			if rs.http == nil && rs.listener != nil {
				_ = rs.listener.Close() // the HTTP server's Shutdown closes it once it serves
			}
			rs.close(context.Background())
		}
	}()
	// Listen first: a taken port fails the start before the log's file
	// (or schema) is created, so a failed start leaves nothing behind.
	ln, err := net.Listen("tcp", c.Addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", c.Addr, err)
	}
	rs.listener = ln
	rs.URL = "http://" + ln.Addr().String()
	now, advance := time.Now, func(time.Duration) {}
	if c.Clock == "manual" {
		if c.clock == nil {
			c.clock = testclock.At(time.Now())
		}
		now, advance = c.clock.Now, c.clock.Advance
	}
	gcfg := gmailapi.Config{Endpoint: c.GmailEndpoint, Now: now} // Gmail's retry instants are read on the relay's clock
	mode := "gmail"
	if c.sandbox() {
		mode = "sandbox"
		rs.Emulator = c.emulator
		if rs.Emulator == nil {
			rs.Emulator = c.sandboxEmulator(now)
		}
		url, stop, err := serveEmulator(rs.Emulator)
		if err != nil {
			return nil, err
		}
		rs.EmulatorURL, rs.stopEmulator = url, stop
		gcfg.Endpoint = rs.EmulatorURL
	}
	if c.crashPoint == nil {
		c.crashPoint = crashPoint(c.AllowCrashFaults, os.Getenv("GMAILRELAY_CRASH_AT"), logger)
	}
	lg, where, err := openLog(ctx, c, now, logger)
	if err != nil {
		return nil, err
	}
	rs.log = lg
	faults, handler, err := rs.build(ctx, c, relayClock{now: now, advance: advance}, gcfg, mode)
	if err != nil {
		return nil, err
	}
	// Each mailbox's send-as list is read before the first request is
	// served (bounded: a Gmail that does not answer leaves From unchecked
	// until a later read succeeds), then every hour.
	sctx, cancel := context.WithTimeout(ctx, sendAsStartTimeout)
	if _, err := rs.svc.RefreshSendAs(sctx); err != nil {
		logger.Warn().Err(err).Msg("send-as lists: not all read at start; retried every minute")
	}
	// The history cursors start before the first send, so the history
	// covers every attempt (bounded as the send-as reads).
	if err := rs.sweeper.StartCursors(sctx); err != nil {
		logger.Warn().Err(err).Msg("history cursors: not all started before serving; the first sweeper pass starts them")
	}
	cancel()
	rs.svc.WatchSendAs(context.WithoutCancel(ctx), time.Minute)
	rs.http = newHTTPServer(handler, serverTimeouts(c.SendTimeout))
	go func() { rs.served <- rs.http.Serve(rs.listener) }()
	rs.sweeper.Start(context.WithoutCancel(ctx))
	rs.outbox.Start(context.WithoutCancel(ctx))
	rs.retention.Start(context.WithoutCancel(ctx))
	rs.logWatch.Start(context.WithoutCancel(ctx))
	go rs.ui.Warm(ctx) // the console's chart reads the last hour once, off the request path
	logger.Info().Str("url", rs.URL).Str("mode", mode).Str("data", where).Int64("fault_seed", faults.Seed()).
		Msg("gmailrelay listening")
	if mode == "sandbox" {
		logger.Warn().Str("emulator", rs.EmulatorURL).Str("grace", defaultGrace(c.policy)).
			Msg("SANDBOX MODE: no Gmail credentials, sends go to the embedded Gmail emulator; nothing reaches a real mailbox; " +
				"an ambiguous send is looked for after its channel's grace (" + defaultGrace(c.policy) + ")")
	}
	ok = true
	return rs, nil
}

// relayClock is the relay's clock: now, and advance for a manual clock
// (a no-op on the host's).
type relayClock struct {
	now     func() time.Time
	advance func(time.Duration)
}

// build makes every service of the relay over rs.log and wires each with
// the dependencies it needs: the fault rules (around each mailbox's Gmail
// client, outside its metrics), the send path
// (relay.Service), the sweeper, the outbox, the retention pass, the
// console and the API handler it returns. Nothing runs yet.
func (rs *relayServer) build(ctx context.Context, c serveConfig, clock relayClock, gcfg gmailapi.Config, mode string) (*faultmodes.Set, http.Handler, error) {
	lg, now, logger := rs.log, clock.now, rs.logger
	fopts := faultmodes.Options{Seed: c.FaultSeed, AllowCrash: c.AllowCrashFaults, Now: now}
	metrics := api.NewMetrics()
	if gmailrelay.IsShared(lg) {
		// Several replicas: fault rules and Gmail's pauses live in the
		// database (the daily budget follows the log by itself).
		if fs, ok := lg.(faultmodes.Store); ok {
			fopts.Store = fs
		}
	}
	faults := faultmodes.New(fopts)
	boxes, err := c.buildMailboxes(ctx, gcfg, lg, now, func(p relay.Provider, mailbox string) relay.Provider {
		return faultmodes.Wrap(metrics.MailboxProvider(p, mailbox), faults, crash)
	})
	if err != nil {
		return nil, nil, err
	}
	var box atomic.Pointer[outbox.Outbox] // set below; OnQueued wakes it
	svc, err := relay.New(ctx, relay.Config{
		OnQueued: func() {
			if b := box.Load(); b != nil {
				b.Wake()
			}
		},
		Log: lg, Policy: c.policy, Mailboxes: boxes.configs,
		QuotaPerMinute: c.QuotaPerMinute, Logger: logger, Now: now,
		ManualClock: c.Clock == "manual", // apart from PostgreSQL's by design: no clock fence
		SendTimeout: c.SendTimeout, Observer: metrics,
		CrashPoint: c.crashPoint,
	})
	if err != nil {
		return nil, nil, err
	}
	rs.svc = svc
	rs.logWatch = relay.NewLogWatch(svc, c.logWatchInterval)
	rs.sweeper = sweeper.New(sweeper.Config{Log: lg, Policy: c.policy, Mailboxes: svc, Attempter: svc, Replicas: svc,
		Logger: &rs.logger, Now: now, Interval: c.SweepInterval, History: c.History})
	if rs.outbox, err = outbox.New(outbox.Config{Log: lg, Relay: svc, Now: now, Logger: logger}); err != nil {
		return nil, nil, err
	}
	box.Store(rs.outbox)
	if err := metrics.Register(rs.sweeper.LagCollector(), rs.sweeper.ReportCollector()); err != nil {
		return nil, nil, fmt.Errorf("metrics: %w", err)
	}
	rs.retention = retention.New(retention.Config{Log: lg, Retention: c.policy.Retention, Now: now, Logger: logger})
	var clockAdvance func(time.Duration)
	if c.Clock == "manual" {
		clockAdvance = func(d time.Duration) {
			clock.advance(d)
			rs.outbox.Wake() // its timer runs on real time
		}
		logger.Warn().Msg("MANUAL CLOCK: time moves only through POST /admin/clock (testing mode)")
	}
	rs.ui = console.New(console.Config{Relay: console.Adapt(console.Backend{Log: lg, Policy: c.policy, Faults: faults,
		SendPath: svc, Now: now, Mode: mode}), APIToken: c.APIToken, AdminToken: c.AdminToken, Logger: logger})
	handler := api.New(api.Config{
		Relay: svc, Log: lg, Policy: c.policy, Faults: faults, Now: now,
		Sweeper: rs.sweeper, Outbox: rs.outbox, Retention: rs.retention, APIToken: c.APIToken, AdminToken: c.AdminToken, Console: rs.ui,
		MsgIDDomain: c.policy.MsgIDDomain, MsgIDSecret: c.msgidSecret, FaultHeader: c.FaultHeader, Mode: mode, SandboxEmulator: rs.EmulatorURL,
		Metrics: metrics, Logger: logger,
		AdvanceClock: clockAdvance, MaxInflightBytes: c.MaxInflightBytes, MinBodyRate: c.minBodyRate(),
		Probes: boxes.probes,
	})
	return faults, handler, nil
}

// sendAsStartTimeout bounds the start's read of the send-as lists.
const sendAsStartTimeout = 10 * time.Second

// defaultGrace says the default channel's grace for the start-up lines:
// "default channel 10s", or that there is no default channel.
func defaultGrace(p *policy.Policy) string {
	if ch, ok := p.Channels[policy.DefaultChannel]; ok {
		return "default channel " + ch.Grace.String()
	}
	return "no default channel"
}

// crashPoint returns the CrashPoint hook for crash tests: with
// --allow-crash-faults and GMAILRELAY_CRASH_AT=<point>, the process kills
// itself the first time the send path reaches that point.
func crashPoint(allowed bool, at string, logger zerolog.Logger) func(string) {
	if !allowed || at == "" {
		return nil
	}
	logger.Warn().Str("point", at).Msg("CRASH POINT ARMED: the process will SIGKILL itself there (crash testing)")
	return func(point string) {
		if point == at {
			crash()
		}
	}
}

// shutdownStep is one step of the relay's shutdown; a nil run is skipped.
type shutdownStep struct {
	name string
	run  func(ctx context.Context) error
}

// Shutdown step names, in the only safe order (see close).
const (
	stepHTTP      = "stop accepting"
	stepSweeper   = "stop sweeper"
	stepOutbox    = "stop outbox"
	stepRetention = "stop retention"
	stepSendAs    = "stop send-as reads"
	stepLogWatch  = "stop log watch"
	stepInflight  = "wait for in-flight"
	stepEmulator  = "stop emulator"
	stepLog       = "close log"
)

// shutdownSteps lists close's steps in order, skipping the parts that were
// never started.
func (rs *relayServer) shutdownSteps() []shutdownStep {
	stop := func(f func()) func(context.Context) error {
		return func(context.Context) error { f(); return nil }
	}
	var steps []shutdownStep
	add := func(name string, started bool, run func(context.Context) error) {
		if started {
			steps = append(steps, shutdownStep{name, run})
		}
	}
	add(stepHTTP, rs.http != nil, func(ctx context.Context) error {
		if err := rs.http.Shutdown(ctx); err != nil {
			return fmt.Errorf("shut the http server down: %w", err)
		}
		return nil
	})
	add(stepSweeper, rs.sweeper != nil, stop(func() { rs.sweeper.Stop() }))
	add(stepOutbox, rs.outbox != nil, stop(func() { rs.outbox.Stop() }))
	add(stepRetention, rs.retention != nil, stop(func() { rs.retention.Stop() }))
	add(stepSendAs, rs.svc != nil, stop(func() { rs.svc.StopSendAs() }))
	add(stepLogWatch, rs.logWatch != nil, stop(func() { rs.logWatch.Stop() }))
	add(stepInflight, rs.svc != nil, stop(func() { rs.svc.Wait() }))
	add(stepEmulator, rs.stopEmulator != nil, stop(func() { rs.stopEmulator() }))
	add(stepLog, rs.log != nil, func(context.Context) error {
		if err := rs.log.Close(); err != nil {
			return fmt.Errorf("close the acceptance log: %w", err)
		}
		return nil
	})
	return steps
}

// close shuts the relay down in the only safe order: stop accepting
// requests, stop the sweeper, the outbox, the retention pass and the log
// watch (so no resend starts while in-flight sends are awaited: a
// WaitGroup Add racing its Wait is a misuse), wait for the Gmail calls in flight to be
// recorded, then close the log. Every step runs even when an earlier one
// failed; it returns the errors of all of them (the HTTP shutdown's and
// the log's Close).
func (rs *relayServer) close(ctx context.Context) error {
	var errs []error
	for _, st := range rs.shutdownSteps() {
		if rs.onShutdownStep != nil {
			rs.onShutdownStep(st.name)
		}
		if err := st.run(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c, err := parseServeFlags(args, os.Getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "gmailrelay serve: %v\n", err)
		return 2
	}
	logger := newLogger(stderr, c.LogFormat, c.LogLevel)
	if limit := gctune.Limit(c.MaxInflightBytes); gctune.Apply(os.Getenv, limit) {
		logger.Info().Int64("memory_limit_bytes", limit).
			Msg("soft memory limit set for a server (GOMEMLIMIT, when set, wins)")
	}
	rs, err := startRelay(ctx, c, logger)
	if err != nil {
		fmt.Fprintf(stderr, "gmailrelay serve: %v\n", err)
		if errors.Is(err, gmailrelay.ErrIdentityMismatch) {
			fmt.Fprintf(stderr, "gmailrelay serve: to move this log to the configured identity, with every relay on it stopped: %s\n", c.rekeyCommand())
			return 2 // configuration
		}
		return 1
	}
	fmt.Fprintf(stdout, "gmailrelay listening on %s\n", rs.URL)
	if rs.EmulatorURL != "" {
		fmt.Fprintf(stdout, "SANDBOX: sends go to the embedded Gmail emulator at %s (emulator results, not Gmail); grace: %s\n",
			rs.EmulatorURL, defaultGrace(c.policy))
	}
	return serveUntil(ctx, rs, logger, stderr)
}

// serveUntil serves until ctx ends or the HTTP server dies, then shuts rs
// down. It returns the exit code: 0 after a clean stop, 1 when the server
// died under us or a shutdown step failed.
func serveUntil(ctx context.Context, rs *relayServer, logger zerolog.Logger, stderr io.Writer) int {
	code := 0
	select {
	case <-ctx.Done():
	case err := <-rs.served:
		// The server died under us: stop cleanly, but say it failed.
		logger.Error().Err(err).Msg("http server stopped")
		fmt.Fprintf(stderr, "gmailrelay serve: http server stopped: %v\n", err)
		code = 1
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 70*time.Second)
	defer cancel()
	if err := rs.close(shutdownCtx); err != nil {
		logger.Error().Err(err).Msg("shutdown")
		fmt.Fprintf(stderr, "gmailrelay serve: shutdown: %v\n", err)
		code = 1
	}
	logger.Info().Msg("gmailrelay stopped")
	return code
}

// openLog opens the acceptance log: in PostgreSQL with --database (its
// migrations applied first, safe when several replicas start at once),
// otherwise the bbolt file --data. where names it for the logs, without a
// password.
func openLog(ctx context.Context, c serveConfig, now func() time.Time, logger zerolog.Logger) (lg gmailrelay.Store, where string, err error) {
	if c.Database != "" {
		u, _ := url.Parse(c.Database)
		where = u.Redacted()
		lg, err = pglog.Open(ctx, c.Database, pglog.Options{Now: now, Identity: c.identity()})
		if err != nil {
			return nil, "", fmt.Errorf("open acceptance log in %s: %w", where, err)
		}
		return lg, where, nil
	}
	// What the log decides on its own (a journal replayed at open, the
	// switch to synced commits near the end of its mapping) is worth a
	// warning: it says the last stop was not clean, or that the file grew
	// far in one run.
	logf := func(format string, args ...any) { logger.Warn().Msgf(format, args...) }
	lg, err = acceptlog.Open(c.Data, acceptlog.Options{Now: now, Logf: logf, Identity: c.identity()})
	if err != nil {
		return nil, "", fmt.Errorf("open acceptance log %s: %w", c.Data, err)
	}
	return lg, c.Data, nil
}
