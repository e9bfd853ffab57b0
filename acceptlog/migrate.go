package acceptlog

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/gmailrelay/gmailrelay"
	bolt "go.etcd.io/bbolt"
)

// migrateJobLines converts a file an older gmailrelay wrote, which kept a
// job's lines in the job-lines index (bucketJobLinesV1), to job
// records that list their lines' seqs, and deletes the index; it returns
// how many job records it rewrote (0 and nothing done when the file has no
// index). It runs inside Open's synced transaction: a crash leaves the file
// as it was, and the next Open converts it again.
//
// The seqs are taken from the lines bucket, not from the index: every line
// names its job, so the records come out right even when the index is not
// (a file an older gmailrelay reopened after this one had migrated it:
// that one created the index again, empty, and filled it for its new lines
// only). Every job record is rewritten in the binary form, a
// JSON one (from an older gmailrelay) included: JSON records hold no seqs.
// It holds every line's seq in memory (a few tens of bytes per line) and
// every job record it rewrites in the transaction, once.
func migrateJobLines(tx *bolt.Tx) (int, error) {
	if tx.Bucket(bucketJobLinesV1) == nil {
		return 0, nil
	}
	byJob := map[string][]uint64{}
	err := tx.Bucket(bucketLines).ForEach(func(k, v []byte) error {
		if len(k) != 8 {
			return fmt.Errorf("line key %x is not a seq", k)
		}
		var ln gmailrelay.Line
		if err := decodeLine(v, &ln); err != nil {
			return fmt.Errorf("decode line %x: %w", k, err)
		}
		byJob[ln.MessageID] = append(byJob[ln.MessageID], binary.BigEndian.Uint64(k))
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("move the job-lines index into the jobs: %w", err)
	}
	jobs := tx.Bucket(bucketJobs)
	c := jobs.Cursor()
	n := 0
	for k, v := c.First(); k != nil; k, v = c.Next() {
		var j gmailrelay.Job
		if err := decodeJob(v, &j); err != nil {
			return 0, fmt.Errorf("move the job-lines index into the jobs: decode job %s: %w", k, err)
		}
		rec := encodeJob(&j, encodeSeqs(byJob[string(k)]))
		if bytes.Equal(rec, v) {
			continue
		}
		key := bytes.Clone(k)
		if err := jobs.Put(key, rec); err != nil {
			return 0, fmt.Errorf("move the job-lines index into the jobs: put job %s: %w", key, err)
		}
		n++
		c.Seek(key) // a Put may move the cursor's page: back to where it was
	}
	if err := tx.DeleteBucket(bucketJobLinesV1); err != nil {
		return 0, fmt.Errorf("delete the job-lines index: %w", err)
	}
	return n, nil
}

// sendsBackfillWindow is how far back backfillSendIndex looks: the 48 h
// the retention pass keeps send-index entries for (retention's
// DefaultSendsKeep), twice the daily budget's 24 h.
const sendsBackfillWindow = 48 * time.Hour

// sendsClockSlack is how far past the window's start backfillSendIndex
// goes on walking back: lines are in time order but for a clock stepped
// back, and one such line must not end the walk early.
const sendsClockSlack = time.Hour

// backfillSendIndex fills the send index (bucketSends) of a file written
// before it existed from the forwarding lines dated at or after since,
// with the entries the write path (indexSends) would have made: the
// line's time, Message-ID and attempt under its job's mailbox. Without it
// the daily sending budget would start from zero on upgrade and the relay
// could send a second day's limit on top of today's sends. Lines are keyed
// by seq, in time order: the walk goes back from the newest and stops at
// the first line older than since (less sendsClockSlack). It returns how
// many entries it added; it runs in Open's synced transaction.
func backfillSendIndex(tx *bolt.Tx, since time.Time) (int, error) {
	idx, jobs := tx.Bucket(bucketSends), tx.Bucket(bucketJobs)
	stop := since.Add(-sendsClockSlack)
	mailboxes := map[string]string{}
	var key []byte
	n := 0
	c := tx.Bucket(bucketLines).Cursor()
	for k, v := c.Last(); k != nil; k, v = c.Prev() {
		var ln gmailrelay.Line
		if err := decodeLine(v, &ln); err != nil {
			return n, fmt.Errorf("decode line %x: %w", k, err)
		}
		if ln.Time.Before(stop) {
			break
		}
		if ln.Kind != gmailrelay.KindForwarding || ln.Time.Before(since) {
			continue
		}
		mailbox, ok := mailboxes[ln.MessageID]
		if !ok {
			rec := jobs.Get([]byte(ln.MessageID))
			if rec == nil {
				// A line without its job: Check reports it; the send
				// names no mailbox to count it against.
				continue
			}
			var j gmailrelay.Job
			if err := decodeJob(rec, &j); err != nil {
				return n, fmt.Errorf("decode job %s: %w", ln.MessageID, err)
			}
			mailbox = j.Mailbox
			mailboxes[ln.MessageID] = mailbox
		}
		key = appendSendKey(key[:0], mailbox, ln.Time, ln.MessageID, ln.Attempt)
		if err := idx.Put(key, nil); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// migrateLegacy converts, inside tx, a file an older gmailrelay wrote
// (format 1: no meta bucket) to this version's format: the buckets it
// lacks are created and filled (the prunable and send indexes), the
// job-lines index is moved into the job records, every job and line is
// rewritten in recordV2 and every value sealed with its checksum, and the
// meta bucket records the format and the record counts. It returns what
// it did, for the log. One transaction: a crash leaves the file as it
// was, and the next Open converts it again.
func migrateLegacy(tx *bolt.Tx, now time.Time) ([]string, error) {
	if tx.Bucket(bucketJobs) == nil || tx.Bucket(bucketLines) == nil {
		return nil, fmt.Errorf("%w (a bbolt file without the log's buckets)", ErrNotALog)
	}
	backfill := tx.Bucket(bucketPrunable) == nil
	backfillSends := tx.Bucket(bucketSends) == nil
	backfillKeyIndex := tx.Bucket(bucketKeys) == nil
	backfillFolds := tx.Bucket(bucketFolds) == nil
	for _, name := range allBuckets {
		if _, err := tx.CreateBucketIfNotExists(name); err != nil {
			return nil, fmt.Errorf("create bucket %s: %w", name, err)
		}
	}
	var notes []string
	if backfill {
		if err := backfillPrunable(tx); err != nil {
			return nil, err
		}
		notes = append(notes, "the prunable index was created")
	}
	if backfillSends {
		n, err := backfillSendIndex(tx, now.Add(-sendsBackfillWindow))
		if err != nil {
			return nil, fmt.Errorf("fill the send index: %w", err)
		}
		notes = append(notes, fmt.Sprintf("the send index was created and filled with the %d sends of the last %s (the daily sending budget counts them)", n, sendsBackfillWindow))
	}
	if backfillKeyIndex {
		n, err := backfillKeys(tx.Bucket(bucketJobs), tx.Bucket(bucketKeys))
		if err != nil {
			return nil, fmt.Errorf("fill the key index: %w", err)
		}
		notes = append(notes, fmt.Sprintf("the key index was created and filled with the keys of %d jobs", n))
	}
	if backfillFolds {
		n, err := fillFolds(tx, false)
		if err != nil {
			return nil, fmt.Errorf("fill the fold index: %w", err)
		}
		notes = append(notes, fmt.Sprintf("the fold index (job identity ignores case in Message-IDs) was created with %d entries", n))
	}
	n, err := migrateJobLines(tx)
	if err != nil {
		return nil, err
	}
	if n > 0 {
		notes = append(notes, fmt.Sprintf("the job-lines index was moved into the %d job records", n))
	}
	records, err := sealAll(tx)
	if err != nil {
		return nil, err
	}
	if err := initMeta(tx); err != nil {
		return nil, err
	}
	return append(notes, fmt.Sprintf("its %d records were given checksums (format %d; an older gmailrelay no longer reads the file)", records, formatVersion)), nil
}

// sealAll rewrites every value of the log's buckets with its checksum,
// jobs and lines in recordV2 first; it returns how many it rewrote.
func sealAll(tx *bolt.Tx) (int, error) {
	n := 0
	for _, name := range allBuckets {
		b := tx.Bucket(name)
		type kv struct{ k, v []byte }
		var all []kv
		err := b.ForEach(func(k, v []byte) error {
			all = append(all, kv{bytes.Clone(k), bytes.Clone(v)})
			return nil
		})
		if err != nil {
			return 0, err
		}
		for _, r := range all {
			body, err := currentBody(name, r.k, r.v)
			if err != nil {
				return 0, err
			}
			if err := b.Put(r.k, sealed(name, r.k, body)); err != nil {
				return 0, err
			}
			n++
		}
	}
	return n, nil
}

// currentBody returns the body this version stores for an older value v
// under key in bucket name: jobs and lines re-encoded in recordV2, the
// rest as they are.
func currentBody(name, key, v []byte) ([]byte, error) {
	switch string(name) {
	case string(bucketJobs):
		var j gmailrelay.Job
		seqs, err := decodeJobRecord(v, &j)
		if err != nil {
			return nil, fmt.Errorf("decode job %s: %w", key, err)
		}
		return encodeJob(&j, []byte(seqs)), nil
	case string(bucketLines):
		var ln gmailrelay.Line
		if err := decodeLine(v, &ln); err != nil {
			return nil, fmt.Errorf("decode line %x: %w", key, err)
		}
		return encodeLine(&ln), nil
	}
	return v, nil
}
