package acceptlog

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/gmailrelay/gmailrelay"
	bolt "go.etcd.io/bbolt"
)

// Tamper opens the log file at path (no relay may hold it) and runs fn in
// one write transaction with a Tamperer: writes behind the log's back
// that keep every record sealed and counted, so that the file still reads
// as undamaged. It is for tests that plant violations of the log's rules
// (a job in the wrong index, a line missing) for Check to find; the relay
// never calls it.
func Tamper(path string, fn func(t *Tamperer) error) error {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: lockTimeout, NoFreelistSync: noFreelistSync})
	if err != nil {
		return fmt.Errorf("tamper with %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		w := newWriteTx(tx)
		if err := fn(&Tamperer{w: w}); err != nil {
			return err
		}
		// A line planted past the sequence moves it on, as Mutate would.
		lines := tx.Bucket(bucketLines)
		if k, _ := lines.Cursor().Last(); len(k) == 8 && binary.BigEndian.Uint64(k) > lines.Sequence() {
			if err := lines.SetSequence(binary.BigEndian.Uint64(k)); err != nil {
				return err
			}
		}
		return w.flush()
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	return err
}

// Tamperer writes a log's records directly (see Tamper). Buckets are
// named as stored: "jobs", "lines", "state", "bodies", "counters", …
type Tamperer struct{ w *writeTx }

func (t *Tamperer) bucket(name string) (int, error) {
	i := slices.IndexFunc(writeBucketNames[:], func(b []byte) bool { return string(b) == name })
	if i < 0 {
		return 0, fmt.Errorf("tamper: no bucket %q", name)
	}
	return i, nil
}

// Get returns the body stored under key in bucket (nil when absent).
func (t *Tamperer) Get(bucket string, key []byte) ([]byte, error) {
	b, err := t.bucket(bucket)
	if err != nil {
		return nil, err
	}
	return t.w.get(b, key)
}

// Put stores body under key in bucket, sealed and counted.
func (t *Tamperer) Put(bucket string, key, body []byte) error {
	b, err := t.bucket(bucket)
	if err != nil {
		return err
	}
	return t.w.put(b, key, body)
}

// Delete removes key from bucket, counted.
func (t *Tamperer) Delete(bucket string, key []byte) error {
	b, err := t.bucket(bucket)
	if err != nil {
		return err
	}
	return t.w.delete(b, key)
}

// EditJob rewrites the job id: edit changes the job and returns the seqs
// of its lines its record is to list (given the stored ones). Nothing else
// (indexes, counters) follows.
func (t *Tamperer) EditJob(id string, edit func(j *gmailrelay.Job, seqs []uint64) []uint64) error {
	v, err := t.Get("jobs", []byte(id))
	if err != nil {
		return err
	}
	if v == nil {
		return fmt.Errorf("tamper: no job %s", id)
	}
	var j gmailrelay.Job
	list, err := decodeJobRecord(v, &j)
	if err != nil {
		return err
	}
	seqs, err := list.seqs()
	if err != nil {
		return err
	}
	seqs = edit(&j, seqs)
	return t.Put("jobs", []byte(id), encodeJob(&j, encodeSeqs(seqs)))
}
