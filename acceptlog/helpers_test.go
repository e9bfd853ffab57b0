package acceptlog

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// dump is the whole content of a bbolt file: every bucket's sequence and
// its keys and values, rendered so that two dumps compare with ==.
type dump map[string]string

func dumpTx(tx *bolt.Tx) (dump, error) {
	d := dump{}
	err := tx.ForEach(func(name []byte, b *bolt.Bucket) error {
		var sb strings.Builder
		fmt.Fprintf(&sb, "seq=%d\n", b.Sequence())
		err := b.ForEach(func(k, v []byte) error {
			fmt.Fprintf(&sb, "%q=%q\n", k, v)
			return nil
		})
		d[string(name)] = sb.String()
		return err
	})
	return d, err
}

// dumpLog dumps l's committed content.
func dumpLog(t testing.TB, l *Log) dump {
	t.Helper()
	var d dump
	err := l.db.View(func(tx *bolt.Tx) error {
		var err error
		d, err = dumpTx(tx)
		return err
	})
	if err != nil {
		t.Fatalf("dump log: %v", err)
	}
	return d
}

// diff describes how got differs from want ("" when equal).
func (want dump) diff(got dump) string {
	var out []string
	for name, w := range want {
		g, ok := got[name]
		switch {
		case !ok:
			out = append(out, "bucket "+name+" missing")
		case g != w:
			wl, gl := strings.Split(w, "\n"), strings.Split(g, "\n")
			out = append(out, fmt.Sprintf("bucket %s differs (%d lines, want %d)%s", name, len(gl), len(wl), firstDiff(wl, gl)))
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			out = append(out, "bucket "+name+" unexpected")
		}
	}
	sort.Strings(out)
	return strings.Join(out, "; ")
}

func firstDiff(want, got []string) string {
	for i := range min(len(want), len(got)) {
		if want[i] != got[i] {
			return fmt.Sprintf(": first at line %d: got %.80s, want %.80s", i, got[i], want[i])
		}
	}
	return ""
}

// openBolt opens the bbolt file at path directly, as a tool or an older
// gmailrelay would, with opts; the caller closes it.
func openBoltT(t testing.TB, path string, opts *bolt.Options) *bolt.DB {
	t.Helper()
	db, err := bolt.Open(path, 0o600, opts)
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// openDump opens the log at path (recovering it from its journal), dumps
// it and closes it.
func openDump(t testing.TB, path string) dump {
	t.Helper()
	l, err := Open(path, Options{})
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	d := dumpLog(t, l)
	if err := l.Check(context.Background()); err != nil {
		t.Errorf("check %s: %v", path, err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("close %s: %v", path, err)
	}
	return d
}

// copyFiles copies the log at src and any journal beside it, as they are
// now (what a kill -9 leaves: the page cache), to dst and dst's journal.
func copyFiles(t testing.TB, src, dst string) {
	t.Helper()
	for _, p := range [][2]string{{src, dst}, {journalPath(src), journalPath(dst)}} {
		b, err := os.ReadFile(p[0])
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p[1], b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
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

// setVar sets *p to v for the test.
func setVar[T any](t testing.TB, p *T, v T) {
	old := *p
	*p = v
	t.Cleanup(func() { *p = old })
}
