package acceptlog

import (
	"bytes"

	bolt "go.etcd.io/bbolt"
)

// SetNoFreelistSync sets whether logs opened from now on skip writing
// bbolt's freelist at each commit (see noFreelistSync), and returns the
// previous setting.
func SetNoFreelistSync(v bool) bool {
	old := noFreelistSync
	noFreelistSync = v
	return old
}

// ToFormat1 rewrites the closed log at path as a gmailrelay before
// checksums wrote it (format 1): no meta bucket, every value without its
// checksum, jobs and lines in recordV1. For tests of the conversion.
func ToFormat1(path string) error {
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		return err
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, name := range allBuckets {
			b := tx.Bucket(name)
			type kv struct{ k, v []byte }
			var all []kv
			if err := b.ForEach(func(k, v []byte) error {
				body, err := unseal(name, k, v)
				if err != nil {
					return err
				}
				body = bytes.Clone(body)
				if (bytes.Equal(name, bucketJobs) || bytes.Equal(name, bucketLines)) && len(body) > 0 && body[0] == recordV2 {
					body[0] = recordV1
				}
				all = append(all, kv{bytes.Clone(k), body})
				return nil
			}); err != nil {
				return err
			}
			for _, r := range all {
				if err := b.Put(r.k, r.v); err != nil {
					return err
				}
			}
		}
		return tx.DeleteBucket(bucketMeta)
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	return err
}

// SetSkipFoldIndex sets whether Mutate neither checks nor keeps the fold
// index, as a gmailrelay of format 2 did, and returns the previous
// setting. For tests that write the case twins such a version let through.
func SetSkipFoldIndex(v bool) bool {
	old := skipFoldIndex
	skipFoldIndex = v
	return old
}

// ToFormat2 rewrites the closed log at path as a gmailrelay of format 2
// left it: no fold index, its record count gone, format 2.
func ToFormat2(path string) error {
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		return err
	}
	err = db.Update(func(tx *bolt.Tx) error {
		if err := tx.DeleteBucket(bucketFolds); err != nil {
			return err
		}
		if err := tx.Bucket(bucketMeta).Delete(recordCountKey(bucketFolds)); err != nil {
			return err
		}
		return putMetaValue(tx, metaFormat, []byte("2"))
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	return err
}

// SetFormat records format as the closed log's at path.
func SetFormat(path string, format string) error {
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		return err
	}
	err = db.Update(func(tx *bolt.Tx) error { return putMetaValue(tx, metaFormat, []byte(format)) })
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	return err
}
