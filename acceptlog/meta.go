package acceptlog

import (
	"encoding/binary"
	"fmt"
	"strconv"

	bolt "go.etcd.io/bbolt"
)

// bucketMeta holds what the log knows about itself, each value sealed
// like every record: "format" (formatVersion, decimal), and per bucket
// "records/NAME", the number of records the bucket holds (8 bytes,
// big-endian). Open compares the counts with what it finds, so a record
// that a damaged page hides is missed, not silently forgotten.
var bucketMeta = []byte("meta")

// formatVersion is the file format this gmailrelay writes: every record
// sealed with its checksum, and the meta bucket (format 2), and the fold
// index (format 3, folds.go). A file without a meta bucket is older
// (format 1) and is converted at Open (migrate.go); one of format 2 gets
// its fold index at Open (upgradeToFolds). A file of a later format is
// refused: this version would not keep its newer indexes.
const formatVersion = formatFolds

var metaFormat = []byte("format")

// recordCountKey is the meta key of a bucket's record count.
func recordCountKey(bucket []byte) []byte { return append([]byte("records/"), bucket...) }

// countedBuckets are the buckets whose records the meta bucket counts:
// every bucket of the log but meta itself.
var countedBuckets = allBuckets

// readMeta returns the body of the meta value key (nil when absent).
func readMetaValue(tx *bolt.Tx, key []byte) ([]byte, error) {
	b := tx.Bucket(bucketMeta)
	if b == nil {
		return nil, nil
	}
	return readRecord(bucketMeta, b.Get, key)
}

// putMetaValue stores body under the meta key key.
func putMetaValue(tx *bolt.Tx, key, body []byte) error {
	return tx.Bucket(bucketMeta).Put(key, sealed(bucketMeta, key, body))
}

// recordCount returns the stored record count of bucket.
func recordCount(tx *bolt.Tx, bucket []byte) (int64, error) {
	key := recordCountKey(bucket)
	v, err := readMetaValue(tx, key)
	if err != nil {
		return 0, err
	}
	if v == nil {
		return 0, &DamageError{What: describeRecord(bucketMeta, key), Err: fmt.Errorf("missing")}
	}
	if len(v) != 8 {
		return 0, &DamageError{What: describeRecord(bucketMeta, key), Err: fmt.Errorf("%d bytes, want 8", len(v))}
	}
	return int64(binary.BigEndian.Uint64(v)), nil
}

// setRecordCount stores bucket's record count.
func setRecordCount(tx *bolt.Tx, bucket []byte, n int64) error {
	return putMetaValue(tx, recordCountKey(bucket), binary.BigEndian.AppendUint64(nil, uint64(n)))
}

// addRecordCount adds d to bucket's record count.
func addRecordCount(tx *bolt.Tx, bucket []byte, d int64) error {
	n, err := recordCount(tx, bucket)
	if err != nil {
		return err
	}
	if n+d < 0 {
		return &DamageError{What: describeRecord(bucketMeta, recordCountKey(bucket)),
			Err: fmt.Errorf("count %d would go below zero", n)}
	}
	return setRecordCount(tx, bucket, n+d)
}

// initMeta creates the meta bucket of a file whose every record is sealed,
// with the format and the record counts of what the buckets hold.
func initMeta(tx *bolt.Tx) error {
	if _, err := tx.CreateBucketIfNotExists(bucketMeta); err != nil {
		return fmt.Errorf("create bucket %s: %w", bucketMeta, err)
	}
	if err := putMetaValue(tx, metaFormat, []byte(strconv.Itoa(formatVersion))); err != nil {
		return err
	}
	for _, name := range countedBuckets {
		// Counted by a cursor: Bucket.Stats reads the committed pages,
		// not this transaction's changes.
		n := int64(0)
		c := tx.Bucket(name).Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			n++
		}
		if err := setRecordCount(tx, name, n); err != nil {
			return err
		}
	}
	return nil
}
