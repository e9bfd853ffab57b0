package acceptlog

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/gmailrelay/gmailrelay"
	bolt "go.etcd.io/bbolt"
)

// Prune removes the raw message and the detail lines of at most limit
// prunable jobs (see Job.Prunable) whose last change is before cutoff, oldest
// first, in one transaction (fsynced before Prune returns). Each keeps its
// record (key, Message-ID, fingerprint, state, effects, Gmail's ids, dates)
// with PrunedAt set, and its effect, resolved and last state lines, so the
// front door still replays it and still refuses a different message under
// the same key, and Check still holds. limit <= 0 means 500.
func (l *Log) Prune(ctx context.Context, cutoff time.Time, limit int) (gmailrelay.PruneResult, error) {
	if limit <= 0 {
		limit = 500
	}
	if err := ctx.Err(); err != nil {
		return gmailrelay.PruneResult{}, fmt.Errorf("prune: %w", err)
	}
	if l.closed.Load() {
		return gmailrelay.PruneResult{}, fmt.Errorf("prune: %w", gmailrelay.ErrClosed)
	}
	var res gmailrelay.PruneResult
	err := l.commit(func(w *writeTx) error {
		res = gmailrelay.PruneResult{}
		var ids []string
		c := w.tx.Bucket(bucketPrunable).Cursor()
		end := sortableTime(cutoff)
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			if len(k) < 8 || sortableTimeOf(k) >= end {
				break
			}
			if len(ids) == limit {
				res.More = true
				break
			}
			ids = append(ids, string(k[8:]))
		}
		now := l.now()
		for _, id := range ids {
			if err := pruneJob(w, id, now, &res); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return gmailrelay.PruneResult{}, l.wrapErr("prune", err)
	}
	return res, nil
}

// pruneJob prunes one job inside w's transaction and adds what it removed
// to res.
func pruneJob(w *writeTx, id string, now time.Time, res *gmailrelay.PruneResult) error {
	cur, lines, err := jobLines(w.tx, id)
	if err != nil {
		return fmt.Errorf("prune %s: %w", id, err)
	}
	keep, _ := gmailrelay.KeptWhenPruned(lines)
	kept := make(map[uint64]bool, len(keep))
	for _, ln := range keep {
		kept[ln.Seq] = true
	}
	counts := map[string]int64{}
	// The record keeps the seqs of the kept lines.
	w.seqs = w.seqs[:0]
	var last uint64
	for i := range lines {
		ln := &lines[i]
		if kept[ln.Seq] {
			w.seqs, last = appendSeq(w.seqs, last, ln.Seq), ln.Seq
			continue
		}
		w.key = binary.BigEndian.AppendUint64(w.key[:0], ln.Seq)
		if err := w.delete(wLines, w.key); err != nil {
			return fmt.Errorf("prune %s: delete line %d: %w", id, ln.Seq, err)
		}
		for _, k := range lineCounters(ln) {
			counts[k]--
		}
		res.Lines++
	}
	w.key = append(w.key[:0], id...)
	raw, err := w.get(wBodies, w.key)
	if err != nil {
		return err
	}
	if raw != nil {
		res.RawBytes += int64(len(raw))
		if err := w.delete(wBodies, w.key); err != nil {
			return fmt.Errorf("prune %s: delete raw: %w", id, err)
		}
	}
	j := cur.Clone()
	j.PrunedAt = now
	if err := putJob(w, cur, nil, &j, w.seqs, counts); err != nil {
		return err
	}
	res.Jobs++
	return addCounts(w, counts)
}

// sortableTimeOf is the sortable time prefix of a timeIDKey.
func sortableTimeOf(k []byte) uint64 { return binary.BigEndian.Uint64(k[:8]) }

// backfillPrunable fills the prunable index of a file written before it
// existed.
func backfillPrunable(tx *bolt.Tx) error {
	idx := tx.Bucket(bucketPrunable)
	return tx.Bucket(bucketJobs).ForEach(func(k, v []byte) error {
		var j gmailrelay.Job
		if err := decodeJob(v, &j); err != nil { // a format 1 record: see migrateLegacy
			return fmt.Errorf("decode job %s: %w", k, err)
		}
		if pk := keysOf(&j).prunable; pk != nil {
			return idx.Put(pk, nil)
		}
		return nil
	})
}

// Backup writes a consistent copy of the whole log file to w, from one read
// transaction: writers go on while it runs, and the copy holds exactly what
// was committed when it began. size, when not nil, is told the copy's exact
// size before the first byte is written. It returns the bytes written. A
// long backup holds old pages from reuse until it ends (the file may grow
// meanwhile).
func (l *Log) Backup(ctx context.Context, w io.Writer, size func(int64)) (int64, error) {
	var n int64
	err := l.view(ctx, "backup", func(tx *bolt.Tx) error {
		if size != nil {
			size(tx.Size())
		}
		var err error
		n, err = tx.WriteTo(w)
		return err
	})
	return n, err
}

// Size returns the size in bytes of the log file as the current read
// transaction sees it.
func (l *Log) Size(ctx context.Context) (int64, error) {
	var n int64
	err := l.view(ctx, "size", func(tx *bolt.Tx) error {
		n = tx.Size()
		return nil
	})
	return n, err
}

// BackupFile copies the log file at src, which no relay has open, to dst
// (mode 0600) through a read transaction, writing a temporary file of its
// own beside dst, syncing it and putting it in place (WriteFileAtomic), so
// dst is never a partial copy. dst must not exist.
func BackupFile(src, dst string) (int64, error) {
	o, err := openOffline(src)
	if err != nil {
		return 0, fmt.Errorf("back up: %w", err)
	}
	defer func() { _ = o.close() }()
	var n int64
	err = WriteFileAtomic(dst, func(w io.Writer) error {
		return o.db.View(func(tx *bolt.Tx) error {
			var err error
			n, err = tx.WriteTo(w)
			return err
		})
	})
	return n, err
}

// Compact writes a compacted copy of the log file at src, which no relay has
// open, to dst with bbolt's own compaction: only live pages are copied, so
// the space pruned jobs left behind is given back. dst must not exist.
func Compact(src, dst string) (before, after int64, err error) {
	if _, err := os.Stat(dst); err == nil {
		return 0, 0, fmt.Errorf("compact to %s: file exists", dst)
	}
	o, err := openOffline(src)
	if err != nil {
		return 0, 0, fmt.Errorf("compact: %w", err)
	}
	defer func() { _ = o.close() }()
	sdb := o.db
	tmp, err := tempBeside(dst) // its own name: a killed run's left-over never blocks this one
	if err != nil {
		return 0, 0, fmt.Errorf("compact to %s: %w", dst, err)
	}
	ddb, err := bolt.Open(tmp, 0o600, &bolt.Options{Timeout: lockTimeout})
	if err != nil {
		_ = os.Remove(tmp)
		return 0, 0, fmt.Errorf("compact to %s: %w", dst, err)
	}
	if err := guard("compact "+src, func() error { return bolt.Compact(ddb, sdb, 64<<20) }); err != nil {
		_ = ddb.Close()
		_ = os.Remove(tmp)
		return 0, 0, fmt.Errorf("compact %s: %w", src, err)
	}
	if err := ddb.Close(); err != nil {
		_ = os.Remove(tmp)
		return 0, 0, fmt.Errorf("compact to %s: %w", dst, err)
	}
	if err := placeNew(tmp, dst); err != nil {
		_ = os.Remove(tmp)
		return 0, 0, fmt.Errorf("compact to %s: %w", dst, err)
	}
	si, err := os.Stat(src)
	if err != nil {
		return 0, 0, err
	}
	di, err := os.Stat(dst)
	if err != nil {
		return 0, 0, err
	}
	return si.Size(), di.Size(), nil
}

// WriteFileAtomic writes path through write: into a temporary file of its
// own beside path (path.NNN.tmp, created with O_EXCL, mode 0600), synced,
// then put in place without replacing anything (placeNew) and the
// directory synced. path must not exist; on any error nothing is left at
// path and the temporary file is removed.
//
// The temporary name is unique to this run, so a run killed mid-way, which
// leaves its .tmp behind, never blocks a later one, and a run never touches
// a temporary file another run may still be writing: a left-over
// path.*.tmp is only litter, safe to delete when no backup is running.
func WriteFileAtomic(path string, write func(io.Writer) error) error {
	if _, err := os.Stat(path); err == nil {
		return fmt.Errorf("write %s: file exists", path)
	}
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	fail := func(err error) error {
		_ = f.Close()
		_ = os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Chmod(0o600); err != nil {
		return fail(err)
	}
	if err := write(f); err != nil {
		return fail(err)
	}
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	if err := f.Close(); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := placeNew(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}

// placeNew moves the finished file tmp to path, which must not exist: a
// hard link fails rather than replace a file that appeared meanwhile (a
// concurrent run's), then tmp goes. Where the file system has no hard
// links it falls back to a rename after checking path is still free.
func placeNew(tmp, path string) error {
	err := os.Link(tmp, path)
	if err == nil {
		return os.Remove(tmp)
	}
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("file exists (written meanwhile by another run)")
	}
	if _, serr := os.Stat(path); serr == nil {
		return fmt.Errorf("file exists (written meanwhile by another run)")
	}
	return os.Rename(tmp, path)
}

// tempBeside reserves a new, empty temporary file beside path
// (path.NNN.tmp, O_EXCL) and returns its name.
func tempBeside(path string) (string, error) {
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*.tmp")
	if err != nil {
		return "", err
	}
	name := f.Name()
	if err := f.Close(); err != nil {
		_ = os.Remove(name)
		return "", err
	}
	return name, nil
}
