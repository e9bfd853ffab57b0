// Package acceptlog is the durable acceptance log in one bbolt file: the
// jobs, their lines (append-only, globally ordered) and the indexes the
// relay reads, each record sealed with a checksum. Every state change and
// the lines that explain it are written in one bbolt transaction, fsynced
// before the call that writes them returns. It implements gmailrelay.Store;
// the domain rules of a change are gmailrelay.Prepare's.
package acceptlog

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gmailrelay/gmailrelay"
	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// Options configure Open.
type Options struct {
	// Now stamps lines whose Time is zero. Defaults to time.Now.
	Now func() time.Time
	// Logf, when set, is told what the log decides on its own: a file of
	// an older format converted, an older version's journal replayed.
	Logf func(format string, args ...any)
	// GroupWait is how long a write waits for others to share its commit
	// (bbolt's MaxBatchDelay): 0 is DefaultGroupWait.
	GroupWait time.Duration
	// Identity is the relay's (see Identity): a new file stores it, a
	// file without one adopts it, and a file with another one is refused
	// (an error wrapping ErrIdentityMismatch, nothing written). Zero
	// checks nothing (tests, backup, check, compact).
	Identity gmailrelay.Identity
}

// lockTimeout makes a second opener of the same file fail instead of
// hanging.
const lockTimeout = time.Second

// Log is the acceptance log in one bbolt file. It is safe for concurrent use.
// Every method but Close and Commits returns ErrClosed (wrapped) after Close.
//
// Every write is one bbolt transaction, made durable by bbolt's own commit
// (its pages synced, then its meta page) before the write returns.
// Concurrent writes share a transaction through bbolt's Batch (group
// commit): one commit, and its two syncs, for all of them.
type Log struct {
	// mu guards db and file: every transaction holds it for reading,
	// reopen (after a refused commit) and Close for writing.
	mu sync.RWMutex
	db *bolt.DB
	// file is the open file db uses (nil for OpenReadOnly's Log).
	file *os.File
	// groupWait is db's MaxBatchDelay, kept for a reopen.
	groupWait time.Duration
	// stale: a commit failed, so the file is reopened before the next
	// transaction (see reopen). refused is the error WritesRefused
	// returns; nil once a commit succeeds.
	stale   atomic.Bool
	refused atomic.Pointer[refusal]

	path string
	now  func() time.Time
	logf func(format string, args ...any)
	// identity is Options.Identity (see openIdentity).
	identity gmailrelay.Identity

	// notes and cleanup are OpenReadOnly's: what it did to read the file
	// (a journal replayed into a temporary copy), and how to remove the
	// copy at Close.
	notes   []string
	cleanup func()

	commits atomic.Uint64
	// lastTx is the write transaction whose commit is already counted.
	// Only touched inside write transactions, which bbolt serialises.
	lastTx *bolt.Tx

	closed    atomic.Bool
	closeOnce sync.Once
}

// Commits returns how many write transactions the log has committed since
// Open: each is two syncs of the file, shared by every write batched into
// it.
func (l *Log) Commits() uint64 { return l.commits.Load() }

// Mutate reads the job messageID, calls fn with a copy of it (nil when the
// log has none) and writes the Change fn returns, all in one bbolt write
// transaction that is durable before Mutate returns.
//
// Concurrent Mutates are grouped into one transaction (bbolt's Batch: one
// commit for the group). Because a group's members are retried alone when
// the group's transaction fails, fn may be called more than once and must
// depend only on its argument. ctx is only checked before the transaction
// starts: a commit is never abandoned half-way.
//
// When fn returns an error, nothing is written and Mutate returns that error
// unchanged. A Change breaking the log's invariants is an error wrapping
// ErrInvalidChange and nothing is written. A Change that creates a job
// whose Message-ID differs from an existing job's only in ASCII case is a
// *CaseTwinError (ErrCaseTwin) naming that job, and nothing is written. Lines get the next global Seq
// (whatever Seq they carried), Time = Options.Now() when zero and MessageID
// = messageID when empty.
//
// Mutate returns the job as written (the current job when Change.Job is nil,
// the zero Job when there is none) and the lines as written.
func (l *Log) Mutate(ctx context.Context, messageID string, fn func(cur *gmailrelay.Job) (gmailrelay.Change, error)) (gmailrelay.Job, []gmailrelay.Line, error) {
	if err := ctx.Err(); err != nil {
		return gmailrelay.Job{}, nil, fmt.Errorf("mutate %s: %w", messageID, err)
	}
	if err := gmailrelay.CheckMessageID(messageID); err != nil {
		return gmailrelay.Job{}, nil, fmt.Errorf("mutate: %w: %w", gmailrelay.ErrInvalidChange, err)
	}
	if l.closed.Load() {
		return gmailrelay.Job{}, nil, fmt.Errorf("mutate %s: %w", messageID, gmailrelay.ErrClosed)
	}
	var (
		job   gmailrelay.Job
		lines []gmailrelay.Line
		fnErr error
	)
	err := l.commit(func(w *writeTx) error {
		// A batch retry runs this again: only the last run commits.
		var err error
		job, lines, fnErr, err = l.apply(w, messageID, fn)
		return err
	})
	if err != nil {
		return gmailrelay.Job{}, nil, l.wrapErr("mutate "+messageID, err)
	}
	if fnErr != nil {
		return gmailrelay.Job{}, nil, fnErr
	}
	return job, lines, nil
}

// commit runs fn in a write transaction shared with the writes in flight
// (bbolt's Batch) and returns once the transaction is durable. fn's
// record counts are flushed after it.
//
// A transaction whose writes were all made but whose commit failed (the
// disk is full, an I/O error) is a refused write: its error wraps
// ErrWritesRefused, WritesRefused reports it until a ProbeWrite succeeds,
// and the file is reopened before the next transaction (see reopen).
func (l *Log) commit(fn func(w *writeTx) error) error {
	db, err := l.hold()
	if err != nil {
		return err
	}
	defer l.mu.RUnlock()
	// made: the last run of fn made all its writes (bbolt runs it again
	// when another write batched with it fails), so an error is the
	// commit's.
	made := false
	err = db.Batch(func(tx *bolt.Tx) error {
		made = false
		if l.lastTx != tx {
			l.lastTx = tx
			tx.OnCommit(func() { l.commits.Add(1) })
		}
		w := newWriteTx(tx)
		if err := fn(w); err != nil {
			return err
		}
		if err := w.flush(); err != nil {
			return err
		}
		made = true
		return nil
	})
	if err != nil && made && !errors.Is(err, berrors.ErrDatabaseNotOpen) {
		return l.refuse(err)
	}
	return err
}

// apply is one run of a Mutate inside w's transaction. fnErr is the
// callback's error or a validation error: the transaction stays untouched
// and bbolt sees success, so the rest of a batch is not re-run because of
// it. err is a storage error and rolls the transaction back.
func (l *Log) apply(w *writeTx, id string, fn func(*gmailrelay.Job) (gmailrelay.Change, error)) (_ gmailrelay.Job, _ []gmailrelay.Line, fnErr, err error) {
	cur, curRecord, curSeqs, err := w.getJob(id)
	if err != nil && !errors.Is(err, gmailrelay.ErrNotFound) {
		return gmailrelay.Job{}, nil, nil, err
	}
	p, err := gmailrelay.Prepare(id, cur, l.now, fn)
	if err != nil {
		return gmailrelay.Job{}, nil, err, nil
	}
	if cur == nil && p.Job != nil && !skipFoldIndex {
		// A new job: refused, before anything is written, when another
		// job's Message-ID differs from id only in case.
		if err := caseTwin(w, id); err != nil {
			if errors.Is(err, gmailrelay.ErrCaseTwin) {
				return gmailrelay.Job{}, nil, err, nil
			}
			return gmailrelay.Job{}, nil, nil, err
		}
	}
	counts := map[string]int64{}
	// The job's record lists the seqs of its lines: the new lines' seqs
	// are appended to the stored list, so a change with lines rewrites
	// the record even when it leaves the job as it is.
	w.seqs = append(w.seqs[:0], curSeqs...)
	var last uint64
	if len(p.Lines) > 0 {
		if last, err = curSeqs.last(); err != nil {
			return gmailrelay.Job{}, nil, nil, &DamageError{What: "job " + id, Err: err}
		}
	}
	for i := range p.Lines {
		ln := &p.Lines[i]
		seq, err := w.nextSequence(wLines)
		if err != nil {
			return gmailrelay.Job{}, nil, nil, fmt.Errorf("next line seq: %w", err)
		}
		ln.Seq = seq
		w.key = binary.BigEndian.AppendUint64(w.key[:0], seq)
		if err := w.putNew(wLines, w.key, encodeLine(ln)); err != nil {
			return gmailrelay.Job{}, nil, nil, fmt.Errorf("put line %d: %w", seq, err)
		}
		w.seqs, last = appendSeq(w.seqs, last, seq), seq
		for _, k := range lineCounters(ln) {
			counts[k]++
		}
	}
	job := p.Job
	if job == nil && len(p.Lines) > 0 {
		job = cur
	}
	if job != nil {
		if err := putJob(w, cur, curRecord, job, w.seqs, counts); err != nil {
			return gmailrelay.Job{}, nil, nil, err
		}
	}
	if err := indexSends(w, p.Result.Mailbox, p.Lines); err != nil {
		return gmailrelay.Job{}, nil, nil, fmt.Errorf("index sends: %w", err)
	}
	if p.Raw != nil {
		if err := w.putRaw(id, p.Raw); err != nil {
			return gmailrelay.Job{}, nil, nil, fmt.Errorf("put raw: %w", err)
		}
	}
	mb, err := p.MailboxRecord(w.getMailbox)
	if err != nil {
		return gmailrelay.Job{}, nil, nil, err
	}
	if mb != nil {
		if err := w.putMailbox(mb); err != nil {
			return gmailrelay.Job{}, nil, nil, err
		}
	}
	if err := addCounts(w, counts); err != nil {
		return gmailrelay.Job{}, nil, nil, err
	}
	return p.Result, p.Lines, nil, nil
}

// getMailbox reads a mailbox's record; the zero Mailbox{Name: name} when
// the log knows nothing about it.
func getMailbox(tx *bolt.Tx, name string) (gmailrelay.Mailbox, error) {
	v, err := readRecord(bucketMailboxes, tx.Bucket(bucketMailboxes).Get, []byte(name))
	if err != nil {
		return gmailrelay.Mailbox{}, err
	}
	return decodeMailbox(name, v)
}

// decodeMailbox decodes a mailbox's stored body v (nil: none).
func decodeMailbox(name string, v []byte) (gmailrelay.Mailbox, error) {
	mb := gmailrelay.Mailbox{Name: name}
	if v == nil {
		return mb, nil
	}
	if err := json.Unmarshal(v, &mb); err != nil {
		return gmailrelay.Mailbox{}, &DamageError{What: "mailbox " + name, Err: err}
	}
	return mb, nil
}

// getJob reads a job; ErrNotFound (and a nil job) when absent.
func getJob(tx *bolt.Tx, id string) (*gmailrelay.Job, error) {
	v, err := readRecord(bucketJobs, tx.Bucket(bucketJobs).Get, []byte(id))
	if err != nil {
		return nil, err
	}
	if v == nil {
		return nil, gmailrelay.ErrNotFound
	}
	var j gmailrelay.Job
	if err := decodeJob(v, &j); err != nil {
		return nil, &DamageError{What: "job " + id, Err: err}
	}
	return &j, nil
}

// wrapErr adds context to a storage error and turns bbolt's "not open" into
// ErrClosed.
func (l *Log) wrapErr(what string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, berrors.ErrDatabaseNotOpen) {
		err = gmailrelay.ErrClosed
	}
	return fmt.Errorf("%s: %w", what, err)
}

var _ gmailrelay.Store = (*Log)(nil)
