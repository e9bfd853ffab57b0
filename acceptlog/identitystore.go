package acceptlog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/gmailrelay/gmailrelay"
	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// The bbolt file's identity (identity.go) and key index.
var (
	// job key → the Message-ID of the job created with it, for every job
	// whose key is not its own Message-ID (a raw message sent without a
	// key is keyed by its Message-ID, which Get finds). The first job of a
	// key keeps the entry.
	bucketKeys = []byte("keys")
	// metaIdentity is the meta bucket's key of the JSON IdentityRecord.
	metaIdentity = []byte("identity")
)

// checkIdentity compares the configured identity with the one stored in
// the file tx reads (CheckIdentity) and returns the record to store (nil:
// nothing to store), or an error wrapping ErrIdentityMismatch.
func (l *Log) checkIdentity(tx *bolt.Tx) (*gmailrelay.IdentityRecord, error) {
	v, err := readMetaValue(tx, metaIdentity)
	if err != nil {
		return nil, err
	}
	stored, err := decodeIdentity(v)
	if err != nil {
		return nil, err
	}
	return gmailrelay.CheckIdentity(stored, l.identity, l.now())
}

func putIdentity(tx *bolt.Tx, rec *gmailrelay.IdentityRecord) error {
	v, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("encode the log's identity: %w", err)
	}
	if err := putMetaValue(tx, metaIdentity, v); err != nil {
		return fmt.Errorf("put the log's identity: %w", err)
	}
	return nil
}

// backfillKeys fills the key index of a file written before it existed
// (migrateLegacy; values as that format stores them, sealed after).
// Two jobs of one key (a configuration changed by hand, before identities
// were kept) leave the entry to the one created first, whose Message-ID
// the key's earliest sends carried.
func backfillKeys(jobs, keys *bolt.Bucket) (int, error) {
	created := map[string]time.Time{}
	n := 0
	err := jobs.ForEach(func(k, v []byte) error {
		var j gmailrelay.Job
		if err := decodeJob(v, &j); err != nil {
			return fmt.Errorf("decode job %s: %w", k, err)
		}
		if !keyIndexed(&j) {
			return nil
		}
		at, seen := created[j.Key]
		if seen && !j.CreatedAt.Before(at) {
			return nil
		}
		if !seen {
			n++
		}
		created[j.Key] = j.CreatedAt
		return keys.Put([]byte(j.Key), []byte(j.MessageID))
	})
	return n, err
}

// keyIndexed reports whether j has an entry in the key index.
func keyIndexed(j *gmailrelay.Job) bool { return j.Key != "" && j.Key != j.MessageID }

// indexKey adds new job j's entry to the key index (putJob calls it for
// a job it creates) unless its key already has one.
func indexKey(w *writeTx, j *gmailrelay.Job) error {
	if !keyIndexed(j) {
		return nil
	}
	w.key = append(w.key[:0], j.Key...)
	v, err := w.get(wKeys, w.key)
	if err != nil || v != nil {
		return err
	}
	if err := w.put(wKeys, w.key, []byte(j.MessageID)); err != nil {
		return fmt.Errorf("index key of %s: %w", j.MessageID, err)
	}
	return nil
}

// JobByKey returns the job created with key, whatever identity the log
// had then, or an error wrapping ErrNotFound when there is none.
func (l *Log) JobByKey(ctx context.Context, key string) (gmailrelay.Job, error) {
	var j gmailrelay.Job
	err := l.view(ctx, "job by key", func(tx *bolt.Tx) error {
		id := []byte(key)
		v, err := readRecord(bucketKeys, tx.Bucket(bucketKeys).Get, id)
		if err != nil {
			return err
		}
		if v != nil {
			id = v
		}
		job, err := getJob(tx, string(id))
		if err != nil {
			return err
		}
		if job.Key != key {
			return gmailrelay.ErrNotFound // a job whose Message-ID is the key, of another key
		}
		j = *job
		return nil
	})
	return j, err
}

// StoredIdentity returns the log's identity record, nil when it has none.
func (l *Log) StoredIdentity(ctx context.Context) (*gmailrelay.IdentityRecord, error) {
	var rec *gmailrelay.IdentityRecord
	err := l.view(ctx, "identity", func(tx *bolt.Tx) error {
		v, err := readMetaValue(tx, metaIdentity)
		if err == nil {
			rec, err = decodeIdentity(v)
		}
		return err
	})
	return rec, err
}

// Rekey records next as the identity of the log file at path, which no
// relay may have open (Rekeyed: the replaced identity joins Previous).
// Jobs keep their Message-IDs; the front door finds them by key. It
// returns the record before (nil when the file had none) and after, and
// whether anything changed. It never creates a file nor makes one a log:
// a missing file, or one Open refuses, is refused; a file a relay holds is
// an error wrapping ErrLocked (after about a second).
func Rekey(path string, next gmailrelay.Identity, now time.Time) (before *gmailrelay.IdentityRecord, after gmailrelay.IdentityRecord, changed bool, err error) {
	if err := next.Validate(); err != nil {
		return nil, gmailrelay.IdentityRecord{}, false, err
	}
	if _, err := os.Stat(path); err != nil {
		return nil, gmailrelay.IdentityRecord{}, false, fmt.Errorf("%s: %w (%v)", path, ErrNotALog, err)
	}
	l, err := Open(path, Options{Now: func() time.Time { return now }})
	if errors.Is(err, berrors.ErrTimeout) {
		return nil, gmailrelay.IdentityRecord{}, false, fmt.Errorf("%s: %w (stop the relay first)", path, gmailrelay.ErrLocked)
	}
	if err != nil {
		return nil, gmailrelay.IdentityRecord{}, false, err
	}
	err = l.db.Update(func(tx *bolt.Tx) error {
		v, err := readMetaValue(tx, metaIdentity)
		if err != nil {
			return err
		}
		if before, err = decodeIdentity(v); err != nil {
			return err
		}
		if after, changed, err = gmailrelay.Rekeyed(before, next, now); err != nil || !changed {
			return err
		}
		return putIdentity(tx, &after)
	})
	if cerr := l.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, gmailrelay.IdentityRecord{}, false, fmt.Errorf("rekey %s: %w", path, err)
	}
	return before, after, changed, nil
}

func decodeIdentity(v []byte) (*gmailrelay.IdentityRecord, error) {
	if v == nil {
		return nil, nil
	}
	var r gmailrelay.IdentityRecord
	if err := json.Unmarshal(v, &r); err != nil {
		return nil, fmt.Errorf("decode the log's identity: %w", err)
	}
	return &r, nil
}
