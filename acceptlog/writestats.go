package acceptlog

import "os"

// WriteStats are what the log's write transactions did to the file since
// Open, from bbolt's own counters: for benchmarks that explain the cost of
// a durable commit.
type WriteStats struct {
	// Commits are the write transactions Mutate committed (Commits). Each
	// syncs the journal once (in synced mode, the file twice: once after
	// writing its pages, once after writing its meta page), and once more
	// when it grows the file.
	Commits uint64
	// Checkpoints are the journal's checkpoints since Open (its first
	// included): each syncs the file and starts a new journal.
	Checkpoints uint64
	// Journal says whether commits go through the journal now.
	Journal bool
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
	st := l.db.Stats()
	ws := WriteStats{Commits: l.commits.Load(), Checkpoints: l.checkpoints.Load(),
		Writes: st.TxStats.GetWrite(), PagesAllocated: st.TxStats.GetPageCount()}
	ws.Journal = l.journaling.Load()
	if fi, err := os.Stat(l.path); err == nil {
		ws.FileSize = fi.Size()
	}
	return ws
}
