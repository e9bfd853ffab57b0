package acceptlog

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/gmailrelay/gmailrelay"
	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// ErrNotALog is wrapped by the error Open and OpenReadOnly return for a
// file that is not a gmailrelay log: empty, not a bbolt file, or a bbolt
// file without the log's buckets. Such a file is left as it is.
var ErrNotALog = errors.New("not a gmailrelay log")

// DefaultGroupWait is Options.GroupWait's default: how long a write waits
// for others to share its commit. At Gmail's pace (a send takes hundreds
// of milliseconds) a user does not see it; under concurrency it turns
// many commits, each two syncs, into one (docs/benchmarks.md).
const DefaultGroupWait = 2 * time.Millisecond

// journalPath is where an older gmailrelay kept the journal of the log at
// path.
func journalPath(path string) string { return path + "-journal" }

// Open opens the log stored at path. It creates a new log only where no
// file exists. An existing file is verified before anything reads it
// through bbolt (verifyFile): one that is empty, is not a bbolt file or
// lacks the log's buckets is refused (ErrNotALog), and a damaged one too
// (ErrDamaged), naming the damage. A refused file is not written to.
//
// A journal an older gmailrelay left beside the file (it did not stop
// cleanly) is replayed once, when every record in it checks out and it
// belongs to the file (legacy.go), and a file an older gmailrelay wrote is
// converted to this version's format. Open does not recover jobs left in
// StateForwarding: that is the relay's decision (see ByState). When
// another process (or another Log in this one) holds the file, Open fails
// after about a second with an error saying the file is locked.
func Open(path string, opts Options) (*Log, error) {
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	logf := opts.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	l := &Log{path: path, now: now, logf: logf, identity: opts.Identity}
	if err := l.open(opts); err != nil {
		return nil, fmt.Errorf("open log %s: %w", path, err)
	}
	return l, nil
}

func (l *Log) open(opts Options) error {
	if _, err := os.Lstat(l.path); errors.Is(err, os.ErrNotExist) {
		if _, err := os.Stat(journalPath(l.path)); err == nil {
			return fmt.Errorf("journal %s exists without its log file: restore the file, or move the journal away to start a new log", journalPath(l.path))
		}
		if err := create(l.path); err != nil {
			return err
		}
	}
	f, err := lockedFile(l.path, os.O_RDWR)
	if err != nil {
		return err
	}
	handed := false
	defer func() {
		if !handed {
			_ = f.Close()
		}
	}()
	if f, err = l.replayLegacyJournal(f); err != nil {
		return err
	}
	l.groupWait = opts.GroupWait
	if l.groupWait <= 0 {
		l.groupWait = DefaultGroupWait
	}
	handed = true // openFile's from here
	rep, db, err := l.openFile(f)
	if err != nil {
		return err
	}
	l.db, l.file = db, f
	// The identity is checked before anything is written: a relay
	// configured otherwise leaves the file as it was.
	var rec *gmailrelay.IdentityRecord
	err = db.View(func(tx *bolt.Tx) error {
		var err error
		rec, err = l.checkIdentity(tx)
		return err
	})
	upgrade := rep.sealed && rep.format < formatVersion
	if err == nil && (rec != nil || !rep.sealed || upgrade) {
		var notes []string
		err = db.Update(func(tx *bolt.Tx) error {
			if !rep.sealed {
				var err error
				if notes, err = migrateLegacy(tx, l.now()); err != nil {
					return fmt.Errorf("convert the file from an older gmailrelay: %w", err)
				}
			}
			if upgrade {
				note, err := upgradeToFolds(tx)
				if err != nil {
					return fmt.Errorf("upgrade the file to format %d: %w", formatVersion, err)
				}
				notes = append(notes, note)
			}
			if rec == nil {
				return nil
			}
			if !rep.sealed || tx.Size() > 0 && rep.buckets[string(bucketJobs)].records > 0 {
				notes = append(notes, fmt.Sprintf("it had no identity; it now remembers %s, and a relay configured otherwise refuses it (gmailrelay rekey changes it on purpose)", rec.Identity))
			}
			return putIdentity(tx, rec)
		})
		for _, n := range notes {
			l.logf("acceptlog: %s: %s", l.path, n)
		}
	}
	if err != nil {
		_ = db.Close()
		return err
	}
	return nil
}

// openVerified opens the log file f (locked) with bbolt after verifying
// it (verifyLogFile). The database owns f; on failure f is closed.
func (l *Log) openVerified(f *os.File) (*bolt.DB, error) {
	_, db, err := l.openFile(f)
	return db, err
}

// openFile is openVerified, also returning the verification's report.
func (l *Log) openFile(f *os.File) (*fileReport, *bolt.DB, error) {
	rep, err := verifyLogFile(f)
	if err != nil {
		_ = f.Close()
		return nil, nil, err
	}
	handed := false
	db, err := openBolt(l.path, &bolt.Options{Timeout: lockTimeout, NoFreelistSync: noFreelistSync,
		OpenFile: func(string, int, os.FileMode) (*os.File, error) { handed = true; return f, nil }})
	if err != nil {
		if !handed {
			_ = f.Close() // bbolt closes the file it was handed
		}
		return nil, nil, err
	}
	db.MaxBatchDelay = l.groupWait
	return rep, db, nil
}

// lockedFile opens path with flag and takes its flock (see lockFile).
func lockedFile(path string, flag int) (*os.File, error) {
	f, err := os.OpenFile(path, flag, 0)
	if err != nil {
		return nil, err
	}
	if err := lockFile(f, lockTimeout); err != nil {
		_ = f.Close()
		if errors.Is(err, berrors.ErrTimeout) {
			return nil, fmt.Errorf("file is locked by another user of the log (another gmailrelay running?): %w", err)
		}
		return nil, fmt.Errorf("lock: %w", err)
	}
	return f, nil
}

// create makes a new, empty log at path: written whole as path.new, then
// linked into place only if path still does not exist, so a crash during
// creation leaves no half-made log at path (a later Open would refuse it),
// and two creators never replace each other's log.
func create(path string) error {
	tmp := path + ".new"
	_ = os.Remove(tmp) // a creation that crashed
	db, err := bolt.Open(tmp, 0o600, &bolt.Options{Timeout: lockTimeout, NoFreelistSync: noFreelistSync})
	if err != nil {
		return fmt.Errorf("create: %w", err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, name := range allBuckets {
			if _, err := tx.CreateBucket(name); err != nil {
				return fmt.Errorf("create bucket %s: %w", name, err)
			}
		}
		return initMeta(tx)
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Link(tmp, path)
	}
	_ = os.Remove(tmp)
	if err == nil {
		err = syncDir(path)
	}
	if err != nil {
		return fmt.Errorf("create: %w", err)
	}
	return nil
}

// replayLegacyJournal replays the journal an older gmailrelay left beside
// the log file f (locked) into a copy of the file, which then replaces it;
// the journal is removed after. It returns the file to go on with: f when
// there was no journal, the new file, locked, otherwise. On any failure
// the log file and the journal are left as they were.
func (l *Log) replayLegacyJournal(f *os.File) (*os.File, error) {
	j, err := readLegacyJournal(l.path)
	if err != nil || j == nil {
		return f, err
	}
	fi, err := f.Stat()
	if err != nil {
		return f, err
	}
	tmp := l.path + ".replay"
	_ = os.Remove(tmp) // a replay that crashed before its rename
	notes, err := j.replayTo(f, fi.Size(), tmp, l.now())
	if err != nil {
		return f, err
	}
	if err := os.Rename(tmp, l.path); err != nil {
		_ = os.Remove(tmp)
		return f, fmt.Errorf("replay journal %s: %w", j.path, err)
	}
	// From here the file holds the journal's commits: the journal goes.
	err = syncDir(l.path)
	if err == nil {
		err = os.Remove(j.path)
	}
	if err == nil {
		err = syncDir(j.path)
	}
	if err != nil {
		return f, fmt.Errorf("replay journal %s: %w", j.path, err)
	}
	for _, n := range notes {
		l.logf("acceptlog: %s: %s", l.path, n)
	}
	_ = f.Close()
	return lockedFile(l.path, os.O_RDWR)
}

// verifyLogFile verifies the log file f (verifyFile) and refuses what is
// not a log or is damaged.
func verifyLogFile(f *os.File) (*fileReport, error) {
	fi, err := f.Stat()
	switch {
	case err != nil:
		return nil, err
	case !fi.Mode().IsRegular():
		return nil, fmt.Errorf("%w (not a regular file)", ErrNotALog)
	case fi.Size() == 0:
		return nil, fmt.Errorf("%w (empty file)", ErrNotALog)
	}
	rep, err := verifyFile(f, fi.Size())
	if err != nil {
		return nil, withCheckHint(err)
	}
	if rep.buckets[string(bucketJobs)] == nil || rep.buckets[string(bucketLines)] == nil {
		if rep.sealed {
			return nil, withCheckHint(&DamageError{What: "the log's buckets", Err: errors.New("the jobs or lines bucket is missing")})
		}
		return nil, fmt.Errorf("%w (a bbolt file without the log's buckets)", ErrNotALog)
	}
	if rep.sealed && rep.format > formatVersion {
		return nil, fmt.Errorf("the log's format is %d, this gmailrelay reads formats 1 to %d: a newer gmailrelay wrote it (use that version)", rep.format, formatVersion)
	}
	if err := rep.err(); err != nil {
		return nil, withCheckHint(err)
	}
	if rep.sealed && rep.format < 2 {
		return nil, withCheckHint(&DamageError{What: describeRecord(bucketMeta, metaFormat), Err: errors.New("missing or not a format number")})
	}
	return rep, nil
}

// withCheckHint adds to a damage error the command that names each
// damaged record.
func withCheckHint(err error) error {
	if !errors.Is(err, ErrDamaged) {
		return err
	}
	return fmt.Errorf("%w (the file was not changed; `gmailrelay check --data FILE` names every damaged record; restore the file from a backup)", err)
}

// openBolt is bolt.Open that turns a panic into an error (guard): the file
// was verified, so none is expected.
func openBolt(path string, opts *bolt.Options) (*bolt.DB, error) {
	var db *bolt.DB
	err := guard("open "+path, func() error {
		var err error
		db, err = bolt.Open(path, 0o600, opts)
		return err
	})
	return db, err
}

// Notes says what OpenReadOnly did to read the file: a journal an older
// gmailrelay left, replayed into a temporary copy. Empty otherwise.
func (l *Log) Notes() []string { return l.notes }

// Close closes the file, waiting for transactions in progress. Calling it
// again does nothing and returns nil.
func (l *Log) Close() error {
	var err error
	l.closeOnce.Do(func() {
		l.closed.Store(true)
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.db == nil {
			return // a failed reopen closed it
		}
		if cerr := l.db.Close(); cerr != nil {
			err = fmt.Errorf("close log %s: %w", l.path, cerr)
		}
		if l.cleanup != nil {
			l.cleanup()
		}
	})
	return err
}
