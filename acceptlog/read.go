package acceptlog

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/gmailrelay/gmailrelay"
	bolt "go.etcd.io/bbolt"
)

// view runs fn in a read transaction after checking ctx and Close.
func (l *Log) view(ctx context.Context, what string, fn func(tx *bolt.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if l.closed.Load() {
		return fmt.Errorf("%s: %w", what, gmailrelay.ErrClosed)
	}
	db, err := l.hold()
	if err != nil {
		return l.wrapErr(what, err)
	}
	defer l.mu.RUnlock()
	return l.wrapErr(what, db.View(fn))
}

// Get returns the job messageID, or an error wrapping ErrNotFound.
func (l *Log) Get(ctx context.Context, messageID string) (gmailrelay.Job, error) {
	return l.get(ctx, messageID) // get.go
}

// JobLines returns the lines of the job messageID, oldest first, or an error
// wrapping ErrNotFound when there is no such job.
func (l *Log) JobLines(ctx context.Context, messageID string) ([]gmailrelay.Line, error) {
	var lines []gmailrelay.Line
	err := l.view(ctx, "job lines "+messageID, func(tx *bolt.Tx) error {
		var err error
		_, lines, err = jobLines(tx, messageID)
		return err
	})
	return lines, err
}

// jobLines reads a job and its lines, oldest first: the seqs its record
// lists, each read from the lines bucket through one cursor (the seqs
// ascend, so each seek moves forward). ErrNotFound when there is no job.
func jobLines(tx *bolt.Tx, id string) (*gmailrelay.Job, []gmailrelay.Line, error) {
	v, err := readRecord(bucketJobs, tx.Bucket(bucketJobs).Get, []byte(id))
	if err != nil {
		return nil, nil, err
	}
	if v == nil {
		return nil, nil, gmailrelay.ErrNotFound
	}
	var j gmailrelay.Job
	seqs, err := decodeJobRecord(v, &j)
	if err != nil {
		return nil, nil, &DamageError{What: "job " + id, Err: err}
	}
	var lines []gmailrelay.Line
	var readErr error
	c := tx.Bucket(bucketLines).Cursor()
	var key [8]byte
	_, err = seqs.each(func(seq uint64) bool {
		binary.BigEndian.PutUint64(key[:], seq)
		k, v := c.Seek(key[:])
		if !bytes.Equal(k, key[:]) {
			readErr = fmt.Errorf("its record lists line %d, which is not in the log", seq)
			return false
		}
		var ln gmailrelay.Line
		if readErr = decodeLineValue(k, v, &ln); readErr != nil {
			return false
		}
		lines = append(lines, ln)
		return true
	})
	if err == nil {
		err = readErr
	}
	if err != nil {
		return nil, nil, fmt.Errorf("lines of job %s: %w", id, err)
	}
	return &j, lines, nil
}

// Raw returns the message stored for messageID (by a Change with Raw), or
// an error wrapping ErrNotFound when none is stored.
func (l *Log) Raw(ctx context.Context, messageID string) ([]byte, error) {
	var raw []byte
	err := l.view(ctx, "raw "+messageID, func(tx *bolt.Tx) error {
		v, err := readRecord(bucketBodies, tx.Bucket(bucketBodies).Get, []byte(messageID))
		if err != nil {
			return err
		}
		if v == nil {
			return gmailrelay.ErrNotFound
		}
		raw = bytes.Clone(v)
		return nil
	})
	return raw, err
}

// List returns jobs ordered by Message-ID, starting after o.After, at most
// o.Limit of them (default 100, at most 1000). next is the Message-ID of the
// last job returned when more jobs match, "" otherwise; pass it as After for
// the next page. With o.State it walks the state index; with only o.Channel
// it scans the jobs themselves (a channel filter costs a walk over other
// channels' jobs). An unknown o.State is an error.
func (l *Log) List(ctx context.Context, o gmailrelay.ListOptions) (jobs []gmailrelay.Job, next string, err error) {
	if o.State != "" && !o.State.Valid() {
		return nil, "", fmt.Errorf("list: unknown state %q", o.State)
	}
	limit := gmailrelay.PageLimit(o.Limit)
	err = l.view(ctx, "list", func(tx *bolt.Tx) error {
		jobs, next = nil, ""
		each := func(j *gmailrelay.Job) bool { // false stops the walk
			if o.Channel != "" && j.Channel != o.Channel {
				return true
			}
			if len(jobs) == limit {
				next = jobs[len(jobs)-1].MessageID
				return false
			}
			jobs = append(jobs, *j)
			return true
		}
		if o.State != "" {
			return walkState(tx, o.State, o.After, each)
		}
		c := tx.Bucket(bucketJobs).Cursor()
		k, v := c.Seek([]byte(o.After))
		if k != nil && string(k) == o.After {
			k, v = c.Next()
		}
		for ; k != nil; k, v = c.Next() {
			var j gmailrelay.Job
			if err := decodeJobValue(k, v, &j); err != nil {
				return err
			}
			if !each(&j) {
				break
			}
		}
		return nil
	})
	if err != nil {
		return nil, "", err
	}
	return jobs, next, nil
}

// walkState calls each for the jobs in state s with ids after after, in id
// order, until it returns false.
func walkState(tx *bolt.Tx, s gmailrelay.State, after string, each func(*gmailrelay.Job) bool) error {
	prefix := stateKey(s, "")
	c := tx.Bucket(bucketState).Cursor()
	start := stateKey(s, after)
	k, _ := c.Seek(start)
	if after != "" && bytes.Equal(k, start) {
		k, _ = c.Next()
	}
	for ; hasPrefixKey(k, prefix); k, _ = c.Next() {
		id := string(k[len(prefix):])
		j, err := getJob(tx, id)
		if err != nil {
			return fmt.Errorf("state index entry %s: %w", id, err)
		}
		if !each(j) {
			break
		}
	}
	return nil
}

// Lines returns the log's lines in global order, those with Seq > after, at
// most limit of them (default 100, at most 1000). next is the Seq of the
// last line returned when more lines follow, 0 otherwise; pass it as after
// for the next page. A tail that has caught up (next == 0) polls again with
// the Seq of the last line it has seen.
func (l *Log) Lines(ctx context.Context, after uint64, limit int) (lines []gmailrelay.Line, next uint64, err error) {
	limit = gmailrelay.PageLimit(limit)
	if after == math.MaxUint64 {
		return nil, 0, nil
	}
	err = l.view(ctx, "lines", func(tx *bolt.Tx) error {
		lines, next = nil, 0
		c := tx.Bucket(bucketLines).Cursor()
		for k, v := c.Seek(seqKey(after + 1)); k != nil; k, v = c.Next() {
			if len(lines) == limit {
				next = lines[len(lines)-1].Seq
				break
			}
			var ln gmailrelay.Line
			if err := decodeLineValue(k, v, &ln); err != nil {
				return err
			}
			lines = append(lines, ln)
		}
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	return lines, next, nil
}

// Due returns the jobs whose NextCheckAt is set and not after now, earliest
// first (ties by Message-ID), at most limit of them; limit <= 0 means all.
// It reads the due index only.
func (l *Log) Due(ctx context.Context, now time.Time, limit int) ([]gmailrelay.Job, error) {
	var jobs []gmailrelay.Job
	err := l.view(ctx, "due", func(tx *bolt.Tx) error {
		jobs = nil
		c := tx.Bucket(bucketDue).Cursor()
		for k, _ := c.First(); k != nil && (limit <= 0 || len(jobs) < limit); k, _ = c.Next() {
			if len(k) < 8 {
				return fmt.Errorf("due index key %x too short", k)
			}
			if timeIDKeyTime(k).After(now) {
				break
			}
			j, err := getJob(tx, string(k[8:]))
			if err != nil {
				return fmt.Errorf("due index entry %s: %w", k[8:], err)
			}
			jobs = append(jobs, *j)
		}
		return nil
	})
	return jobs, err
}

// ByState returns the jobs in state s ordered by Message-ID, at most limit of
// them; limit <= 0 means all. It reads the state index, never every job, so
// recovery ("every forwarding job becomes unknown") costs what it finds.
func (l *Log) ByState(ctx context.Context, s gmailrelay.State, limit int) ([]gmailrelay.Job, error) {
	if !s.Valid() {
		return nil, fmt.Errorf("by state: unknown state %q", s)
	}
	var jobs []gmailrelay.Job
	err := l.view(ctx, "by state "+string(s), func(tx *bolt.Tx) error {
		jobs = nil
		return walkState(tx, s, "", func(j *gmailrelay.Job) bool {
			jobs = append(jobs, *j)
			return limit <= 0 || len(jobs) < limit
		})
	})
	return jobs, err
}

// Mailbox returns what the log remembers about the mailbox name; the zero
// Mailbox{Name: name} when it knows nothing.
func (l *Log) Mailbox(ctx context.Context, name string) (gmailrelay.Mailbox, error) {
	var mb gmailrelay.Mailbox
	err := l.view(ctx, "mailbox "+name, func(tx *bolt.Tx) error {
		var err error
		mb, err = getMailbox(tx, name)
		return err
	})
	if err != nil {
		return gmailrelay.Mailbox{}, err
	}
	return mb, nil
}

// Stats returns the log's counters. They are kept inside every Mutate, so
// this reads the counters and, for OldestUnknown, the first entries of the
// unknown index; it never scans the jobs. Maps are non-nil and hold no zero
// entries. Lines are counted by reason only when they carry one.
func (l *Log) Stats(ctx context.Context) (gmailrelay.Stats, error) {
	var st gmailrelay.Stats
	err := l.view(ctx, "stats", func(tx *bolt.Tx) error {
		counts, err := readCounters(tx)
		if err != nil {
			return err
		}
		st = statsFromCounters(counts)
		c := tx.Bucket(bucketUnknown).Cursor()
		// An unknown job without AmbiguousAt sorts first; skip it.
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			j, err := getJob(tx, string(k[8:]))
			if err != nil {
				return fmt.Errorf("unknown index entry %s: %w", k[8:], err)
			}
			if !j.AmbiguousAt.IsZero() {
				st.OldestUnknown = j.AmbiguousAt
				break
			}
		}
		return nil
	})
	if err != nil {
		return gmailrelay.Stats{}, err
	}
	return st, nil
}

func readCounters(tx *bolt.Tx) (map[string]int64, error) {
	counts := map[string]int64{}
	err := tx.Bucket(bucketCounters).ForEach(func(k, v []byte) error {
		body, err := unseal(bucketCounters, k, v)
		if err == nil {
			var n int64
			n, err = decodeCount(body)
			counts[string(k)] = n
		}
		if err != nil {
			return &DamageError{What: describeRecord(bucketCounters, k), Err: err}
		}
		return nil
	})
	return counts, err
}

// decodeJobValue decodes the stored value v of the job under key k: its
// checksum, then its record. Either failing is a DamageError.
func decodeJobValue(k, v []byte, j *gmailrelay.Job) error {
	_, err := decodeJobValueSeqs(k, v, j)
	return err
}

// decodeJobValueSeqs is decodeJobValue that also returns the seqs of the
// job's lines.
func decodeJobValueSeqs(k, v []byte, j *gmailrelay.Job) (seqList, error) {
	body, err := unseal(bucketJobs, k, v)
	var seqs seqList
	if err == nil {
		seqs, err = decodeJobRecord(body, j)
	}
	if err != nil {
		return "", &DamageError{What: describeRecord(bucketJobs, k), Err: err}
	}
	return seqs, nil
}

// decodeLineValue decodes the stored value v of the line under key k (see
// decodeJobValue).
func decodeLineValue(k, v []byte, ln *gmailrelay.Line) error {
	body, err := unseal(bucketLines, k, v)
	if err == nil {
		err = decodeLine(body, ln)
	}
	if err != nil {
		return &DamageError{What: describeRecord(bucketLines, k), Err: err}
	}
	return nil
}
