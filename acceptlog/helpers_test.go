package acceptlog

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// openBoltT opens the bbolt file at path directly, as a tool or an older
// gmailrelay would, with opts; the caller closes it.
func openBoltT(t testing.TB, path string, opts *bolt.Options) *bolt.DB {
	t.Helper()
	db, err := bolt.Open(path, 0o600, opts)
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// workload writes through every write path of the log: new jobs with
// their lines, raw messages, sends and mailbox edits; outcomes (sent with
// an effect, unknown with a check due, failed); mailbox records; a prune
// of the detail of sent jobs and of the send index; counters throughout.
// Jobs are named by prefix; clock is moved forward.
func workload(t testing.TB, l *Log, clock *time.Time, prefix string, n int, rng *rand.Rand) {
	t.Helper()
	ctx := context.Background()
	for i := range n {
		id := fmt.Sprintf("<%s-%04d@journal.example>", prefix, i)
		*clock = clock.Add(time.Minute)
		at := *clock
		mailbox := fmt.Sprintf("mb%d", rng.IntN(3))
		_, _, err := l.Mutate(ctx, id, func(cur *Job) (Change, error) {
			j := Job{MessageID: id, Key: "key-" + id, Channel: "default", Mailbox: mailbox,
				Fingerprint: "fp-" + id, State: StateForwarding, Attempts: 1, CreatedAt: at, UpdatedAt: at}
			return Change{Job: &j, Raw: bytes.Repeat([]byte{'x'}, 100+rng.IntN(3000)), Lines: []Line{
				{Kind: KindReceived, Attempt: 1, Channel: "default"},
				{Kind: KindForwarding, Attempt: 1, State: StateForwarding},
			}, EditMailbox: func(m *Mailbox) { m.Rewrites++ }}, nil
		})
		if err != nil {
			t.Fatalf("forward %s: %v", id, err)
		}
		_, _, err = l.Mutate(ctx, id, func(cur *Job) (Change, error) {
			switch rng.IntN(4) {
			case 0:
				cur.State, cur.AmbiguousAt, cur.NextCheckAt = StateUnknown, at, at.Add(time.Hour)
				return Change{Job: cur, Lines: []Line{{Kind: KindAmbiguous, Attempt: 1, State: StateUnknown}}}, nil
			case 1:
				cur.State, cur.Retryable = StateFailed, false
				return Change{Job: cur, Lines: []Line{{Kind: KindNotSent, Attempt: 1, State: StateFailed}}}, nil
			default:
				cur.State, cur.Effects, cur.GmailID = StateSent, 1, "g-"+id
				return Change{Job: cur, Lines: []Line{{Kind: KindEffect, Attempt: 1, State: StateSent, Source: SourceResponse, GmailID: "g-" + id}}}, nil
			}
		})
		if err != nil {
			t.Fatalf("outcome %s: %v", id, err)
		}
		if i%7 == 3 {
			_, _, err := l.Mutate(ctx, id, func(cur *Job) (Change, error) {
				return Change{Mailbox: &Mailbox{Name: "mb-" + prefix, HandleChecked: true, LastSendID: id, LastSendAt: at}}, nil
			})
			if err != nil {
				t.Fatalf("mailbox %s: %v", id, err)
			}
		}
		if i%5 == 4 {
			if _, err := l.Prune(ctx, clock.Add(-5*time.Minute), 3); err != nil {
				t.Fatalf("prune: %v", err)
			}
			if _, err := l.PruneSends(ctx, clock.Add(-8*time.Minute)); err != nil {
				t.Fatalf("prune sends: %v", err)
			}
		}
	}
}

// newJournalLog opens a log in a new directory with a clock the workload
// moves.
func newJournalLog(t testing.TB) (*Log, string, *time.Time) {
	t.Helper()
	clock := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	path := filepath.Join(t.TempDir(), "accept.db")
	l, err := Open(path, Options{Now: func() time.Time { return clock }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l, path, &clock
}
