package acceptlog_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay/acceptlog"
	"github.com/gmailrelay/gmailrelay/acceptlog/acceptlogtest"
	"github.com/gmailrelay/gmailrelay/acceptlog/logtest"
)

// The log's contract, on the bbolt file. Every log is checked at the end
// to have journaled every write it committed (with a checkpoint every few
// commits, so that checkpoints happen in the middle of the suite's tests
// too).
func TestConformanceBbolt(t *testing.T) {
	acceptlog.SetCheckpointGroups(t, 7)
	open := func(t *testing.T, path string, opts acceptlog.Options) acceptlog.Store {
		l := acceptlogtest.OpenPath(t, path, opts)
		t.Cleanup(func() { acceptlog.VerifyJournal(t, l) })
		return l
	}
	logtest.Run(t, logtest.Backend{
		GroupCommit: true,
		Open: func(t *testing.T, now func() time.Time) (acceptlog.Store, func() acceptlog.Store) {
			path := filepath.Join(t.TempDir(), "accept.db")
			opts := acceptlog.Options{Now: now}
			return open(t, path, opts), func() acceptlog.Store { return open(t, path, opts) }
		},
	})
}

// The same contract with bbolt's own synced commits (no journal).
func TestConformanceBboltSynced(t *testing.T) {
	logtest.Run(t, logtest.Backend{
		GroupCommit: true,
		Open: func(t *testing.T, now func() time.Time) (acceptlog.Store, func() acceptlog.Store) {
			path := filepath.Join(t.TempDir(), "accept.db")
			opts := acceptlog.Options{Now: now, Synced: true}
			return acceptlogtest.OpenPath(t, path, opts), func() acceptlog.Store { return acceptlogtest.OpenPath(t, path, opts) }
		},
	})
}
