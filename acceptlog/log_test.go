package acceptlog_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/acceptlog"
	"github.com/gmailrelay/gmailrelay/acceptlog/acceptlogtest"
	"github.com/gmailrelay/gmailrelay/acceptlog/logtest"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// mustOpen opens a log in t.TempDir() whose lines are stamped t0; the
// cleanup runs Check and fails the test on any violation.
func mustOpen(t *testing.T) (*acceptlog.Log, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "accept.db")
	return mustOpenPath(t, path), path
}

func mustOpenPath(t *testing.T, path string) *acceptlog.Log {
	t.Helper()
	return acceptlogtest.OpenPath(t, path, acceptlog.Options{Now: func() time.Time { return t0 }})
}

func ids(jobs []gmailrelay.Job) []string {
	out := []string{}
	for _, j := range jobs {
		out = append(out, j.MessageID)
	}
	return out
}

func TestSecondOpenerFailsClearly(t *testing.T) {
	_, path := mustOpen(t)
	wantOpenRefused(t, path, "locked")
}

// wantOpenRefused fails the test unless Open refuses path with an error
// that says says.
func wantOpenRefused(t *testing.T, path, says string) {
	t.Helper()
	l, err := acceptlog.Open(path, acceptlog.Options{})
	if err == nil {
		l.Close()
		t.Fatalf("Open(%s) = nil error, want one that says %q", path, says)
	}
	if !strings.Contains(err.Error(), says) {
		t.Errorf("Open(%s) error = %q, want it to say %q", path, err, says)
	}
}

// TestMutateErrorsInABatchDoNotDisturbOthers runs refusing and accepting
// Mutates together: the refused write nothing, the others all land, and no
// callback is re-run (a refusal is not a bbolt error, so the batch is not
// retried).
func TestMutateErrorsInABatchDoNotDisturbOthers(t *testing.T) {
	ctx := context.Background()
	l, _ := mustOpen(t)
	const n = 20
	errRefused := errors.New("refused")
	var calls atomic.Int64
	logtest.AtOnce(n, func(i int, id string) {
		_, _, err := l.Mutate(ctx, id, func(*gmailrelay.Job) (gmailrelay.Change, error) {
			calls.Add(1)
			ch := gmailrelay.Change{
				Job:   &gmailrelay.Job{MessageID: id, State: gmailrelay.StateSent},
				Lines: []gmailrelay.Line{{Kind: gmailrelay.KindReceived, State: gmailrelay.StateSent}},
			}
			switch i % 3 {
			case 1:
				return ch, errRefused
			case 2:
				ch.Job.State = gmailrelay.StateFailed // breaks the fold invariant
			}
			return ch, nil
		})
		switch want := []error{nil, errRefused, gmailrelay.ErrInvalidChange}[i%3]; {
		case want == nil && err != nil:
			t.Errorf("Mutate %s: %v", id, err)
		case want != nil && !errors.Is(err, want):
			t.Errorf("Mutate %s error = %v, want %v", id, err, want)
		}
	})
	jobs, _, err := l.List(ctx, gmailrelay.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := 0; i < n; i += 3 {
		want = append(want, fmt.Sprintf("<%02d@x>", i))
	}
	if got := ids(jobs); !reflect.DeepEqual(got, want) {
		t.Errorf("jobs = %v, want %v", got, want)
	}
	if got := calls.Load(); got != n {
		t.Errorf("callbacks ran %d times, want %d (no batch retries)", got, n)
	}
}

// TestMutatePanicDoesNotLockTheLog: a callback that panics fails its call
// (the panic reaches the caller) and the log keeps working for everyone
// else.
func TestMutatePanicDoesNotLockTheLog(t *testing.T) {
	l := acceptlogtest.Open(t)
	ctx := context.Background()
	func() {
		defer func() {
			if recover() == nil {
				t.Error("the panic did not reach the caller")
			}
		}()
		_, _, _ = l.Mutate(ctx, "<panic@x>", func(*gmailrelay.Job) (gmailrelay.Change, error) { panic("boom") })
	}()
	done := make(chan error, 1)
	go func() {
		_, _, err := l.Mutate(ctx, "<after@x>", func(*gmailrelay.Job) (gmailrelay.Change, error) {
			j := gmailrelay.Job{MessageID: "<after@x>", State: gmailrelay.StateUnknown, Channel: "default", Attempts: 1}
			return gmailrelay.Change{Job: &j, Lines: []gmailrelay.Line{{Kind: gmailrelay.KindAmbiguous, Attempt: 1, State: gmailrelay.StateUnknown}}}, nil
		})
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Mutate after a panic: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Mutate after a panic never returned: the group commit is stuck")
	}
}

// TestGroupCommitCounters: the counters of Mutates grouped into one commit
// are written once per commit, and they still equal a recount (the
// cleanup's Check) and the jobs' states, also when jobs created and moved
// in the same group cancel each other's deltas.
func TestGroupCommitCounters(t *testing.T) {
	ctx := context.Background()
	l, _ := mustOpen(t)
	const n = 64
	logtest.AtOnce(n, func(i int, id string) {
		_, _, err := l.Mutate(ctx, id, func(*gmailrelay.Job) (gmailrelay.Change, error) {
			return gmailrelay.Change{
				Job:   &gmailrelay.Job{MessageID: id, Channel: "c", State: gmailrelay.StateForwarding, Attempts: 1},
				Lines: []gmailrelay.Line{{Kind: gmailrelay.KindReceived, Attempt: 1}, {Kind: gmailrelay.KindForwarding, Attempt: 1, State: gmailrelay.StateForwarding}},
			}, nil
		})
		if err != nil {
			t.Errorf("create %s: %v", id, err)
			return
		}
		_, _, err = l.Mutate(ctx, id, func(cur *gmailrelay.Job) (gmailrelay.Change, error) {
			j := *cur
			j.Effects++
			line := gmailrelay.Move(&j, gmailrelay.StateSent, gmailrelay.Line{Kind: gmailrelay.KindEffect, Attempt: 1, Source: gmailrelay.SourceResponse})
			return gmailrelay.Change{Job: &j, Lines: []gmailrelay.Line{line}}, nil
		})
		if err != nil {
			t.Errorf("move %s: %v", id, err)
		}
	})
	st, err := l.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Jobs != n || st.Lines != 3*n || st.ByState[gmailrelay.StateSent] != n || st.ByState[gmailrelay.StateForwarding] != 0 ||
		st.ByChannel["c"][gmailrelay.StateSent] != n || st.ByKind[gmailrelay.KindEffect] != n {
		t.Errorf("stats = %+v, want %d sent jobs, %d lines", st, n, 3*n)
	}
	if c := l.Commits(); c >= 2*n {
		t.Logf("no two Mutates shared a commit (%d commits): the grouping was not exercised this run", c)
	}
}

// TestGetMissingJob: a job the log does not have is ErrNotFound with the
// same text as before Get was made cheap.
func TestGetMissingJob(t *testing.T) {
	l, _ := mustOpen(t)
	_, err := l.Get(context.Background(), "<missing@x>")
	if !errors.Is(err, gmailrelay.ErrNotFound) {
		t.Fatalf("Get of a missing job: %v, want ErrNotFound", err)
	}
	if want := "get <missing@x>: acceptlog: job not found"; err.Error() != want {
		t.Fatalf("error text %q, want %q", err.Error(), want)
	}
}

// TestMutateSkipsUnchangedWrites: Mutates whose index keys, counters or
// records do not change write nothing for them, and the log still holds
// exactly what it should (the cleanup's Check recomputes every index entry
// and counter from the jobs and lines).
func TestMutateSkipsUnchangedWrites(t *testing.T) {
	ctx := context.Background()
	l, _ := mustOpen(t)
	id := "<skip@x>"
	due := t0.Add(time.Hour)
	mutate := func(edit func(j *gmailrelay.Job) gmailrelay.Change) gmailrelay.Job {
		t.Helper()
		j, _, err := l.Mutate(ctx, id, func(cur *gmailrelay.Job) (gmailrelay.Change, error) {
			var j gmailrelay.Job
			if cur != nil {
				j = *cur
			}
			ch := edit(&j)
			ch.Job = &j
			return ch, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	dueIDs := func(at time.Time) []string {
		t.Helper()
		jobs, err := l.Due(ctx, at, 10)
		if err != nil {
			t.Fatal(err)
		}
		return ids(jobs)
	}
	mutate(func(j *gmailrelay.Job) gmailrelay.Change {
		*j = gmailrelay.Job{MessageID: id, Channel: "default", Mailbox: "main", Attempts: 1, Effects: 1, NextCheckAt: due}
		return gmailrelay.Change{Raw: []byte("raw"), Lines: []gmailrelay.Line{
			gmailrelay.Move(j, gmailrelay.StateSent, gmailrelay.Line{Kind: gmailrelay.KindEffect, Attempt: 1})}}
	})
	// Same state, same due time: only the record changes.
	if got := mutate(func(j *gmailrelay.Job) gmailrelay.Change { j.Checks++; return gmailrelay.Change{} }); got.Checks != 1 {
		t.Fatalf("checks %d, want 1", got.Checks)
	}
	if got := dueIDs(due); !reflect.DeepEqual(got, []string{id}) {
		t.Fatalf("due at %v: %v", due, got)
	}
	// The same record, the same raw message, an unchanged mailbox record.
	mutate(func(j *gmailrelay.Job) gmailrelay.Change {
		return gmailrelay.Change{Raw: []byte("raw"), EditMailbox: func(*gmailrelay.Mailbox) {}}
	})
	if raw, err := l.Raw(ctx, id); err != nil || string(raw) != "raw" {
		t.Fatalf("raw %q, %v", raw, err)
	}
	// A new due time moves the entry; a new raw message replaces the old.
	later := due.Add(time.Hour)
	mutate(func(j *gmailrelay.Job) gmailrelay.Change {
		j.NextCheckAt = later
		return gmailrelay.Change{Raw: []byte("raw2")}
	})
	if got := dueIDs(due); len(got) != 0 {
		t.Fatalf("due at %v after the move: %v", due, got)
	}
	if got := dueIDs(later); !reflect.DeepEqual(got, []string{id}) {
		t.Fatalf("due at %v: %v", later, got)
	}
	if raw, err := l.Raw(ctx, id); err != nil || string(raw) != "raw2" {
		t.Fatalf("raw %q, %v", raw, err)
	}
	st, err := l.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Jobs != 1 || st.ByState[gmailrelay.StateSent] != 1 || st.ByChannel["default"][gmailrelay.StateSent] != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestFreelistLayoutsOpenEachOther: a log written the old way (bbolt's
// freelist synced at every commit) opens and reads the same with the
// freelist not synced, and the other way round; Check agrees on both.
func TestFreelistLayoutsOpenEachOther(t *testing.T) {
	for _, first := range []bool{false, true} {
		t.Run(fmt.Sprintf("written_with_no_freelist_sync=%v", first), func(t *testing.T) {
			ctx := context.Background()
			path := filepath.Join(t.TempDir(), "accept.db")
			prev := acceptlog.SetNoFreelistSync(first)
			t.Cleanup(func() { acceptlog.SetNoFreelistSync(prev) })
			l, err := acceptlog.Open(path, acceptlog.Options{Now: func() time.Time { return t0 }})
			if err != nil {
				t.Fatal(err)
			}
			for i := range 50 {
				id := fmt.Sprintf("<%d@layout>", i)
				if _, _, err := l.Mutate(ctx, id, benchChange(id)); err != nil {
					t.Fatal(err)
				}
			}
			want, err := l.Stats(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			acceptlog.SetNoFreelistSync(!first)
			l = mustOpenPath(t, path) // its cleanup runs Check
			got, err := l.Stats(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("stats after reopening: %+v, want %+v", got, want)
			}
			if _, _, err := l.Mutate(ctx, "<new@layout>", benchChange("<new@layout>")); err != nil {
				t.Fatal(err)
			}
			if j, err := l.Get(ctx, "<7@layout>"); err != nil || j.State != gmailrelay.StateForwarding {
				t.Fatalf("get after reopening: %+v, %v", j, err)
			}
		})
	}
}
