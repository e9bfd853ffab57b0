package acceptlog

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	bolt "go.etcd.io/bbolt"
)

// How the log makes a commit durable (since issue 16: see journal.go for
// the format and docs/operations.md, "Durability: the journal").
//
// A group commit runs its Mutates in one bbolt write transaction whose
// changes writeTx records; the record is appended to the journal and
// fdatasynced, and only then is the transaction committed, with bbolt's
// NoSync: no reader sees a change before it is durable, and a commit costs
// one fsync of an append instead of bbolt's two syncs of scattered pages.
//
// A checkpoint syncs the bbolt file and starts a new journal whose header
// holds the meta page of the synced state C. Until the next checkpoint the
// log keeps a read transaction open at C (the pin): bbolt never reuses a
// page that a reader can see, so C's whole tree stays on disk as it was
// synced while the unsynced commits go on. After a crash of the process or
// of the machine, Open writes C's meta page into both meta slots of the
// file (bbolt then cannot pick a newer, possibly torn state), opens C and
// replays the journal's valid records in one transaction.
//
// bbolt remaps its file (db.mmap) under a lock that waits for every read
// transaction: with the pin held, a commit that grew the file past the
// mapping would wait for ever. The file is mapped far larger than it is
// (mapping) and, before a commit that could reach the mapping's end, the log
// checkpoints, drops the journal and the pin and commits with bbolt's own
// syncs for the rest of its life (fitsMapping, stopJournal).

// Checkpoint thresholds and the mapping: variables only so that tests can
// make them small.
var (
	checkpointGroups       = 4096
	checkpointBytes  int64 = 64 << 20
	// checkpointGrowth bounds how far the file grows between checkpoints.
	// bbolt remembers which transaction allocated a page only when it came
	// from the free list, not when it grew the file: while the pin is
	// held, a page that a commit took from the file's end and a later
	// commit freed is kept until the next checkpoint. With no free pages
	// left (a young file) every commit so grows the file by all the pages
	// it writes (≈ 15), until the checkpoint frees them for reuse.
	checkpointGrowth int64 = 8 << 20
	// minMapping is the least the file is mapped (virtual memory: it costs
	// no memory); a file is mapped at twice its size when that is more.
	minMapping int64 = 16 << 30
	// mapMargin is kept free at the mapping's end on top of a commit's
	// estimated growth (see fitsMapping).
	mapMargin int64 = 256 << 20
	// maxTreeDepth bounds the pages one op can dirty (a leaf and its
	// branches up to the root bucket), for the growth estimate.
	maxTreeDepth int64 = 12
	// journalChunk is how far the journal's file is written with zeros
	// ahead of its records (see appendJournal).
	journalChunk int64 = 1 << 20
)

// journal is a Log's live journal (nil: the log commits with bbolt's own
// syncs). Only touched with Log.wmu held.
type journal struct {
	f    *os.File
	size int64 // the header and the records made durable
	// alloc is the file's length: after size it holds zeros, written and
	// synced (see appendJournal).
	alloc  int64
	groups int // records since the checkpoint
	txid   uint64
	hwm    int64    // the file's high-water mark at the checkpoint
	pin    *bolt.Tx // nil only when a test turned the pin off
}

// commitTx runs run in a new write transaction and commits it durably: in
// journal mode the transaction's changes are appended to the journal and
// synced before bbolt commits them without syncing; otherwise bbolt syncs.
// A transaction that changed nothing is rolled back. After a failure to
// write the journal or to commit what it holds, the log refuses every
// later write (see fail).
func (l *Log) commitTx(run func(*bolt.Tx) error) error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if l.failed != nil {
		return l.failed
	}
	tx, err := l.db.Begin(true)
	if err != nil {
		return err
	}
	done := false
	defer func() {
		if !done {
			_ = tx.Rollback()
		}
	}()
	l.rec.reset()
	if err := l.counted(tx, func() error { return run(tx) }); err != nil {
		return err
	}
	done = true
	if l.j == nil {
		return tx.Commit()
	}
	if l.rec.ops == 0 {
		return tx.Rollback()
	}
	hwm := tx.Size()
	if !l.fitsMapping(tx) {
		if err := l.stopJournal(); err != nil {
			_ = tx.Rollback()
			return l.fail(err)
		}
		l.logf("acceptlog: %s is near the end of its %d MiB mapping; journal stopped, commits sync the file from now on (reopen to journal again)", l.path, l.mapping>>20)
		return tx.Commit()
	}
	if err := l.appendJournal(l.rec.record()); err != nil {
		_ = tx.Rollback()
		return l.fail(err)
	}
	err = l.faultAt("commit")
	if err == nil {
		err = tx.Commit()
	} else {
		_ = tx.Rollback()
	}
	if err != nil {
		return l.fail(fmt.Errorf("commit to %s after the journal made it durable (it is replayed when the log is opened again): %w", l.path, err))
	}
	l.j.groups++
	if l.j.groups >= checkpointGroups || l.j.size >= checkpointBytes || hwm-l.j.hwm >= checkpointGrowth {
		if err := l.checkpoint(); err != nil {
			// This group is durable and committed; the next ones are refused.
			_ = l.fail(err)
		}
	}
	return nil
}

// appendJournal appends rec (a whole record) to the journal and syncs it.
// On a failure the journal is cut back to its last durable record, so the
// copy of it a process crash leaves cannot bring back a write that was
// refused.
//
// The record is written over zeros the file already holds: a record that
// passes the end of the file is followed by zeros up to the next multiple
// of journalChunk, synced with it. An fdatasync that only overwrites
// blocks the file has needs no metadata journaling by the filesystem (its
// length and block map stay): on this project's ext4 VM that cut a sync's
// CPU by a third and its wall time by a quarter (docs/benchmarks.md, issue
// 16, fifth session); PostgreSQL zero-fills its WAL segments alike. A reader
// stops at the zeros: a record length of 0 is no record (nextRecord).
func (l *Log) appendJournal(rec []byte) error {
	j := l.j
	end := j.size + int64(len(rec))
	_, err := j.f.WriteAt(rec, j.size)
	if err == nil && end > j.alloc {
		alloc := (end/journalChunk + 1) * journalChunk
		if err = writeZeros(j.f, end, alloc); err == nil {
			j.alloc = alloc
		}
	}
	if err == nil {
		err = l.faultAt("sync")
	}
	if err == nil {
		err = fdatasync(j.f)
	}
	if err != nil {
		_ = j.f.Truncate(j.size)
		j.alloc = j.size
		return fmt.Errorf("append to journal %s: %w", l.jpath, err)
	}
	j.size = end
	return nil
}

// zeroBlock is what writeZeros writes.
var zeroBlock [64 << 10]byte

// writeZeros writes zeros into f from offset from up to to.
func writeZeros(f *os.File, from, to int64) error {
	for from < to {
		n := min(to-from, int64(len(zeroBlock)))
		if _, err := f.WriteAt(zeroBlock[:n], from); err != nil {
			return err
		}
		from += n
	}
	return nil
}

// faultAt is the test hook: a failure injected at a stage of a commit.
func (l *Log) faultAt(stage string) error {
	if l.fault == nil {
		return nil
	}
	return l.fault(stage)
}

// fail puts the log into the failed state and returns its error: a failed
// journal write or sync is not retried (after a failed fsync the kernel
// may have dropped the pages, and a second fsync can succeed without them),
// and after a failed commit the file is not what the journal says.
// Reopening the log recovers every write that was acknowledged.
func (l *Log) fail(cause error) error {
	l.failed = fmt.Errorf("acceptlog: writes refused until the log is reopened: %w", cause)
	l.logf("%v", l.failed)
	return l.failed
}

// fitsMapping reports whether committing tx cannot grow the file past its
// mapping: the file's high-water mark, plus every page each recorded op
// could dirty, plus twice the bytes written, plus the margin.
func (l *Log) fitsMapping(tx *bolt.Tx) bool {
	ps := int64(l.pageSize)
	hwm := tx.Size()
	grow := int64(l.rec.ops+numWriteBuckets)*maxTreeDepth*ps + 2*int64(len(l.rec.buf))
	if !noFreelistSync {
		grow += hwm/ps*8 + ps // a freelist page listing every page
	}
	return hwm+grow+mapMargin < l.mapping
}

// checkpoint makes the bbolt file durable as it is now (state C), moves the
// pin to C and starts a new journal whose header holds C's meta page. The
// new journal is written beside the old one, synced and renamed over it,
// then the directory is synced: a crash before the rename leaves the old
// journal, whose checkpoint's tree is still pinned and intact, with every
// record up to C; after it, the new one, whose checkpoint is synced.
func (l *Log) checkpoint() error {
	if err := l.db.Sync(); err != nil {
		return fmt.Errorf("checkpoint: sync %s: %w", l.path, err)
	}
	pin, err := l.db.Begin(false)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			_ = pin.Rollback()
		}
	}()
	txid := uint64(pin.ID())
	ps := l.pageSize
	meta, err := readMetaPage(l.path, ps, txid)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	hdr := encodeJournalHeader(journalHeader{version: journalVersion, pageSize: ps, txid: txid, meta: meta})
	f, alloc, err := createJournal(l.jpath, hdr)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	ok = true
	if l.j != nil {
		l.releaseJournal()
	}
	l.j = &journal{f: f, size: int64(len(hdr)), alloc: alloc, txid: txid, hwm: pin.Size(), pin: pin}
	if l.noPin {
		_ = pin.Rollback()
		l.j.pin = nil
	}
	l.checkpoints.Add(1)
	l.journaling.Store(true)
	return nil
}

// stopJournal syncs the bbolt file, removes the journal (the file holds
// everything it did) and releases the pin: from then on commits sync the
// file. When the sync fails, the journal is kept for the next Open.
func (l *Log) stopJournal() error {
	err := l.db.Sync()
	if err == nil {
		err = removeSynced(l.jpath)
	}
	l.releaseJournal()
	l.db.NoSync = false
	if err != nil {
		return fmt.Errorf("stop journal %s: %w", l.jpath, err)
	}
	return nil
}

// releaseJournal closes the journal's file and releases its pin.
func (l *Log) releaseJournal() {
	_ = l.j.f.Close()
	if l.j.pin != nil {
		_ = l.j.pin.Rollback()
	}
	l.j = nil
	l.journaling.Store(false)
}

// readMetaPage reads the meta page of transaction txid from the file at path
// (bbolt writes transaction t's meta into slot t % 2) and checks it.
func readMetaPage(path string, pageSize int, txid uint64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read meta page: %w", err)
	}
	defer f.Close()
	p := make([]byte, pageSize)
	if _, err := f.ReadAt(p, int64(txid%2)*int64(pageSize)); err != nil {
		return nil, fmt.Errorf("read meta page: %w", err)
	}
	if err := checkMetaPage(p, txid); err != nil {
		return nil, err
	}
	return p, nil
}

// createJournal writes hdr into path.tmp, followed by zeros up to
// journalChunk (see appendJournal), syncs it, renames it to path and syncs
// the directory; it returns the file, open for appending records, and its
// length.
func createJournal(path string, hdr []byte) (*os.File, int64, error) {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, 0, fmt.Errorf("create journal: %w", err)
	}
	alloc := max(journalChunk, int64(len(hdr)))
	_, err = f.Write(hdr)
	if err == nil {
		err = writeZeros(f, int64(len(hdr)), alloc)
	}
	if err == nil {
		err = fdatasync(f)
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err == nil {
		err = syncDir(path)
	}
	if err != nil {
		_ = f.Close()
		_ = os.Remove(tmp)
		return nil, 0, fmt.Errorf("create journal %s: %w", path, err)
	}
	return f, alloc, nil
}

// removeSynced removes the file at path (if any) and syncs its directory.
func removeSynced(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return syncDir(path)
}

// syncDir syncs the directory holding path, so a rename or a removal in it
// is durable.
func syncDir(path string) error {
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// Close closes the file, waiting for transactions in progress: the file is
// synced and the journal removed, so a file closed cleanly opens with any
// gmailrelay. Calling it again does nothing and returns nil.
func (l *Log) Close() error {
	var err error
	l.closeOnce.Do(func() {
		l.closed.Store(true)
		l.wmu.Lock()
		defer l.wmu.Unlock()
		if l.j != nil {
			if l.failed == nil {
				err = l.stopJournal()
			} else {
				l.releaseJournal() // kept: Open replays it
			}
		}
		if cerr := l.db.Close(); cerr != nil && err == nil {
			err = cerr
		}
		if err != nil {
			err = fmt.Errorf("close log %s: %w", l.path, err)
		}
	})
	return err
}
