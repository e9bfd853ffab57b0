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

// DurableLog measures durable appends to a fresh acceptance log in dir: n
// Mutates by conc concurrent writers, each creating a job with two lines
// (received, forwarding: the send path's first write), next to the raw
// write+fsync rate measured just before on the same filesystem.
//
// Figures: mutates/s, lines/s, raw_fsyncs/s, ratio_vs_raw (mutates/s ÷
// raw fsyncs/s: 1 means one durable append per raw fsync) and
// fsyncs/mutate (log commits per Mutate; below 1 means group commit).
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
	return Metrics{
		"mutates/s":     mutates,
		"lines/s":       2 * mutates,
		"raw_fsyncs/s":  raw,
		"ratio_vs_raw":  mutates / raw,
		"fsyncs/mutate": float64(log.Commits()-commits) / float64(n),
	}, nil
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
