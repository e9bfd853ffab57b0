// Package acceptlogtest opens acceptance logs for other packages' tests and
// checks the log's invariants when each test ends.
package acceptlogtest

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/acceptlog"
)

// Open opens a log in a fresh temporary directory with default Options. See
// OpenPath for the cleanup it registers.
func Open(t testing.TB) *acceptlog.Log {
	t.Helper()
	return OpenPath(t, filepath.Join(t.TempDir(), "accept.db"), acceptlog.Options{})
}

// OpenPath opens the log at path (for restart tests: Close it and call
// OpenPath again with the same path) and registers a cleanup that runs
// Check, failing the test on any violation, then closes the log. A log the
// test has closed itself is not checked again (its reopened successor is).
func OpenPath(t testing.TB, path string, opts acceptlog.Options) *acceptlog.Log {
	t.Helper()
	l, err := acceptlog.Open(path, opts)
	if err != nil {
		t.Fatalf("open acceptance log: %v", err)
	}
	t.Cleanup(func() {
		if err := l.Check(context.Background()); err != nil && !errors.Is(err, gmailrelay.ErrClosed) {
			t.Errorf("acceptance log invariants: %v", err)
		}
		if err := l.Close(); err != nil {
			t.Errorf("close acceptance log: %v", err)
		}
	})
	return l
}
