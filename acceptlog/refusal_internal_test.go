package acceptlog

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gmailrelay/gmailrelay"
)

func putTestJob(l *Log, id string) error {
	_, _, err := l.Mutate(context.Background(), id, func(*gmailrelay.Job) (gmailrelay.Change, error) {
		return gmailrelay.Change{Job: &gmailrelay.Job{MessageID: id, State: gmailrelay.StateSent},
			Lines: []gmailrelay.Line{{Kind: gmailrelay.KindReceived, State: gmailrelay.StateSent}}}, nil
	})
	return err
}

// TestRefusedCommitReopensTheFile takes the file away from under bbolt
// (its descriptor closed: every write of it fails, as on a dead disk):
// the commit is refused, and the next transaction reopens the file,
// verified, and goes on. Without the reopen every later write fails the
// same way until the relay restarts.
func TestRefusedCommitReopensTheFile(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "accept.db")
	l, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var logged []string
	l.logf = func(format string, args ...any) { logged = append(logged, format) }
	if err := putTestJob(l, "<a@x>"); err != nil {
		t.Fatal(err)
	}
	if err := l.file.Close(); err != nil {
		t.Fatal(err)
	}
	err = putTestJob(l, "<b@x>")
	if !errors.Is(err, gmailrelay.ErrWritesRefused) {
		t.Fatalf("write on a closed descriptor = %v, want an error wrapping ErrWritesRefused", err)
	}
	if l.WritesRefused() == nil {
		t.Fatal("WritesRefused = nil after a refused commit")
	}
	if err := putTestJob(l, "<c@x>"); err != nil {
		t.Fatalf("write after a refused commit: %v (the file was not reopened)", err)
	}
	if l.WritesRefused() == nil {
		t.Error("WritesRefused = nil after a write succeeded: only a probe ends a refusal")
	}
	if err := l.ProbeWrite(ctx); err != nil {
		t.Fatalf("ProbeWrite after the reopen: %v", err)
	}
	if err := l.WritesRefused(); err != nil {
		t.Errorf("WritesRefused after a probe succeeded = %v, want nil", err)
	}
	for id, want := range map[string]bool{"<a@x>": true, "<b@x>": false, "<c@x>": true} {
		_, err := l.Get(ctx, id)
		if got := err == nil; got != want {
			t.Errorf("job %s present = %v (%v), want %v", id, got, err, want)
		}
	}
	if err := l.Check(ctx); err != nil {
		t.Errorf("Check after the reopen: %v", err)
	}
	if !strings.Contains(strings.Join(logged, "\n"), "reopened after a refused write") {
		t.Errorf("log lines %q do not say the file was reopened", logged)
	}
}

// TestFailedReopenAnswersItsErrorThenRecovers: while the file cannot be
// reopened (locked by another opener), every call answers the reopen's
// error, wrapping ErrWritesRefused; once it can, the log goes on.
func TestFailedReopenAnswersItsErrorThenRecovers(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "accept.db")
	l, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := putTestJob(l, "<a@x>"); err != nil {
		t.Fatal(err)
	}
	l.file.Close()
	if err := putTestJob(l, "<b@x>"); !errors.Is(err, gmailrelay.ErrWritesRefused) {
		t.Fatalf("write on a closed descriptor = %v", err)
	}
	// bbolt still holds its descriptor's lock until the reopen closes
	// it; another opener takes the file first.
	l.mu.Lock()
	l.db.Close()
	l.db = nil
	l.mu.Unlock()
	other, err := lockedFile(path, 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Get(ctx, "<a@x>"); !errors.Is(err, gmailrelay.ErrWritesRefused) || !strings.Contains(err.Error(), "locked") {
		t.Fatalf("Get while the file cannot be reopened = %v, want the reopen's error", err)
	}
	other.Close()
	if _, err := l.Get(ctx, "<a@x>"); err != nil {
		t.Fatalf("Get once the file can be reopened: %v", err)
	}
	if err := putTestJob(l, "<c@x>"); err != nil {
		t.Fatal(err)
	}
}
