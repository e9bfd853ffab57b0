package acceptlog

import (
	"context"

	bolt "go.etcd.io/bbolt"

	"github.com/gmailrelay/gmailrelay"
)

// get is Get: the job record of id, decoded.
func (l *Log) get(ctx context.Context, id string) (gmailrelay.Job, error) {
	var j gmailrelay.Job
	err := l.view(ctx, "get "+id, func(tx *bolt.Tx) error {
		key := []byte(id)
		v := tx.Bucket(bucketJobs).Get(key)
		if v == nil {
			return gmailrelay.ErrNotFound
		}
		return decodeJobValue(key, v, &j)
	})
	if err != nil {
		return gmailrelay.Job{}, err
	}
	return j, nil
}
