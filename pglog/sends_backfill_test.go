package pglog_test

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gmailrelay/gmailrelay/acceptlog/logtest"
)

// backfillMigration is the migration that fills the send index from the
// forwarding lines.
const backfillMigration = "0007_backfill_sends.sql"

// sendRows returns every row of the send index, in key order, one string
// each.
func sendRows(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), "SELECT mailbox, at_ns, message_id, attempt FROM sends ORDER BY 1, 2, 3, 4")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	var mailbox, id string
	var ns int64
	var attempt int
	_, err = pgx.ForEachRow(rows, []any{&mailbox, &ns, &id, &attempt}, func() error {
		out = append(out, fmt.Sprintf("%s %d %s %d", mailbox, ns, id, attempt))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// writeSends writes, through the log, sends of the mailboxes default and
// other in the last 48 h, at times with nanoseconds and a zone offset, and
// one older than the send index keeps.
func writeSends(t *testing.T, url, schema string, now time.Time) {
	t.Helper()
	l := open(t, url, schema, nil)
	zone := time.FixedZone("IST", 5*3600+1800)
	logtest.Forward(t, l, "<old@x.example>", "default", now.Add(-60*time.Hour))
	for i, id := range []string{"<1@x.example>", "<2@x.example>", "<3@x.example>"} {
		logtest.SentJob(t, l, id, now.Add(-time.Hour+time.Duration(i)*123456789).In(zone))
	}
	logtest.Forward(t, l, "<other@x.example>", "other", now.Add(-2*time.Hour-987654321))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

// forgetBackfill makes the schema look as if the backfill migration had
// never run, so the next Open applies it.
func forgetBackfill(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	tag, err := pool.Exec(context.Background(), "DELETE FROM schema_migrations WHERE name = $1", backfillMigration)
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("forget migration %s: %v, %d rows", backfillMigration, err, tag.RowsAffected())
	}
}

// A log upgraded from a version without the send index (0002 created it
// empty) has it filled from the forwarding lines of the last 48 h, with the
// rows the write path makes: the daily budget counts the sends made before
// the upgrade, and those made since are kept once.
func TestMigrationFillsSendIndexFromForwardingLines(t *testing.T) {
	ctx := context.Background()
	url := databaseURL(t)
	schema := freshSchema(t, url)
	now := time.Now()
	writeSends(t, url, schema, now)
	pool := poolOf(t, url, schema)
	var want []string
	for _, r := range sendRows(t, pool) {
		if !strings.Contains(r, "<old@") {
			want = append(want, r)
		}
	}
	if len(want) != 4 {
		t.Fatalf("send index before the upgrade: %q, want 4 rows in the last 48 h", want)
	}
	// The default mailbox's sends were made before the upgrade (not
	// indexed); other's after it.
	if _, err := pool.Exec(ctx, "DELETE FROM sends WHERE mailbox = 'default'"); err != nil {
		t.Fatal(err)
	}
	forgetBackfill(t, pool)

	l := open(t, url, schema, nil)
	got, err := l.SendTimes(ctx, "default", now.Add(-24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Errorf("sends of default in the last 24 h after the upgrade = %d, want 3", len(got))
	}
	if got := sendRows(t, pool); !reflect.DeepEqual(got, want) {
		t.Errorf("send index after the upgrade:\n%q\nwant the write path's rows of the last 48 h:\n%q", got, want)
	}
}

// On a log whose send index is full (0002 ran long ago) the migration adds
// nothing: no send is counted twice.
func TestMigrationLeavesFullSendIndexAlone(t *testing.T) {
	url := databaseURL(t)
	schema := freshSchema(t, url)
	writeSends(t, url, schema, time.Now())
	pool := poolOf(t, url, schema)
	want := sendRows(t, pool)
	forgetBackfill(t, pool)
	open(t, url, schema, nil)
	if got := sendRows(t, pool); !reflect.DeepEqual(got, want) {
		t.Errorf("send index after the migration ran again:\n%q\nwant it unchanged:\n%q", got, want)
	}
}
