package pglog

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gmailrelay/gmailrelay/internal/testclock"
	"github.com/gmailrelay/gmailrelay/pglog/pgtest"
)

// LiveReplicas counts the relays that counted on the same schema and are
// still connected: a replica whose sessions end (killed) stops counting
// at once and its row goes once it has not been seen for replicaForget;
// Close removes the row at once; a log in another schema of the same
// database is never counted.
func TestLiveReplicasCountsConnectedReplicasOfTheSchema(t *testing.T) {
	ctx := context.Background()
	url := pgtest.URL(t)
	clock := testclock.New()
	schema, other := pgtest.Schema(t, url, false), pgtest.Schema(t, url, false)
	openIn := func(schema string) *Log {
		l, err := Open(ctx, url, Options{Schema: schema, Now: clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		return l
	}
	a, b, c := openIn(schema), openIn(schema), openIn(other)
	count := func(name string, l *Log, want int) {
		t.Helper()
		if got, err := l.LiveReplicas(ctx); err != nil || got != want {
			t.Fatalf("%s: LiveReplicas() = %d, %v; want %d", name, got, err, want)
		}
	}
	rows := func(want int) {
		t.Helper()
		var got int
		if err := c.pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema, "replicas"}.Sanitize()).Scan(&got); err != nil || got != want {
			t.Fatalf("%d rows in the replicas table, %v; want %d", got, err, want)
		}
	}
	count("A alone", a, 1)
	count("B", b, 2)
	count("A", a, 2)
	count("C, in another schema", c, 1)

	if _, err := a.pool.Exec(ctx, "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity WHERE application_name = $1", appPrefix+b.owner); err != nil {
		t.Fatal(err)
	}
	count("A after B's sessions ended", a, 1)
	rows(2) // B's row stays for a while
	clock.Advance(replicaForget + time.Second)
	count("A later", a, 1)
	rows(1)

	d := openIn(schema)
	count("D", d, 2)
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	rows(1)
	count("A after D's Close", a, 1)
}
