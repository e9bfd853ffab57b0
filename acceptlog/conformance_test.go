package acceptlog_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/acceptlog"
	"github.com/gmailrelay/gmailrelay/acceptlog/acceptlogtest"
	"github.com/gmailrelay/gmailrelay/acceptlog/logtest"
)

// The log's contract, on the bbolt file.
func TestConformanceBbolt(t *testing.T) {
	open := func(t *testing.T, path string, opts acceptlog.Options) gmailrelay.Store {
		return acceptlogtest.OpenPath(t, path, opts)
	}
	logtest.Run(t, logtest.Backend{
		GroupCommit: true,
		Open: func(t *testing.T, now func() time.Time) (gmailrelay.Store, func() gmailrelay.Store) {
			path := filepath.Join(t.TempDir(), "accept.db")
			opts := acceptlog.Options{Now: now}
			return open(t, path, opts), func() gmailrelay.Store { return open(t, path, opts) }
		},
	})
}
