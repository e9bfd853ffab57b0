// Package pgtest finds the PostgreSQL server tests run against and gives
// each test a schema of its own, so tests on one database can run in
// parallel.
//
// The server is GMAILRELAY_TEST_DATABASE (a postgres:// URL) when it is
// set. Otherwise, where Debian's PostgreSQL binaries are installed
// (/usr/lib/postgresql/*/bin, the newest), the first test that asks
// starts a throwaway cluster for the whole test binary (see Main): initdb
// into a temporary directory, a server on a free loopback port with its
// socket in that directory and fsync off, stopped and removed when the
// package's tests end. Running as root, the cluster runs as the postgres
// user (initdb refuses root). Where no binaries exist, the tests skip
// naming the package to install — except with CI=true, where they fail:
// CI never skips PostgreSQL silently.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
)

// EnvVar names the variable holding the test server's URL. Set, it wins
// over the throwaway cluster.
const EnvVar = "GMAILRELAY_TEST_DATABASE"

// BinGlob is where Debian installs PostgreSQL's server binaries, one
// directory per major version.
const BinGlob = "/usr/lib/postgresql/*/bin"

// binGlob is BinGlob, but for this package's tests.
var binGlob = BinGlob

var (
	mainMu      sync.Mutex
	mainRunning bool     // Main (or Run) is running this binary's tests
	server      *cluster // the throwaway cluster, once started

	startOnce sync.Once
	startURL  string
	startErr  error
	startSkip string // why there is no server (no binaries), when startURL is ""
)

// Main is a PostgreSQL-using package's TestMain: it runs the tests and
// then stops and removes the throwaway cluster, if one was started, and
// exits with the tests' code:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
func Main(m *testing.M) { os.Exit(Run(m)) }

// Run is Main for a TestMain that has more to do: it returns m.Run's code
// after stopping the cluster.
func Run(m *testing.M) int {
	mainMu.Lock()
	mainRunning = true
	mainMu.Unlock()
	code := m.Run()
	mainMu.Lock()
	defer mainMu.Unlock()
	mainRunning = false
	if server != nil {
		if err := server.stop(); err != nil {
			os.Stderr.WriteString("pgtest: " + err.Error() + "\n")
			if code == 0 {
				code = 1
			}
		}
		server = nil
	}
	return code
}

// URL returns the test server's URL: GMAILRELAY_TEST_DATABASE, or the
// throwaway cluster's (started on first use, and then also set as
// GMAILRELAY_TEST_DATABASE for subprocesses and code that reads it). It
// skips the test where no server can be had (fails it with CI=true) and
// fails it when the cluster does not start.
func URL(t testing.TB) string {
	t.Helper()
	if u := os.Getenv(EnvVar); u != "" {
		return u
	}
	mainMu.Lock()
	running := mainRunning
	mainMu.Unlock()
	if !running {
		t.Fatal(EnvVar + " is not set and this package's TestMain does not call pgtest.Main(m) (or pgtest.Run), " +
			"which stops the throwaway PostgreSQL cluster after the tests")
	}
	startOnce.Do(func() { startURL, startSkip, startErr = start() })
	switch {
	case startErr != nil:
		t.Fatalf("throwaway PostgreSQL for the tests: %v", startErr)
	case startURL == "":
		if os.Getenv("CI") == "true" {
			t.Fatal(startSkip + ": with CI=true the PostgreSQL tests must run")
		}
		t.Skip(startSkip + "; skipping the PostgreSQL tests")
	}
	return startURL
}

// start starts the throwaway cluster and returns its URL, or why there is
// none (skip), or what went wrong.
func start() (u, skip string, err error) {
	bin := newestBin(binGlob)
	if bin == "" {
		return "", EnvVar + " is not set and PostgreSQL's server binaries are not installed (" + BinGlob +
			"; Debian: apt-get install postgresql)", nil
	}
	c, err := startCluster(bin)
	if err != nil {
		return "", "", err
	}
	mainMu.Lock()
	server = c
	mainMu.Unlock()
	u = c.url()
	_ = os.Setenv(EnvVar, u)
	return u, "", nil
}

// Schema returns the name of a new schema on the server at base, dropped
// (with everything in it) when the test ends. With create it is created
// now; otherwise whoever opens it first creates it (pglog.Open does).
func Schema(t testing.TB, base string, create bool) string {
	t.Helper()
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	schema := "gmailrelay_test_" + hex.EncodeToString(b)
	if create {
		if err := execSQL(base, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
			t.Fatalf("create schema %s: %v", schema, err)
		}
	}
	t.Cleanup(func() {
		if err := execSQL(base, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	return schema
}

// SchemaURL creates a fresh schema (see Schema) on the test server and
// returns a URL whose search_path is that schema — what `serve --database`
// takes — and the schema's name.
func SchemaURL(t testing.TB) (dbURL, schema string) {
	t.Helper()
	base := URL(t)
	schema = Schema(t, base, true)
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("%s: %v", EnvVar, err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String(), schema
}

func execSQL(base, sql string) error {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	return err
}
