package acceptlog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// The bbolt file's identity (identity.go) and key index.
var (
	// "identity" → the JSON IdentityRecord; no other key yet.
	bucketMeta = []byte("meta")
	// job key → the Message-ID of the job created with it, for every job
	// whose key is not its own Message-ID (a raw message sent without a
	// key is keyed by its Message-ID, which Get finds). The first job of a
	// key keeps the entry.
	bucketKeys = []byte("keys")
)

var metaIdentity = []byte("identity")

// openIdentity is Open's step for the identity and the key index, run
// first in Open's synced transaction (so a refusal writes nothing): a file
// without the key index (new, or written before it existed) gets it,
// filled from its jobs; then the configured identity is checked against
// the stored one (CheckIdentity). note, when not empty, is what to tell
// the operator once the transaction has committed.
func (l *Log) openIdentity(tx *bolt.Tx) (note string, err error) {
	older := tx.Bucket(bucketJobs) != nil
	if tx.Bucket(bucketKeys) == nil {
		keys, err := tx.CreateBucket(bucketKeys)
		if err != nil {
			return "", fmt.Errorf("create bucket %s: %w", bucketKeys, err)
		}
		if older {
			n, err := backfillKeys(tx.Bucket(bucketJobs), keys)
			if err != nil {
				return "", fmt.Errorf("fill the key index: %w", err)
			}
			note = fmt.Sprintf("acceptlog: %s: the key index was created and filled with the keys of %d jobs", l.path, n)
		}
	}
	meta, err := tx.CreateBucketIfNotExists(bucketMeta)
	if err != nil {
		return "", fmt.Errorf("create bucket %s: %w", bucketMeta, err)
	}
	stored, err := decodeIdentity(meta.Get(metaIdentity))
	if err != nil {
		return "", err
	}
	rec, err := CheckIdentity(stored, l.identity, l.now())
	if err != nil || rec == nil {
		return note, err
	}
	if err := putIdentity(meta, rec); err != nil {
		return "", err
	}
	if older {
		note = joinNotes(note, fmt.Sprintf("acceptlog: %s had no identity; it now remembers %s, and a relay configured otherwise refuses it (gmailrelay rekey changes it on purpose)", l.path, rec.Identity))
	}
	return note, nil
}

func joinNotes(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

func putIdentity(meta *bolt.Bucket, rec *IdentityRecord) error {
	v, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("encode the log's identity: %w", err)
	}
	if err := meta.Put(metaIdentity, v); err != nil {
		return fmt.Errorf("put the log's identity: %w", err)
	}
	return nil
}

// backfillKeys fills the key index of a file written before it existed.
// Two jobs of one key (a configuration changed by hand, before identities
// were kept) leave the entry to the one created first, whose Message-ID
// the key's earliest sends carried.
func backfillKeys(jobs, keys *bolt.Bucket) (int, error) {
	created := map[string]time.Time{}
	n := 0
	err := jobs.ForEach(func(k, v []byte) error {
		var j Job
		if err := decodeJob(v, &j); err != nil {
			return fmt.Errorf("decode job %s: %w", k, err)
		}
		if !keyIndexed(&j) {
			return nil
		}
		if at, ok := created[j.Key]; ok && !j.CreatedAt.Before(at) {
			return nil
		}
		created[j.Key] = j.CreatedAt
		n++
		return keys.Put([]byte(j.Key), []byte(j.MessageID))
	})
	return n, err
}

// keyIndexed reports whether j has an entry in the key index.
func keyIndexed(j *Job) bool { return j.Key != "" && j.Key != j.MessageID }

// indexKey adds new job j's entry to the key index (putJob calls it for
// a job it creates) unless its key already has one.
func indexKey(w *writeTx, j *Job) error {
	if !keyIndexed(j) {
		return nil
	}
	w.key = append(w.key[:0], j.Key...)
	if w.get(wKeys, w.key) != nil {
		return nil
	}
	if err := w.put(wKeys, w.key, []byte(j.MessageID)); err != nil {
		return fmt.Errorf("index key of %s: %w", j.MessageID, err)
	}
	return nil
}

// JobByKey returns the job created with key, whatever identity the log
// had then, or an error wrapping ErrNotFound when there is none.
func (l *Log) JobByKey(ctx context.Context, key string) (Job, error) {
	var j Job
	err := l.view(ctx, "job by key", func(tx *bolt.Tx) error {
		id := []byte(key)
		if keys := tx.Bucket(bucketKeys); keys != nil {
			if v := keys.Get(id); v != nil {
				id = v
			}
		}
		v := tx.Bucket(bucketJobs).Get(id)
		if v == nil {
			return ErrNotFound
		}
		if err := decodeJob(v, &j); err != nil {
			return fmt.Errorf("decode job %s: %w", id, err)
		}
		if j.Key != key {
			return ErrNotFound // a job whose Message-ID is the key, of another key
		}
		return nil
	})
	return j, err
}

// StoredIdentity returns the log's identity record, nil when it has none.
func (l *Log) StoredIdentity(ctx context.Context) (*IdentityRecord, error) {
	var rec *IdentityRecord
	err := l.view(ctx, "identity", func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		if meta == nil {
			return nil
		}
		var err error
		rec, err = decodeIdentity(meta.Get(metaIdentity))
		return err
	})
	return rec, err
}

// Rekey records next as the identity of the log file at path, which no
// relay may have open (Rekeyed: the replaced identity joins Previous).
// Jobs keep their Message-IDs; the front door finds them by key. It
// returns the record before (nil when the file had none) and after, and
// whether anything changed. It never creates a file nor makes one a log:
// a missing, empty or non-bbolt file, or a bbolt file without the log's
// buckets, is refused; a file a relay holds is an error wrapping
// ErrLocked (after about a second).
func Rekey(path string, next Identity, now time.Time) (before *IdentityRecord, after IdentityRecord, changed bool, err error) {
	if err := next.Validate(); err != nil {
		return nil, IdentityRecord{}, false, err
	}
	if err := checkLogFile(path); err != nil {
		return nil, IdentityRecord{}, false, fmt.Errorf("%s: %w", path, err)
	}
	if _, err := os.Stat(journalPath(path)); err != nil {
		// No journal: look before Open, which would give any bbolt file
		// the log's buckets. (A journal is a gmailrelay's own, and Open
		// replays it first.)
		if err := peekLog(path); err != nil {
			return nil, IdentityRecord{}, false, err
		}
	}
	// Synced: the rekey's one commit is durable when Close returns.
	l, err := Open(path, Options{Synced: true, Now: func() time.Time { return now }})
	if errors.Is(err, berrors.ErrTimeout) {
		return nil, IdentityRecord{}, false, fmt.Errorf("%s: %w (stop the relay first)", path, ErrLocked)
	}
	if err != nil {
		return nil, IdentityRecord{}, false, err
	}
	err = l.db.Update(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		var err error
		if before, err = decodeIdentity(meta.Get(metaIdentity)); err != nil {
			return err
		}
		if after, changed, err = Rekeyed(before, next, now); err != nil || !changed {
			return err
		}
		return putIdentity(meta, &after)
	})
	if cerr := l.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, IdentityRecord{}, false, fmt.Errorf("rekey %s: %w", path, err)
	}
	return before, after, changed, nil
}

// peekLog refuses, without writing, a bbolt file at path that is not a
// log (no jobs or lines bucket), and one a relay holds (ErrLocked).
func peekLog(path string) error {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: lockTimeout, ReadOnly: true})
	if errors.Is(err, berrors.ErrTimeout) {
		return fmt.Errorf("%s: %w (stop the relay first)", path, ErrLocked)
	}
	if err != nil {
		return fmt.Errorf("%s: not a gmailrelay log (%w)", path, err)
	}
	defer db.Close()
	return guard("open log "+path, func() error {
		return db.View(func(tx *bolt.Tx) error {
			if tx.Bucket(bucketJobs) == nil || tx.Bucket(bucketLines) == nil {
				return fmt.Errorf("%s: not a gmailrelay log (a bbolt file without its jobs and lines)", path)
			}
			return nil
		})
	})
}
