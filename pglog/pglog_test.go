package pglog_test

import (
	"cmp"
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
	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/internal/testclock"
	"github.com/gmailrelay/gmailrelay/internal/testenv"
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

// pgOpener opens logs on schema through url (see open), a new pool for
// each relay: testenv.Options.OpenLog of a replica.
func pgOpener(url, schema string) func(testing.TB, func() time.Time) gmailrelay.Store {
	return func(t testing.TB, now func() time.Time) gmailrelay.Store { return open(t, url, schema, now) }
}

// replicaOptions are the testenv.Options of one relay on the shared
// schema, as `serve --database` makes it: cfg gives the Provider (wrapped
// with fault rules, if any), Policy (and SendTimeout); a manual clock (no
// clock fence), a quiet logger, a quota the tests never exhaust and a 10 s
// send timeout are filled in. The log is the ground's (its OpenLog).
func replicaOptions(cfg relay.Config) testenv.Options {
	return testenv.Options{Provider: cfg.Provider, Policy: cfg.Policy, SendTimeout: cmp.Or(cfg.SendTimeout, 10*time.Second),
		Configure: func(c *relay.Config) { c.ManualClock = true }}
}

// newReplica is one relay of ground's deployment (ground.Replica, with
// replicaOptions): on its emulator and clock, with its own pool on the
// shared schema.
func newReplica(ground *testenv.Env, cfg relay.Config) *pgRelay {
	return relayOf(ground.Replica(replicaOptions(cfg)))
}

// pgRelay is one relay on the shared schema and what it was built with:
// its log, policy, fault rules, clock and logger, which the tests hand to
// the sweeper, the outbox and the API they put on it, as cmd/gmailrelay
// does.
type pgRelay struct {
	*relay.Service
	env    *testenv.Env
	log    gmailrelay.Store
	policy *policy.Policy
	faults *faultmodes.Set // the rules a test wrapped its Provider with, if any (the api's)
	quota  *relay.Quota    // the default mailbox's
	now    func() time.Time
	logger zerolog.Logger
}

// relayOf is the pgRelay of a testenv relay.
func relayOf(e *testenv.Env) *pgRelay {
	return &pgRelay{Service: e.Service, env: e, log: e.Store, policy: e.Policy, quota: e.Quota, now: e.Now, logger: e.Logger}
}

// sweeperConfig is the relay's sweeper.Config as `serve --database` wires it.
func (r *pgRelay) sweeperConfig() sweeper.Config { return r.env.SweeperConfig() }

// apiConfig is the relay's api.Config, without tokens.
func (r *pgRelay) apiConfig() api.Config {
	return api.Config{Relay: r.Service, Log: r.log, Policy: r.policy, Faults: r.faults, Now: r.now,
		MsgIDDomain: r.policy.MsgIDDomain, Logger: zerolog.Nop()}
}

// site is the ground the replica tests share: a fresh schema on the test
// server, a manual clock, and the Gmail emulator on that clock with
// Google's client in front of it (testenv.Start, whose Replica builds
// each relay).
type site struct {
	url, schema string
	env         *testenv.Env
	clock       *testclock.Clock
	emu         *gmailfake.Server
	gm          relay.Provider
}

func newSite(t *testing.T) site {
	t.Helper()
	return siteWith(t, gmailfake.Options{})
}

// siteWith is a site whose emulator has options em.
func siteWith(t *testing.T, em gmailfake.Options) site {
	t.Helper()
	url := databaseURL(t)
	schema := freshSchema(t, url)
	env := testenv.Start(t, testenv.Options{Emulator: em, OpenLog: pgOpener(url, schema)})
	return site{url: url, schema: schema, env: env, clock: env.Clock, emu: env.Emulator, gm: env.Provider}
}

// quietPolicy is the default policy without the read-back of the first
// send's Message-ID: the tests count Gmail calls.
func quietPolicy() *policy.Policy {
	pol := policy.Default()
	pol.VerifyHandle = policy.VerifyNever
	return pol
}

// replica is newReplica on the site.
func (s site) replica(t testing.TB, cfg relay.Config) *pgRelay {
	t.Helper()
	return newReplica(s.env, cfg)
}
