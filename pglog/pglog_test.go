package pglog_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/acceptlog/logtest"
	"github.com/gmailrelay/gmailrelay/api"
	"github.com/gmailrelay/gmailrelay/faultmodes"
	"github.com/gmailrelay/gmailrelay/gmailapi"
	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/internal/testclock"
	"github.com/gmailrelay/gmailrelay/pglog"
	"github.com/gmailrelay/gmailrelay/pglog/pgtest"
	"github.com/gmailrelay/gmailrelay/policy"
	"github.com/gmailrelay/gmailrelay/relay"
	"github.com/gmailrelay/gmailrelay/sweeper"
)

// databaseURL is the PostgreSQL test server (pgtest: skipped when none,
// failed with CI=true).
func databaseURL(t testing.TB) string {
	t.Helper()
	return pgtest.URL(t)
}

// freshSchema returns a new schema's name, dropped when the test ends, so
// tests can run in parallel on one database (Open creates it).
func freshSchema(t testing.TB, url string) string {
	t.Helper()
	return pgtest.Schema(t, url, false)
}

// open opens a log in schema and registers its Check and Close.
func open(t testing.TB, url, schema string, now func() time.Time) *pglog.Log {
	t.Helper()
	l, err := pglog.Open(context.Background(), url, pglog.Options{Now: now, Schema: schema, MaxConns: 8})
	if err != nil {
		t.Fatalf("open PostgreSQL log: %v", err)
	}
	t.Cleanup(func() {
		if err := l.Check(context.Background()); err != nil && !errors.Is(err, gmailrelay.ErrClosed) {
			t.Errorf("acceptance log invariants: %v", err)
		}
		_ = l.Close()
	})
	return l
}

// twoReplicas opens two Logs on one fresh schema, as two replicas of the
// relay share one database, both reading the clock now (nil: real time).
func twoReplicas(t testing.TB, now func() time.Time) (a, b *pglog.Log) {
	t.Helper()
	url := databaseURL(t)
	schema := freshSchema(t, url)
	return open(t, url, schema, now), open(t, url, schema, now)
}

// The log's contract, on PostgreSQL.
func TestConformancePostgres(t *testing.T) {
	url := databaseURL(t)
	logtest.Run(t, logtest.Backend{
		Open: func(t *testing.T, now func() time.Time) (gmailrelay.Store, func() gmailrelay.Store) {
			schema := freshSchema(t, url)
			return open(t, url, schema, now), func() gmailrelay.Store { return open(t, url, schema, now) }
		},
	})
}

// poolOf opens a pool on schema, closed at the end of the test.
func poolOf(t testing.TB, url, schema string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// newReplica is one relay on the shared schema, as `serve --database`
// makes it: cfg gives the Provider (wrapped with fault rules, if any) and
// Policy (and SendTimeout);
// the log, the clock (a manual one: no clock fence), a quiet logger, a
// quota the tests never exhaust and a 10 s send timeout are filled in.
func newReplica(t testing.TB, url, schema string, clock *testclock.Clock, cfg relay.Config) *pgRelay {
	t.Helper()
	cfg.Log, cfg.Now, cfg.ManualClock, cfg.Logger = open(t, url, schema, clock.Now), clock.Now, true, zerolog.Nop()
	if cfg.Quota == nil {
		cfg.Quota = relay.NewQuota(1_000_000, clock.Now)
	}
	if cfg.SendTimeout == 0 {
		cfg.SendTimeout = 10 * time.Second
	}
	return buildRelay(t, cfg)
}

// pgRelay is one relay on the shared schema and what it was built with:
// its log, policy, fault rules, clock and logger, which the tests hand to
// the sweeper, the outbox and the API they put on it, as cmd/gmailrelay
// does.
type pgRelay struct {
	*relay.Service
	log    gmailrelay.Store
	policy *policy.Policy
	faults *faultmodes.Set // the rules its Provider was wrapped with, if any
	quota  *relay.Quota    // the default mailbox's, when cfg gave it
	now    func() time.Time
	logger zerolog.Logger
}

// buildRelay makes the relay.Service of cfg.
func buildRelay(t testing.TB, cfg relay.Config) *pgRelay {
	t.Helper()
	svc, err := relay.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &pgRelay{Service: svc, log: cfg.Log, policy: cfg.Policy, quota: cfg.Quota,
		now: cfg.Now, logger: cfg.Logger}
}

// sweeperConfig is the relay's sweeper.Config as `serve --database` wires it.
func (r *pgRelay) sweeperConfig() sweeper.Config {
	return sweeper.Config{Log: r.log, Policy: r.policy, Mailboxes: r.Service, Attempter: r.Service, Replicas: r.Service,
		Logger: &r.logger, Now: r.now}
}

// apiConfig is the relay's api.Config, without tokens.
func (r *pgRelay) apiConfig() api.Config {
	return api.Config{Relay: r.Service, Log: r.log, Policy: r.policy, Faults: r.faults, Now: r.now,
		MsgIDDomain: r.policy.MsgIDDomain, Logger: zerolog.Nop()}
}

// site is the ground the replica tests share: a fresh schema on the test
// server, a manual clock, and the Gmail emulator on that clock with
// Google's client in front of it (see emulatorGmail).
type site struct {
	url, schema string
	clock       *testclock.Clock
	emu         *gmailfake.Server
	gm          *gmailapi.Client
}

func newSite(t *testing.T) site {
	t.Helper()
	url := databaseURL(t)
	s := site{url: url, schema: freshSchema(t, url), clock: testclock.New()}
	s.emu, s.gm = emulatorGmail(t, s.clock)
	return s
}

// quietPolicy is the default policy without the read-back of the first
// send's Message-ID: the tests count Gmail calls.
func quietPolicy() *policy.Policy {
	pol := policy.Default()
	pol.VerifyHandle = policy.VerifyNever
	return pol
}

// replica is newReplica on the site's schema and clock.
func (s site) replica(t testing.TB, cfg relay.Config) *pgRelay {
	t.Helper()
	return newReplica(t, s.url, s.schema, s.clock, cfg)
}
