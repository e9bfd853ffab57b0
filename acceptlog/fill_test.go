package acceptlog

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/gmailrelay/gmailrelay"
	bolt "go.etcd.io/bbolt"
)

// TestAppendBucketsFillLeaves: the lines bucket, whose keys only ever
// append, splits its right-edge leaf full (appendBuckets) rather than at
// bbolt's default half, so its leaves end up nearly full.
func TestAppendBucketsFillLeaves(t *testing.T) {
	l, err := Open(filepath.Join(t.TempDir(), "accept.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	for i := range 2000 {
		id := fmt.Sprintf("<%d@fill>", i)
		_, _, err := l.Mutate(ctx, id, func(*gmailrelay.Job) (gmailrelay.Change, error) {
			return gmailrelay.Change{Job: &gmailrelay.Job{MessageID: id, Channel: "c", State: gmailrelay.StateForwarding, Attempts: 1},
				Lines: []gmailrelay.Line{{Kind: gmailrelay.KindReceived}, {Kind: gmailrelay.KindForwarding, Attempt: 1, State: gmailrelay.StateForwarding}}}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	err = l.db.View(func(tx *bolt.Tx) error {
		st := tx.Bucket(bucketLines).Stats()
		if st.LeafPageN < 10 {
			return fmt.Errorf("lines bucket has %d leaf pages, want a tree of 10 or more", st.LeafPageN)
		}
		fill := float64(st.LeafInuse) / float64(st.LeafPageN*l.db.Info().PageSize)
		// bbolt's default split (FillPercent 0.5) leaves about half.
		if fill < 0.85 {
			return fmt.Errorf("lines leaves are %.0f%% full (%d pages), want at least 85%%", 100*fill, st.LeafPageN)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}
