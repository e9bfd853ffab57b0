// Package pgtest finds the PostgreSQL server tests run against and gives
// each test a schema of its own, so tests on one database can run in
// parallel. The server is GMAILRELAY_TEST_DATABASE (a postgres:// URL; .ci/run
// starts a throwaway cluster and sets it). Unset, the tests skip — except
// with CI=true, where they fail: CI never skips PostgreSQL silently.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
)

// EnvVar names the variable holding the test server's URL.
const EnvVar = "GMAILRELAY_TEST_DATABASE"

// URL returns the test server's URL, or skips the test (fails it with
// CI=true) when none is set.
func URL(t testing.TB) string {
	t.Helper()
	u := os.Getenv(EnvVar)
	if u == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal(EnvVar + " is not set: with CI=true the PostgreSQL tests must run (.ci/run starts a server)")
		}
		t.Skip(EnvVar + " is not set (postgres://…); skipping the PostgreSQL tests")
	}
	return u
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
		if err := exec(base, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
			t.Fatalf("create schema %s: %v", schema, err)
		}
	}
	t.Cleanup(func() {
		if err := exec(base, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
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

func exec(base, sql string) error {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	return err
}
