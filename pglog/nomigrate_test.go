package pglog_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/gmailrelay/gmailrelay/pglog"
	"github.com/gmailrelay/gmailrelay/pglog/pgtest"
)

// withConn runs fn on a new connection to url.
func withConn(t *testing.T, url string, fn func(ctx context.Context, conn *pgx.Conn) error) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if err := fn(ctx, conn); err != nil {
		t.Fatal(err)
	}
}

func execSQL(t *testing.T, url, sql string, args ...any) {
	t.Helper()
	withConn(t, url, func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, sql, args...)
		return err
	})
}

func tablesIn(t *testing.T, url, schema string) (n int) {
	t.Helper()
	withConn(t, url, func(ctx context.Context, conn *pgx.Conn) error {
		return conn.QueryRow(ctx, "SELECT count(*) FROM information_schema.tables WHERE table_schema = $1", schema).Scan(&n)
	})
	return n
}

// TestOpenNoMigrateLeavesAnEmptySchemaAlone: Open with NoMigrate refuses a
// schema without the log's tables and creates none (Open migrates it).
func TestOpenNoMigrateLeavesAnEmptySchemaAlone(t *testing.T) {
	url, schema := pgtest.SchemaURL(t)
	l, err := pglog.Open(context.Background(), url, pglog.Options{NoMigrate: true})
	if err == nil {
		l.Close()
		t.Fatal("Open(NoMigrate) of an empty schema = nil error")
	}
	if !strings.Contains(err.Error(), "not a gmailrelay log: no schema_migrations table in schema "+schema) {
		t.Errorf("Open(NoMigrate) error = %q, want it to say this is not a log", err)
	}
	if n := tablesIn(t, url, schema); n != 0 {
		t.Errorf("the schema has %d tables after Open(NoMigrate), want 0", n)
	}
}

// TestOpenNoMigrateRefusesAnotherVersion: a schema at another migration
// version is refused with both versions named, and left as it is.
func TestOpenNoMigrateRefusesAnotherVersion(t *testing.T) {
	ctx := context.Background()
	url, _ := pgtest.SchemaURL(t)
	l, err := pglog.Open(ctx, url, pglog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	l, err = pglog.Open(ctx, url, pglog.Options{NoMigrate: true})
	if err != nil {
		t.Fatalf("Open(NoMigrate) of this version's schema: %v", err)
	}
	if err := l.Check(ctx); err != nil {
		t.Error(err)
	}
	l.Close()

	execSQL(t, url, "INSERT INTO schema_migrations (version, name) VALUES (9999, '9999_future.sql')")
	if _, err := pglog.Open(ctx, url, pglog.Options{NoMigrate: true}); err == nil || !strings.Contains(err.Error(), "a newer gmailrelay wrote it") {
		t.Errorf("Open(NoMigrate) of a newer schema = %v, want a refusal naming the newer version", err)
	}
	execSQL(t, url, "DELETE FROM schema_migrations WHERE version = 9999")
	execSQL(t, url, "DELETE FROM schema_migrations WHERE version = (SELECT max(version) FROM schema_migrations)")
	_, err = pglog.Open(ctx, url, pglog.Options{NoMigrate: true})
	if err == nil || !strings.Contains(err.Error(), "start a relay of this version") {
		t.Errorf("Open(NoMigrate) of an older schema = %v, want a refusal saying it needs migrating", err)
	}
}
