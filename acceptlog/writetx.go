package acceptlog

import (
	"encoding/binary"
	"encoding/json"
	"fmt"

	"github.com/gmailrelay/gmailrelay"
	bolt "go.etcd.io/bbolt"
)

// The buckets a write transaction touches, by number (see writeTx).
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
	wFolds
	numWriteBuckets
)

var writeBucketNames = [numWriteBuckets][]byte{
	wJobs: bucketJobs, wLines: bucketLines,
	wState: bucketState, wDue: bucketDue, wUnknown: bucketUnknown, wPrunable: bucketPrunable,
	wBodies: bucketBodies, wMailboxes: bucketMailboxes, wCounters: bucketCounters, wSends: bucketSends,
	wKeys: bucketKeys, wFolds: bucketFolds,
}

// writeTx is one writer's view of a write transaction: every write of the
// log goes through its put, delete and nextSequence, which seal each value
// with its checksum (record.go) and count the records each bucket gains
// or loses; flush adds those counts to the log's record counts (meta.go),
// which Open compares with what it finds. Several writers may share one
// bbolt transaction (a group commit): each flushes its own counts.
type writeTx struct {
	tx      *bolt.Tx
	buckets [numWriteBuckets]*bolt.Bucket
	// key, old and seqs are scratch buffers: bbolt's Put copies the key it
	// is given, so a key buffer is free again once Put returns. Values are
	// not copied by Put: each is a new slice.
	key, old []byte
	seqs     []byte
	// records are the record count deltas of the buckets since the last
	// flush.
	records [numWriteBuckets]int64
}

func newWriteTx(tx *bolt.Tx) *writeTx { return &writeTx{tx: tx} }

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
// can hold instead of bbolt's default half, so the tree has fewer, fuller
// pages (bytes on disk per job). FillPercent is not stored in the file: it
// only shapes the splits of the transaction that sets it.
var appendBuckets = [numWriteBuckets]bool{wLines: true, wPrunable: true, wSends: true}

// get returns the body of the value under key in bucket b (nil when
// absent), checked against its checksum.
func (w *writeTx) get(b int, key []byte) ([]byte, error) {
	return readRecord(writeBucketNames[b], w.bucket(b).Get, key)
}

// put stores body under key in bucket b, sealed with its checksum. An
// existing value is replaced; a new key adds a record to b's count.
func (w *writeTx) put(b int, key, body []byte) error {
	bk := w.bucket(b)
	isNew := bk.Get(key) == nil
	if err := bk.Put(key, sealed(writeBucketNames[b], key, body)); err != nil {
		return err
	}
	if isNew {
		w.records[b]++
	}
	return nil
}

// putNew is put for a key that must not exist yet: a line's seq.
func (w *writeTx) putNew(b int, key, body []byte) error {
	if w.bucket(b).Get(key) != nil {
		return &DamageError{What: describeRecord(writeBucketNames[b], key),
			Err: fmt.Errorf("a new record's key is taken: the %s bucket's sequence is damaged", writeBucketNames[b])}
	}
	return w.put(b, key, body)
}

// delete removes key from bucket b, if present.
func (w *writeTx) delete(b int, key []byte) error {
	bk := w.bucket(b)
	if bk.Get(key) == nil {
		return nil
	}
	if err := bk.Delete(key); err != nil {
		return err
	}
	w.records[b]--
	return nil
}

// nextSequence is Bucket.NextSequence.
func (w *writeTx) nextSequence(b int) (uint64, error) {
	return w.bucket(b).NextSequence()
}

// flush adds the record count deltas to the stored counts.
func (w *writeTx) flush() error {
	for b, d := range w.records {
		if d == 0 {
			continue
		}
		if err := addRecordCount(w.tx, writeBucketNames[b], d); err != nil {
			return err
		}
		w.records[b] = 0
	}
	return nil
}

// getJob reads a job, its stored body and the seqs of its lines;
// ErrNotFound (and a nil job) when absent.
func (w *writeTx) getJob(id string) (*gmailrelay.Job, []byte, seqList, error) {
	w.key = append(w.key[:0], id...)
	v, err := w.get(wJobs, w.key)
	if err != nil {
		return nil, nil, "", err
	}
	if v == nil {
		return nil, nil, "", gmailrelay.ErrNotFound
	}
	var j gmailrelay.Job
	seqs, err := decodeJobRecord(v, &j)
	if err != nil {
		return nil, nil, "", &DamageError{What: "job " + id, Err: err}
	}
	return &j, v, seqs, nil
}

// putJob stores j, with seqs (a seqList's bytes) as the seqs of its lines,
// in place of cur (nil when new; old is its stored body), moving the index
// entries whose key changes and adding its counter deltas to counts. An
// index entry whose key stays, the counters of an unchanged state and
// channel, and a record that encodes to the stored bytes are not written
// again.
func putJob(w *writeTx, cur *gmailrelay.Job, old []byte, j *gmailrelay.Job, seqs []byte, counts map[string]int64) error {
	for i := range numIndexes {
		var hadOld, hasNew bool
		if cur != nil {
			w.old, hadOld = appendIndexKey(w.old[:0], i, cur)
		}
		w.key, hasNew = appendIndexKey(w.key[:0], i, j)
		if hadOld && hasNew && string(w.old) == string(w.key) {
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
		if !skipFoldIndex {
			if err := indexFold(w, j); err != nil {
				return err
			}
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
	v := encodeJob(j, seqs)
	if old != nil && string(old) == string(v) {
		return nil
	}
	w.key = append(w.key[:0], j.MessageID...)
	if err := w.put(wJobs, w.key, v); err != nil {
		return fmt.Errorf("put job %s: %w", j.MessageID, err)
	}
	return nil
}

// putRaw stores a job's message unless the same bytes are stored.
func (w *writeTx) putRaw(id string, raw []byte) error {
	w.key = append(w.key[:0], id...)
	v, err := w.get(wBodies, w.key)
	if err != nil {
		return err
	}
	if v != nil && string(v) == string(raw) {
		return nil
	}
	return w.put(wBodies, w.key, raw)
}

// getMailbox reads a mailbox's record; the zero Mailbox{Name: name} when
// the log knows nothing about it.
func (w *writeTx) getMailbox(name string) (gmailrelay.Mailbox, error) {
	w.key = append(w.key[:0], name...)
	v, err := w.get(wMailboxes, w.key)
	if err != nil {
		return gmailrelay.Mailbox{}, err
	}
	return decodeMailbox(name, v)
}

// putMailbox stores mb unless it encodes to the stored bytes.
func (w *writeTx) putMailbox(mb *gmailrelay.Mailbox) error {
	v, err := json.Marshal(mb)
	if err != nil {
		return fmt.Errorf("encode mailbox: %w", err)
	}
	w.key = append(w.key[:0], mb.Name...)
	old, err := w.get(wMailboxes, w.key)
	if err != nil {
		return err
	}
	if old != nil && string(old) == string(v) {
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
		v, err := w.get(wCounters, w.key)
		if err != nil {
			return err
		}
		if v != nil {
			if n, err = decodeCount(v); err != nil {
				return &DamageError{What: "counter " + k, Err: err}
			}
		}
		n += d
		if n == 0 {
			err = w.delete(wCounters, w.key)
		} else {
			err = w.put(wCounters, w.key, binary.BigEndian.AppendUint64(nil, uint64(n)))
		}
		if err != nil {
			return fmt.Errorf("update counter %q: %w", k, err)
		}
	}
	return nil
}

// noFreelistSync: a commit does not write bbolt's list of free pages (one
// page or more per commit, more the more pages are free); Open rebuilds
// it by walking the file's tree instead. Durability is the same: the list
// is derived from the tree a committed meta page points to, and a commit
// still syncs its pages, then its meta page. A variable only so that
// tests can write a file with a stored free list.
var noFreelistSync = true
