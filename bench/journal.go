package bench

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
)

// JournalPrototype is a measurement, not a log: what one durable append
// costs by one writer when a bbolt commit syncs twice (data pages, then the
// meta page: the acceptance log today) against an append-only journal
// written and fsynced once per append (fsync, as the raw loop), with the same bbolt commit made
// without syncing beside it and the bbolt file synced only at a checkpoint
// every checkpointEvery appends (then the journal is emptied). Both sides
// write the same keys into the same buckets as a new job's first Mutate
// (a job record, two lines, two job-line keys, a state key, counters); the
// three are measured in interleaved rounds with the raw write+fsync loop.
//
// Figures: raw_fsyncs/s, bbolt_synced/s and journal/s (appends per second),
// bbolt_ratio_vs_raw and journal_ratio_vs_raw, journal_syncs/append (the
// journal's fdatasyncs and the checkpoints' syncs per append).
//
// It is not crash-safe as built and is not the product: with bbolt's
// NoSync the meta page may reach the disk before the pages it points to,
// and bbolt may reuse a page freed since the last checkpoint, so after a
// crash the bbolt file could not be trusted and would have to be rebuilt
// from the last checkpoint's copy plus the journal (see docs/benchmarks.md).
func JournalPrototype(dir string, n, checkpointEvery int) (Metrics, error) {
	if n < 1 || checkpointEvery < 1 {
		return nil, fmt.Errorf("journal prototype: n and checkpointEvery must be positive")
	}
	a, err := newRawAppender(dir)
	if err != nil {
		return nil, err
	}
	defer a.close()
	synced, err := openProtoDB(filepath.Join(dir, "proto-synced.db"), false)
	if err != nil {
		return nil, err
	}
	defer synced.Close()
	unsynced, err := openProtoDB(filepath.Join(dir, "proto-journaled.db"), true)
	if err != nil {
		return nil, err
	}
	defer unsynced.Close()
	j, err := os.OpenFile(filepath.Join(dir, "proto.journal"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("journal prototype: %w", err)
	}
	defer j.Close()

	var rawT, syncedT, journalT time.Duration
	syncs, done, sinceCheckpoint := 0, 0, 0
	var joff int64
	for r := range durableRounds {
		k := (n*(r+1))/durableRounds - done
		t, err := a.run(k, false)
		if err != nil {
			return nil, err
		}
		rawT += t

		start := time.Now()
		for i := range k {
			if err := synced.Update(protoMutate(done + i)); err != nil {
				return nil, err
			}
		}
		syncedT += time.Since(start)

		start = time.Now()
		for i := range k {
			rec := protoRecord(done + i)
			if _, err := j.WriteAt(rec, joff); err != nil {
				return nil, fmt.Errorf("journal prototype: write: %w", err)
			}
			joff += int64(len(rec))
			if err := syncFile(j); err != nil {
				return nil, err
			}
			syncs++
			// Durable from here: the caller could be answered.
			if err := unsynced.Update(protoMutate(done + i)); err != nil {
				return nil, err
			}
			if sinceCheckpoint++; sinceCheckpoint == checkpointEvery {
				if err := unsynced.Sync(); err != nil {
					return nil, fmt.Errorf("journal prototype: checkpoint: %w", err)
				}
				if err := j.Truncate(0); err != nil {
					return nil, fmt.Errorf("journal prototype: checkpoint: %w", err)
				}
				if err := syncFile(j); err != nil {
					return nil, err
				}
				syncs += 2
				sinceCheckpoint, joff = 0, 0
			}
		}
		journalT += time.Since(start)
		done += k
	}
	raw, bb, jr := rate(n, rawT), rate(n, syncedT), rate(n, journalT)
	return Metrics{
		"raw_fsyncs/s":          raw,
		"bbolt_synced/s":        bb,
		"journal/s":             jr,
		"bbolt_ratio_vs_raw":    bb / raw,
		"journal_ratio_vs_raw":  jr / raw,
		"journal_syncs/append":  float64(syncs) / float64(n),
		"journal_checkpoint_at": float64(checkpointEvery),
	}, nil
}

var protoBuckets = []string{"jobs", "lines", "joblines", "state", "counters"}

func openProtoDB(path string, noSync bool) (*bolt.DB, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		return nil, fmt.Errorf("journal prototype: %w", err)
	}
	db.NoSync = noSync
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range protoBuckets {
			if _, err := tx.CreateBucketIfNotExists([]byte(b)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("journal prototype: %w", err)
	}
	return db, nil
}

// protoRecord is a journal record of about a first Mutate's size.
func protoRecord(i int) []byte {
	rec := make([]byte, 320)
	binary.BigEndian.PutUint64(rec, uint64(i))
	return rec
}

// protoMutate writes what a new job's first Mutate writes.
func protoMutate(i int) func(*bolt.Tx) error {
	return func(tx *bolt.Tx) error {
		id := fmt.Sprintf("<proto-%08d@%s>", i, MsgIDDomain)
		seqs := tx.Bucket([]byte("lines"))
		if err := tx.Bucket([]byte("jobs")).Put([]byte(id), make([]byte, 180)); err != nil {
			return err
		}
		for range 2 {
			seq, err := seqs.NextSequence()
			if err != nil {
				return err
			}
			k := binary.BigEndian.AppendUint64(nil, seq)
			if err := seqs.Put(k, make([]byte, 90)); err != nil {
				return err
			}
			if err := tx.Bucket([]byte("joblines")).Put(append([]byte(id+"\x00"), k...), nil); err != nil {
				return err
			}
		}
		if err := tx.Bucket([]byte("state")).Put([]byte("forwarding\x00"+id), nil); err != nil {
			return err
		}
		c := tx.Bucket([]byte("counters"))
		for _, k := range []string{"jobs", "state:forwarding", "kind:received", "kind:forwarding"} {
			if err := c.Put([]byte(k), binary.BigEndian.AppendUint64(nil, uint64(i))); err != nil {
				return err
			}
		}
		return nil
	}
}

func syncFile(f *os.File) error {
	if err := f.Sync(); err != nil {
		return fmt.Errorf("journal prototype: sync: %w", err)
	}
	return nil
}
