package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gmailrelay/gmailrelay/acceptlog"
)

// RawFsyncRate appends 512 bytes to a file in dir and fsyncs it, n times,
// and returns the fsyncs per second: the filesystem's floor for durable
// appends by one writer.
func RawFsyncRate(dir string, n int) (float64, error) {
	f, err := os.CreateTemp(dir, "raw-fsync-*")
	if err != nil {
		return 0, fmt.Errorf("raw fsync: %w", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	buf := make([]byte, 512)
	start := time.Now()
	for range n {
		if _, err := f.Write(buf); err != nil {
			return 0, fmt.Errorf("raw fsync: write: %w", err)
		}
		if err := f.Sync(); err != nil {
			return 0, fmt.Errorf("raw fsync: %w", err)
		}
	}
	return rate(n, time.Since(start)), nil
}

// RawTwoSyncRate is RawFsyncRate with two write+fsync pairs per append, the
// second of 4 KiB at the file's start (as a bbolt commit writes its pages
// and syncs, then writes its meta page and syncs again): the floor of any
// bbolt commit on this filesystem, as appends per second.
func RawTwoSyncRate(dir string, n int) (float64, error) {
	f, err := os.CreateTemp(dir, "raw-2sync-*")
	if err != nil {
		return 0, fmt.Errorf("raw two syncs: %w", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	data, meta := make([]byte, 512), make([]byte, 4096)
	if _, err := f.WriteAt(meta, 0); err != nil {
		return 0, fmt.Errorf("raw two syncs: %w", err)
	}
	off := int64(len(meta))
	start := time.Now()
	for range n {
		if _, err := f.WriteAt(data, off); err != nil {
			return 0, fmt.Errorf("raw two syncs: write: %w", err)
		}
		off += int64(len(data))
		if err := f.Sync(); err != nil {
			return 0, fmt.Errorf("raw two syncs: %w", err)
		}
		if _, err := f.WriteAt(meta, 0); err != nil {
			return 0, fmt.Errorf("raw two syncs: write meta: %w", err)
		}
		if err := f.Sync(); err != nil {
			return 0, fmt.Errorf("raw two syncs: %w", err)
		}
	}
	return rate(n, time.Since(start)), nil
}

// DurableLog measures durable appends to a fresh acceptance log in dir: n
// Mutates by conc concurrent writers, each creating a job with two lines
// (received, forwarding: the send path's first write), next to the raw
// write+fsync rate measured just before on the same filesystem.
//
// Figures: mutates/s, lines/s, raw_fsyncs/s, ratio_vs_raw (mutates/s ÷
// raw fsyncs/s: 1 means one durable append per raw fsync), fsyncs/mutate
// (log commits per Mutate; below 1 means group commit), and, at
// concurrency 1, raw_2sync/s (RawTwoSyncRate) with ceiling_vs_raw
// (raw_2sync/s ÷ raw fsyncs/s: the best ratio_vs_raw a log that syncs
// twice per commit can reach) and ratio_vs_ceiling.
func DurableLog(ctx context.Context, dir string, conc, n int) (Metrics, error) {
	if conc < 1 || n < 1 {
		return nil, fmt.Errorf("durable log: concurrency and n must be positive")
	}
	raw, err := RawFsyncRate(dir, n)
	if err != nil {
		return nil, err
	}
	log, err := acceptlog.Open(filepath.Join(dir, fmt.Sprintf("durable-%d.db", conc)), acceptlog.Options{})
	if err != nil {
		return nil, err
	}
	defer log.Close()
	commits := log.Commits()
	start := time.Now()
	err = parallel(n, conc, func(i int) error {
		id := fmt.Sprintf("<durable-%08d@%s>", i, MsgIDDomain)
		_, _, err := log.Mutate(ctx, id, newForwardingJob(id))
		return err
	})
	took := time.Since(start)
	if err != nil {
		return nil, err
	}
	mutates := rate(n, took)
	m := Metrics{
		"mutates/s":     mutates,
		"lines/s":       2 * mutates,
		"raw_fsyncs/s":  raw,
		"ratio_vs_raw":  mutates / raw,
		"fsyncs/mutate": float64(log.Commits()-commits) / float64(n),
	}
	if conc == 1 {
		two, err := RawTwoSyncRate(dir, n)
		if err != nil {
			return nil, err
		}
		m["raw_2sync/s"], m["ceiling_vs_raw"], m["ratio_vs_ceiling"] = two, two/raw, mutates/two
	}
	return m, nil
}

// newForwardingJob is the send path's first write for a new job: the job in
// forwarding with its received and forwarding lines.
func newForwardingJob(id string) func(*acceptlog.Job) (acceptlog.Change, error) {
	return func(cur *acceptlog.Job) (acceptlog.Change, error) {
		if cur != nil {
			return acceptlog.Change{}, fmt.Errorf("job %s exists already", id)
		}
		j := acceptlog.Job{MessageID: id, Key: id, Channel: "default", Mailbox: "me", Fingerprint: "bench",
			State: acceptlog.StateForwarding, Attempts: 1}
		return acceptlog.Change{Job: &j, Lines: []acceptlog.Line{
			{Kind: acceptlog.KindReceived, Attempt: 1, Channel: "default"},
			{Kind: acceptlog.KindForwarding, Attempt: 1, State: acceptlog.StateForwarding},
		}}, nil
	}
}

// parallel calls fn(0..n-1) from conc goroutines and returns the first
// error (the others stop taking work).
func parallel(n, conc int, fn func(i int) error) error {
	var next atomic.Int64
	var failed atomic.Bool
	var once sync.Once
	var firstErr error
	var wg sync.WaitGroup
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !failed.Load() {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := fn(i); err != nil {
					failed.Store(true)
					once.Do(func() { firstErr = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	return firstErr
}
