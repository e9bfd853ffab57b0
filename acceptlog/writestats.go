package acceptlog

import (
	"os"

	bolt "go.etcd.io/bbolt"
)

// WriteStats are what the log's write transactions did to the file since
// Open, from bbolt's own counters: for benchmarks that explain the cost of
// a durable commit.
type WriteStats struct {
	// Commits are the write transactions the log committed (Commits).
	// Each syncs the file twice (once after writing its pages, once after
	// writing its meta page), and once more when it grows the file.
	Commits uint64
	// Writes are the write calls of pages and meta pages, of every write
	// transaction (Open's included).
	Writes int64
	// PagesAllocated are the pages write transactions allocated (each is
	// written at its commit: the copy-on-write tree's dirty pages).
	PagesAllocated int64
	// FileSize is the file's size in bytes now (0 when unknown).
	FileSize int64
}

// WriteStats returns the log's write counters (see WriteStats).
func (l *Log) WriteStats() WriteStats {
	var st bolt.Stats
	if db, err := l.hold(); err == nil {
		st = db.Stats()
		l.mu.RUnlock()
	}
	ws := WriteStats{Commits: l.commits.Load(),
		Writes: st.TxStats.GetWrite(), PagesAllocated: st.TxStats.GetPageCount()}
	if fi, err := os.Stat(l.path); err == nil {
		ws.FileSize = fi.Size()
	}
	return ws
}
