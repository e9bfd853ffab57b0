package acceptlog

import (
	"bytes"
	"encoding/json"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// The buckets a write transaction touches, by number (see writeTx). The
// journal names buckets by these numbers: renumbering them is a new
// journal version (see journalBuckets).
const (
	wJobs = iota
	wLines
	wState // the indexes, in indexState.. order
	wDue
	wUnknown
	wPrunable
	wBodies
	wMailboxes
	wCounters
	wSends
	wKeys
	numWriteBuckets
)

var writeBucketNames = [numWriteBuckets][]byte{
	wJobs: bucketJobs, wLines: bucketLines,
	wState: bucketState, wDue: bucketDue, wUnknown: bucketUnknown, wPrunable: bucketPrunable,
	wBodies: bucketBodies, wMailboxes: bucketMailboxes, wCounters: bucketCounters, wSends: bucketSends,
	wKeys: bucketKeys,
}

// writeTx is what the Mutates of one write transaction share: each bucket
// looked up once, one cursor per bucket read or deleted from (bbolt's
// Bucket.Get and Delete make a new Cursor, and grow its stack, on every
// call; a reused cursor's Seek reuses both) and two scratch buffers for
// keys (bbolt's Put copies the key it is given, so a buffer is free again
// as soon as Put returns). Since issue 16.
//
// The Log keeps one and resets it for each transaction (see Log.writeTx);
// it is only touched inside write transactions, which bbolt serialises.
type writeTx struct {
	tx       *bolt.Tx
	buckets  [numWriteBuckets]*bolt.Bucket
	cursors  [numWriteBuckets]*bolt.Cursor
	key, old []byte
	// seqs is a scratch buffer for a job record's seq list (encodeJob
	// copies it).
	seqs []byte
	// values holds the records the transaction puts (see value): bbolt's
	// Put keeps the value it is given, not a copy, until the commit
	// writes it into a page, so a record cannot live in a scratch buffer;
	// but once the transaction has ended nothing refers to them and the
	// next transaction writes over them.
	values []byte
	// rec, when not nil, records every change for the journal: every
	// write of the log goes through put, delete and nextSequence.
	rec *opRecorder
}

// writeTx returns the Log's writeTx, set up for tx.
func (l *Log) writeTx(tx *bolt.Tx) *writeTx {
	if l.w == nil {
		l.w = &writeTx{}
	}
	if l.w.tx != tx {
		l.w.reset(tx)
		l.w.rec = nil
		if l.j != nil {
			l.w.rec = &l.rec
		}
	}
	return l.w
}

// reset forgets the buckets and cursors of the previous transaction (so a
// finished transaction's pages are not kept alive) and keeps the buffers.
func (w *writeTx) reset(tx *bolt.Tx) {
	w.tx = tx
	clear(w.buckets[:])
	clear(w.cursors[:])
	w.values = w.values[:0]
}

// valuesChunk is the least room values is given at once.
const valuesChunk = 16 << 10

// value returns an empty slice with room for n bytes, in values, for a
// record that the transaction puts; used marks the bytes the record took.
// A full chunk is left to the nodes that refer to it and a new one is
// started (only the newest is reused).
func (w *writeTx) value(n int) []byte {
	if cap(w.values)-len(w.values) < n {
		w.values = make([]byte, 0, max(valuesChunk, n))
	}
	k := len(w.values)
	return w.values[k : k : k+n]
}

// used marks v, which value returned and the record was appended to, as
// taken.
func (w *writeTx) used(v []byte) {
	w.values = w.values[:len(w.values)+len(v)]
}

func (w *writeTx) bucket(b int) *bolt.Bucket {
	if w.buckets[b] == nil {
		w.buckets[b] = w.tx.Bucket(writeBucketNames[b])
		if appendBuckets[b] {
			w.buckets[b].FillPercent = 1
		}
	}
	return w.buckets[b]
}

// appendBuckets are the buckets whose new keys mostly sort after every
// stored one (a seq, a time of now): a leaf that splits there keeps all it
// can hold instead of bbolt's default half, so the right-edge leaf every
// commit reads (and bbolt copies into a node) holds half a page on
// average instead of three quarters, and the tree has fewer, fuller pages.
// FillPercent is not stored in the file: it only shapes the splits of the
// transaction that sets it.
var appendBuckets = [numWriteBuckets]bool{wLines: true, wPrunable: true, wSends: true}

func (w *writeTx) cursor(b int) *bolt.Cursor {
	if w.cursors[b] == nil {
		w.cursors[b] = w.bucket(b).Cursor()
	}
	return w.cursors[b]
}

// get is Bucket.Get through the bucket's reused cursor (no bucket of the
// log holds nested buckets).
func (w *writeTx) get(b int, key []byte) []byte {
	k, v := w.cursor(b).Seek(key)
	if !bytes.Equal(k, key) {
		return nil
	}
	return v
}

// delete is Bucket.Delete through the bucket's reused cursor.
func (w *writeTx) delete(b int, key []byte) error {
	c := w.cursor(b)
	if k, _ := c.Seek(key); !bytes.Equal(k, key) {
		return nil
	}
	if err := c.Delete(); err != nil {
		return err
	}
	if w.rec != nil {
		w.rec.delete(b, key)
	}
	return nil
}

func (w *writeTx) put(b int, key, value []byte) error {
	if err := w.bucket(b).Put(key, value); err != nil {
		return err
	}
	if w.rec != nil {
		w.rec.put(b, key, value)
	}
	return nil
}

// nextSequence is Bucket.NextSequence, recorded for the journal.
func (w *writeTx) nextSequence(b int) (uint64, error) {
	seq, err := w.bucket(b).NextSequence()
	if err != nil {
		return 0, err
	}
	if w.rec != nil {
		w.rec.sequence(b, seq)
	}
	return seq, nil
}

// getJob reads a job, its stored record and the seqs of its lines;
// ErrNotFound (and a nil job) when absent. The record stays valid until
// the transaction ends.
func (w *writeTx) getJob(id string) (*Job, []byte, seqList, error) {
	w.key = append(w.key[:0], id...)
	v := w.get(wJobs, w.key)
	if v == nil {
		return nil, nil, "", ErrNotFound
	}
	var j Job
	seqs, err := decodeJobRecord(v, &j)
	if err != nil {
		return nil, nil, "", fmt.Errorf("decode job %s: %w", id, err)
	}
	return &j, v, seqs, nil
}

// putJob stores j, with seqs (a seqList's bytes) as the seqs of its lines,
// in place of cur (nil when new; old is its stored record), moving the
// index entries whose key changes and adding its counter deltas to
// counts. An index entry whose key stays, the counters of an unchanged
// state and channel, and a record that encodes to the stored bytes are not
// written again.
func putJob(w *writeTx, cur *Job, old []byte, j *Job, seqs []byte, counts map[string]int64) error {
	for i := range numIndexes {
		var hadOld, hasNew bool
		if cur != nil {
			w.old, hadOld = appendIndexKey(w.old[:0], i, cur)
		}
		w.key, hasNew = appendIndexKey(w.key[:0], i, j)
		if hadOld && hasNew && bytes.Equal(w.old, w.key) {
			continue
		}
		if hadOld {
			if err := w.delete(wState+i, w.old); err != nil {
				return fmt.Errorf("delete index entry of %s: %w", cur.MessageID, err)
			}
		}
		if hasNew {
			if err := w.put(wState+i, w.key, nil); err != nil {
				return fmt.Errorf("put index entry of %s: %w", j.MessageID, err)
			}
		}
	}
	if cur == nil {
		counts[counterJobs]++
		if err := indexKey(w, j); err != nil {
			return err
		}
	}
	if cur == nil || cur.State != j.State || cur.Channel != j.Channel {
		if cur != nil {
			for _, k := range jobCounters(cur) {
				counts[k]--
			}
		}
		for _, k := range jobCounters(j) {
			counts[k]++
		}
	}
	v := appendJob(w.value(jobSize(j, seqs)), j, seqs)
	if old != nil && bytes.Equal(old, v) {
		return nil
	}
	w.used(v)
	w.key = append(w.key[:0], j.MessageID...)
	if err := w.put(wJobs, w.key, v); err != nil {
		return fmt.Errorf("put job %s: %w", j.MessageID, err)
	}
	return nil
}

// putRaw stores a job's message unless the same bytes are stored.
func (w *writeTx) putRaw(id string, raw []byte) error {
	w.key = append(w.key[:0], id...)
	if v := w.get(wBodies, w.key); v != nil && bytes.Equal(v, raw) {
		return nil
	}
	return w.put(wBodies, w.key, raw)
}

// getMailbox reads a mailbox's record; the zero Mailbox{Name: name} when
// the log knows nothing about it.
func (w *writeTx) getMailbox(name string) (Mailbox, error) {
	w.key = append(w.key[:0], name...)
	return decodeMailbox(name, w.get(wMailboxes, w.key))
}

// putMailbox stores mb unless it encodes to the stored bytes.
func (w *writeTx) putMailbox(mb *Mailbox) error {
	v, err := json.Marshal(mb)
	if err != nil {
		return fmt.Errorf("encode mailbox: %w", err)
	}
	w.key = append(w.key[:0], mb.Name...)
	if old := w.get(wMailboxes, w.key); old != nil && bytes.Equal(old, v) {
		return nil
	}
	if err := w.put(wMailboxes, w.key, v); err != nil {
		return fmt.Errorf("put mailbox %s: %w", mb.Name, err)
	}
	return nil
}

// addCounts adds deltas to the stored counters; a counter that reaches zero
// is deleted, so Stats shows no empty entries.
func addCounts(w *writeTx, deltas map[string]int64) error {
	for k, d := range deltas {
		if d == 0 {
			continue
		}
		w.key = append(w.key[:0], k...)
		var n int64
		if v := w.get(wCounters, w.key); v != nil {
			var err error
			if n, err = decodeCount(v); err != nil {
				return fmt.Errorf("counter %q: %w", k, err)
			}
		}
		n += d
		var err error
		if n == 0 {
			err = w.delete(wCounters, w.key)
		} else {
			v := appendCount(w.value(8), n)
			w.used(v)
			err = w.put(wCounters, w.key, v)
		}
		if err != nil {
			return fmt.Errorf("update counter %q: %w", k, err)
		}
	}
	return nil
}
