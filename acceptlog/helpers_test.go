package acceptlog

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay"
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
		_, _, err := l.Mutate(ctx, id, func(cur *gmailrelay.Job) (gmailrelay.Change, error) {
			j := gmailrelay.Job{MessageID: id, Key: "key-" + id, Channel: "default", Mailbox: mailbox,
				Fingerprint: "fp-" + id, State: gmailrelay.StateForwarding, Attempts: 1, CreatedAt: at, UpdatedAt: at}
			return gmailrelay.Change{Job: &j, Raw: bytes.Repeat([]byte{'x'}, 100+rng.IntN(3000)), Lines: []gmailrelay.Line{
				{Kind: gmailrelay.KindReceived, Attempt: 1, Channel: "default"},
				{Kind: gmailrelay.KindForwarding, Attempt: 1, State: gmailrelay.StateForwarding},
			}, EditMailbox: func(m *gmailrelay.Mailbox) { m.Rewrites++ }}, nil
		})
		if err != nil {
			t.Fatalf("forward %s: %v", id, err)
		}
		_, _, err = l.Mutate(ctx, id, func(cur *gmailrelay.Job) (gmailrelay.Change, error) {
			switch rng.IntN(4) {
			case 0:
				cur.State, cur.AmbiguousAt, cur.NextCheckAt = gmailrelay.StateUnknown, at, at.Add(time.Hour)
				return gmailrelay.Change{Job: cur, Lines: []gmailrelay.Line{{Kind: gmailrelay.KindAmbiguous, Attempt: 1, State: gmailrelay.StateUnknown}}}, nil
			case 1:
				cur.State, cur.Retryable = gmailrelay.StateFailed, false
				return gmailrelay.Change{Job: cur, Lines: []gmailrelay.Line{{Kind: gmailrelay.KindNotSent, Attempt: 1, State: gmailrelay.StateFailed}}}, nil
			default:
				cur.State, cur.Effects, cur.GmailID = gmailrelay.StateSent, 1, "g-"+id
				return gmailrelay.Change{Job: cur, Lines: []gmailrelay.Line{{Kind: gmailrelay.KindEffect, Attempt: 1, State: gmailrelay.StateSent, Source: gmailrelay.SourceResponse, GmailID: "g-" + id}}}, nil
			}
		})
		if err != nil {
			t.Fatalf("outcome %s: %v", id, err)
		}
		if i%7 == 3 {
			_, _, err := l.Mutate(ctx, id, func(cur *gmailrelay.Job) (gmailrelay.Change, error) {
				return gmailrelay.Change{Mailbox: &gmailrelay.Mailbox{Name: "mb-" + prefix, HandleChecked: true, LastSendID: id, LastSendAt: at}}, nil
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
