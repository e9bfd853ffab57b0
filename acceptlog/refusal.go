package acceptlog

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"

	"github.com/gmailrelay/gmailrelay"
	bolt "go.etcd.io/bbolt"
)

var _ gmailrelay.WriteHealth = (*Log)(nil)

// refusal is the error WritesRefused returns.
type refusal struct{ err error }

// WritesRefused implements WriteHealth: the error of the last commit the
// file refused (or of the reopen after it, or of a probe), until a
// ProbeWrite succeeds.
func (l *Log) WritesRefused() error {
	if r := l.refused.Load(); r != nil {
		return r.err
	}
	return nil
}

// refuse records err, the failure of a transaction's commit, and has the
// file reopened before the next transaction (see reopen).
func (l *Log) refuse(err error) error {
	err = l.setRefused(err)
	l.stale.Store(true)
	return err
}

// setRefused records err as the reason writes are refused and returns it
// wrapping ErrWritesRefused.
func (l *Log) setRefused(err error) error {
	l.refused.Store(&refusal{err: err})
	return fmt.Errorf("%w: %w", gmailrelay.ErrWritesRefused, err)
}

// hold returns the open bbolt database with l.mu held for reading: the
// caller releases it once its transaction is over. After a failed commit
// it reopens the file first (reopen); while the file cannot be reopened
// it answers the reopen's error.
func (l *Log) hold() (*bolt.DB, error) {
	if l.stale.Load() {
		l.reopen()
	}
	l.mu.RLock()
	if l.db == nil {
		l.mu.RUnlock()
		if l.closed.Load() {
			return nil, gmailrelay.ErrClosed
		}
		why := l.WritesRefused()
		if why == nil {
			why = errors.New("the file is not open")
		}
		return nil, fmt.Errorf("%w: %w", gmailrelay.ErrWritesRefused, why)
	}
	return l.db, nil
}

// reopen closes the bbolt database after a failed commit and opens the
// file again, verified as Open verifies it. bbolt rolls a failed commit
// back, but its state in memory is not always the file's afterwards: a
// failed remap of a growing file leaves it with no mapping at all, and a
// meta page written whose sync then failed is read back as committed. A
// reopen reads the file as it is, so a write that follows is built on
// what the file holds, never on what a refused commit left in memory.
// Nothing is lost: what was committed is in the file. A file that cannot
// be reopened (gone, locked, damaged) leaves the log without a database,
// every call answering that error, until a later call reopens it.
func (l *Log) reopen() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.stale.Load() || l.closed.Load() {
		return
	}
	if l.db != nil {
		if err := l.db.Close(); err != nil {
			l.logf("acceptlog: %s: close after a refused write: %v", l.path, err)
		}
		l.db, l.file = nil, nil
	}
	f, err := lockedFile(l.path, os.O_RDWR)
	if err == nil {
		var db *bolt.DB
		if db, err = l.openVerified(f); err == nil {
			l.db, l.file = db, f
			l.stale.Store(false)
			l.logf("acceptlog: %s: reopened after a refused write; the file verified", l.path)
			return
		}
	}
	l.refuse(fmt.Errorf("reopen %s after a refused write: %w", l.path, err))
}

// probeReserve is how much disk ProbeWrite reserves for the file's next
// pages before it commits: a probe that finds less free is refused.
const probeReserve = 1 << 20

// ProbeWrite implements WriteHealth. It first reserves probeReserve bytes
// of disk past the file's last page for the pages to come (fallocate,
// where the system has it; the file's size and content stay as they
// are): a disk without that much room refuses the probe without a
// commit, and a bbolt commit, which could reuse the file's free pages,
// would not tell. Then it commits a rewrite of the file's format record;
// its success ends the refusal. The reserved space is kept: the next
// commits write into it.
func (l *Log) ProbeWrite(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("probe write: %w", err)
	}
	if l.closed.Load() {
		return fmt.Errorf("probe write: %w", gmailrelay.ErrClosed)
	}
	db, err := l.hold()
	if err != nil {
		return fmt.Errorf("probe write: %w", err)
	}
	var end int64
	err = db.View(func(tx *bolt.Tx) error { end = tx.Size(); return nil })
	if err == nil {
		err = reserve(l.file, end, probeReserve)
	}
	l.mu.RUnlock()
	if err != nil {
		return fmt.Errorf("probe write: %w", l.setRefused(fmt.Errorf("reserve %d bytes: %w", probeReserve, err)))
	}
	format := []byte(strconv.Itoa(formatVersion))
	if err := l.commit(func(w *writeTx) error { return putMetaValue(w.tx, metaFormat, format) }); err != nil {
		return fmt.Errorf("probe write: %w", err)
	}
	if l.refused.Swap(nil) != nil {
		l.logf("acceptlog: %s: a probe write succeeded: the log takes writes again", l.path)
	}
	return nil
}
