package pglog

import (
	"context"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/pglog/pgtest"
)

// openFresh opens a log in a fresh schema on the PostgreSQL test server
// (pgtest: skipped when none, failed with CI=true), dropped at the end.
func openFresh(t *testing.T) *Log {
	t.Helper()
	url := pgtest.URL(t)
	schema := pgtest.Schema(t, url, false)
	ctx := context.Background()
	l, err := Open(ctx, url, Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // runs before the schema's drop
		if err := l.Check(ctx); err != nil {
			t.Errorf("acceptance log invariants: %v", err)
		}
		_ = l.Close()
	})
	return l
}

// A writer that took its Seq first and commits last (a line committed
// later with a smaller Seq) is never skipped: while it is in flight,
// Lines does not return the larger Seq already committed past it (it
// waits for the writer, here until the reader's deadline); once it has
// committed, a reader paging from where it was sees both, in Seq order.
func TestLinesNeverSkipALateCommittingLine(t *testing.T) {
	ctx := context.Background()
	l := openFresh(t)
	// Two jobs: the slow writer's line holds a key-share lock on its job
	// (the foreign key), so the fast writer writes the other.
	const id, other = "<late@x>", "<fast@x>"
	search := func(id string) func(cur *gmailrelay.Job) (gmailrelay.Change, error) {
		return func(cur *gmailrelay.Job) (gmailrelay.Change, error) {
			if cur == nil {
				return gmailrelay.Change{
					Job:   &gmailrelay.Job{MessageID: id, Channel: "default", State: gmailrelay.StateForwarding, Attempts: 1},
					Lines: []gmailrelay.Line{{Kind: gmailrelay.KindReceived, Attempt: 1, State: gmailrelay.StateForwarding}},
				}, nil
			}
			return gmailrelay.Change{Lines: []gmailrelay.Line{{Kind: gmailrelay.KindSearch, Attempt: 1}}}, nil
		}
	}
	for _, j := range []string{id, other} {
		if _, _, err := l.Mutate(ctx, j, search(j)); err != nil {
			t.Fatal(err)
		}
	}
	seen, _, err := l.Lines(ctx, 0, 100)
	if err != nil || len(seen) != 2 {
		t.Fatalf("lines before: %v, %v", seen, err)
	}
	tail := seen[1].Seq

	// The slow writer takes its Seq and does not commit yet.
	slow, err := l.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Rollback(ctx)
	late := []gmailrelay.Line{{MessageID: id, Kind: gmailrelay.KindSearch, Attempt: 1, Time: time.Now()}}
	if err := insertLines(ctx, slow, late); err != nil {
		t.Fatal(err)
	}
	if err := insertLineDelta(ctx, slow, late, 1); err != nil {
		t.Fatal(err)
	}
	// A fast writer commits a larger Seq meanwhile.
	_, fast, err := l.Mutate(ctx, other, search(other))
	if err != nil {
		t.Fatal(err)
	}
	if fast[0].Seq <= late[0].Seq {
		t.Fatalf("fast seq %d not after the slow writer's %d", fast[0].Seq, late[0].Seq)
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	got, _, err := l.Lines(short, tail, 100)
	cancel()
	if err == nil {
		for _, ln := range got {
			if ln.Seq == fast[0].Seq {
				t.Fatalf("Lines returned seq %d while seq %d (smaller) was still in flight: a reader paging on would skip it", fast[0].Seq, late[0].Seq)
			}
		}
	}
	if err := slow.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	got, _, err = l.Lines(ctx, tail, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Seq != late[0].Seq || got[1].Seq != fast[0].Seq {
		t.Fatalf("after the slow commit, Lines(after %d) = %v; want seqs %d then %d", tail, got, late[0].Seq, fast[0].Seq)
	}
}
