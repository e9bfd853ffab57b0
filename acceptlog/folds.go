package acceptlog

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"strconv"

	"github.com/gmailrelay/gmailrelay"
	bolt "go.etcd.io/bbolt"
)

// Job identity ignores ASCII case in the Message-ID, as Gmail's search
// does: a job whose Message-ID differs from an existing job's only in the
// case of ASCII letters is refused (CaseTwinError), since a search for
// one would answer for the other. Jobs keep their Message-IDs as stored;
// only a new job is compared, through the fold index.
var (
	// FoldMessageID(message id) → the Message-ID of the job that holds
	// it, or nothing when that is the fold itself (a Message-ID without
	// capitals, as every derived one with a lower-case domain: the value
	// would repeat the key, some 50 bytes a job). Every job's fold has an
	// entry. Case twins stored before the index existed (format 2) share
	// one: the twin that sorts first (bytewise) holds it.
	bucketFolds = []byte("folds")
)

// foldValue is the fold index's value for fold held by job id.
func foldValue(fold, id string) []byte {
	if id == fold {
		return []byte{}
	}
	return []byte(id)
}

// foldHolder is the Message-ID of the job an entry of the fold index
// names, given its key and its value's body.
func foldHolder(fold, body []byte) string {
	if len(body) == 0 {
		return string(fold)
	}
	return string(body)
}

// caseTwin returns the error for a new job id when another job holds its
// fold, nil when none does.
func caseTwin(w *writeTx, id string) error {
	w.key = append(w.key[:0], gmailrelay.FoldMessageID(id)...)
	v, err := w.get(wFolds, w.key)
	if err != nil || v == nil {
		return err
	}
	if holder := foldHolder(w.key, v); holder != id {
		return &gmailrelay.CaseTwinError{MessageID: id, Existing: holder}
	}
	return nil
}

// indexFold adds new job j's entry to the fold index (putJob calls it for
// a job it creates, which caseTwin has let through).
func indexFold(w *writeTx, j *gmailrelay.Job) error {
	fold := gmailrelay.FoldMessageID(j.MessageID)
	w.key = append(w.key[:0], fold...)
	v, err := w.get(wFolds, w.key)
	if err != nil || v != nil {
		return err
	}
	if err := w.put(wFolds, w.key, foldValue(fold, j.MessageID)); err != nil {
		return fmt.Errorf("index fold of %s: %w", j.MessageID, err)
	}
	return nil
}

// wantFolds is the fold index the jobs of tx imply: each fold's holder is
// the first job (bytewise) that has it.
func wantFolds(tx *bolt.Tx) (map[string]string, error) {
	want := map[string]string{}
	err := tx.Bucket(bucketJobs).ForEach(func(k, _ []byte) error {
		f := gmailrelay.FoldMessageID(string(k))
		if _, ok := want[f]; !ok {
			want[f] = string(k)
		}
		return nil
	})
	return want, err
}

// fillFolds fills the empty fold index of tx from its jobs and returns
// how many entries it made; sealed tells whether values carry their
// checksum (a format-2 file) or are sealed later (migrateLegacy).
func fillFolds(tx *bolt.Tx, sealedValues bool) (int, error) {
	want, err := wantFolds(tx)
	if err != nil {
		return 0, err
	}
	b := tx.Bucket(bucketFolds)
	for f, id := range want {
		v := foldValue(f, id)
		if sealedValues {
			v = sealed(bucketFolds, []byte(f), v)
		}
		if err := b.Put([]byte(f), v); err != nil {
			return 0, err
		}
	}
	return len(want), nil
}

// skipFoldIndex makes Mutate neither check nor maintain the fold index,
// as a gmailrelay of format 2 wrote; only tests set it, to write the case
// twins such a version let through.
var skipFoldIndex = false

// formatFolds is the first format whose files hold the fold index.
const formatFolds = 3

// upgradeToFolds converts a file of format 2 (sealed, without the fold
// index) to format 3: it builds the fold index from the jobs, counts it
// in the meta bucket and records the format. Jobs are not rewritten. It
// runs in Open's transaction: a crash leaves the file as it was.
func upgradeToFolds(tx *bolt.Tx) (string, error) {
	if tx.Bucket(bucketFolds) != nil {
		if err := tx.DeleteBucket(bucketFolds); err != nil {
			return "", err
		}
	}
	if _, err := tx.CreateBucket(bucketFolds); err != nil {
		return "", fmt.Errorf("create bucket %s: %w", bucketFolds, err)
	}
	n, err := fillFolds(tx, true)
	if err != nil {
		return "", fmt.Errorf("fill the fold index: %w", err)
	}
	if err := setRecordCount(tx, bucketFolds, int64(n)); err != nil {
		return "", err
	}
	if err := putMetaValue(tx, metaFormat, []byte(strconv.Itoa(formatVersion))); err != nil {
		return "", err
	}
	return fmt.Sprintf("the fold index (job identity ignores case in Message-IDs) was created with %d entries (format %d; an older gmailrelay must not write the file again)", n, formatVersion), nil
}

// checkFolds reports the fold index's differences from what the jobs
// imply: a missing, stray or wrong entry. A file without the index (format
// 2, read by check before a relay upgraded it) has nothing to compare.
func checkFolds(tx *bolt.Tx, v *violations) error {
	b := tx.Bucket(bucketFolds)
	if b == nil {
		return nil
	}
	want, err := wantFolds(tx)
	if err != nil {
		return err
	}
	err = b.ForEach(func(k, val []byte) error {
		body, err := unseal(bucketFolds, k, val)
		if err != nil {
			v.add("%s", (&DamageError{What: describeRecord(bucketFolds, k), Err: err}).Error())
			return nil
		}
		holder, ok := want[string(k)]
		switch {
		case !ok:
			v.add("folds index: stray entry %s (no job has that Message-ID in any case)", printable(k))
		case !bytes.Equal(body, foldValue(string(k), holder)):
			v.add("folds index: entry %s names %s, want %s", printable(k), printable([]byte(foldHolder(k, body))), holder)
		}
		delete(want, string(k))
		return nil
	})
	if err != nil {
		return err
	}
	for _, f := range slices.Sorted(maps.Keys(want)) {
		v.add("folds index: missing entry %s (job %s)", f, want[f])
	}
	return nil
}
