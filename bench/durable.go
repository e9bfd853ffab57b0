package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/acceptlog"
)

// RawFsyncRate appends 512 bytes to a file in dir and fsyncs it, n times,
// and returns the fsyncs per second: the filesystem's floor for durable
// appends by one writer.
func RawFsyncRate(dir string, n int) (float64, error) { return rawRate(dir, n, false) }

// RawTwoSyncRate is RawFsyncRate with two write+fsync pairs per append, the
// second of 4 KiB at the file's start (as a bbolt commit writes its pages
// and syncs, then writes its meta page and syncs again): the floor of any
// bbolt commit on this filesystem, as appends per second.
func RawTwoSyncRate(dir string, n int) (float64, error) { return rawRate(dir, n, true) }

// rawRate makes n appends (see rawAppender.run) to a fresh file in dir and
// returns them per second.
func rawRate(dir string, n int, two bool) (float64, error) {
	a, err := newRawAppender(dir)
	if err != nil {
		return 0, err
	}
	defer a.close()
	took, err := a.run(n, two)
	return rate(n, took), err
}

// rawAppender appends 512-byte records to a file after a 4 KiB header.
type rawAppender struct {
	f   *os.File
	off int64
}

func newRawAppender(dir string) (*rawAppender, error) {
	f, err := os.CreateTemp(dir, "raw-fsync-*")
	if err != nil {
		return nil, fmt.Errorf("raw fsync: %w", err)
	}
	if _, err := f.WriteAt(make([]byte, 4096), 0); err != nil {
		f.Close()
		return nil, fmt.Errorf("raw fsync: %w", err)
	}
	return &rawAppender{f: f, off: 4096}, nil
}

func (a *rawAppender) close() {
	a.f.Close()
	os.Remove(a.f.Name())
}

// run makes n appends, each a write and an fsync, and with two also a
// rewrite of the header and a second fsync; it returns the time taken.
func (a *rawAppender) run(n int, two bool) (time.Duration, error) {
	data, meta := make([]byte, 512), make([]byte, 4096)
	start := time.Now()
	for range n {
		if _, err := a.f.WriteAt(data, a.off); err != nil {
			return 0, fmt.Errorf("raw fsync: write: %w", err)
		}
		a.off += int64(len(data))
		if err := a.f.Sync(); err != nil {
			return 0, fmt.Errorf("raw fsync: %w", err)
		}
		if !two {
			continue
		}
		if _, err := a.f.WriteAt(meta, 0); err != nil {
			return 0, fmt.Errorf("raw fsync: write header: %w", err)
		}
		if err := a.f.Sync(); err != nil {
			return 0, fmt.Errorf("raw fsync: %w", err)
		}
	}
	return time.Since(start), nil
}

// durableRounds is how many interleaved rounds DurableLog splits its
// appends into: the disk is shared, and its speed drifts during a run.
const durableRounds = 40

// DurableLog measures durable appends to a fresh acceptance log in dir: n
// Mutates by conc concurrent writers, each creating a job with two lines
// (received, forwarding: the send path's first write), next to the raw
// write+fsync rate of the same filesystem. The log as shipped (bbolt's
// commits, two syncs each, shared through Batch with its group wait) and
// the same log without the group wait (the "synced" figures) are measured
// side by side, in interleaved rounds (raw, log, no-wait log, and at
// concurrency 1 two syncs) so that a drift of the shared disk's speed
// falls on each alike.
//
// Figures: mutates/s, lines/s, raw_fsyncs/s, ratio_vs_raw (mutates/s ÷
// raw fsyncs/s: 1 means one durable append per raw fsync), fsyncs/mutate
// (two per log commit, per Mutate; below 2 means group commit); the synced
// log's synced_mutates/s and synced_ratio_vs_raw; and, at concurrency 1,
// raw_2sync/s (RawTwoSyncRate) with ceiling_vs_raw (raw_2sync/s ÷ raw
// fsyncs/s: the best ratio a log that syncs twice per commit can reach);
// page_writes/commit and pages/commit (bbolt's write calls, meta page
// included, and dirty pages allocated, per commit of the journaled log) and
// file_MiB say how much each commit writes.
func DurableLog(ctx context.Context, dir string, conc, n int) (Metrics, error) {
	if conc < 1 || n < 1 {
		return nil, fmt.Errorf("durable log: concurrency and n must be positive")
	}
	a, err := newRawAppender(dir)
	if err != nil {
		return nil, err
	}
	defer a.close()
	log, err := acceptlog.Open(filepath.Join(dir, fmt.Sprintf("durable-%d.db", conc)), acceptlog.Options{})
	if err != nil {
		return nil, err
	}
	defer log.Close()
	synced, err := acceptlog.Open(filepath.Join(dir, fmt.Sprintf("durable-synced-%d.db", conc)), acceptlog.Options{GroupWait: time.Nanosecond})
	if err != nil {
		return nil, err
	}
	defer synced.Close()
	ws0 := log.WriteStats()
	var rawT, logT, syncedT, twoT time.Duration
	done := 0
	for r := range durableRounds {
		k := (n*(r+1))/durableRounds - done
		t, err := a.run(k, false)
		if err != nil {
			return nil, err
		}
		rawT += t
		for _, l := range []struct {
			log *acceptlog.Log
			t   *time.Duration
		}{{log, &logT}, {synced, &syncedT}} {
			start, base := time.Now(), done
			err = parallel(k, conc, func(i int) error {
				id := fmt.Sprintf("<durable-%08d@%s>", base+i, MsgIDDomain)
				_, _, err := l.log.Mutate(ctx, id, newForwardingJob(id))
				return err
			})
			*l.t += time.Since(start)
			if err != nil {
				return nil, err
			}
		}
		if conc == 1 {
			t, err := a.run(k, true)
			if err != nil {
				return nil, err
			}
			twoT += t
		}
		done += k
	}
	raw, mutates, syncedRate := rate(n, rawT), rate(n, logT), rate(n, syncedT)
	m := Metrics{
		"mutates/s":           mutates,
		"lines/s":             2 * mutates,
		"raw_fsyncs/s":        raw,
		"ratio_vs_raw":        mutates / raw,
		"synced_mutates/s":    syncedRate,
		"synced_ratio_vs_raw": syncedRate / raw,
	}
	ws := log.WriteStats()
	commits := float64(ws.Commits - ws0.Commits)
	m["fsyncs/mutate"] = 2 * commits / float64(n) // a bbolt commit syncs twice
	if commits > 0 {
		m["page_writes/commit"] = float64(ws.Writes-ws0.Writes) / commits
		m["pages/commit"] = float64(ws.PagesAllocated-ws0.PagesAllocated) / commits
	}
	m["file_MiB"] = float64(ws.FileSize) / (1 << 20)
	if conc == 1 {
		two := rate(n, twoT)
		m["raw_2sync/s"], m["ceiling_vs_raw"], m["ratio_vs_ceiling"] = two, two/raw, mutates/two
	}
	return m, nil
}

// newForwardingJob is the send path's first write for a new job: the job in
// forwarding with its received and forwarding lines.
func newForwardingJob(id string) func(*gmailrelay.Job) (gmailrelay.Change, error) {
	return func(cur *gmailrelay.Job) (gmailrelay.Change, error) {
		if cur != nil {
			return gmailrelay.Change{}, fmt.Errorf("job %s exists already", id)
		}
		j := gmailrelay.Job{MessageID: id, Key: id, Channel: "default", Mailbox: "me", Fingerprint: "bench",
			State: gmailrelay.StateForwarding, Attempts: 1}
		return gmailrelay.Change{Job: &j, Lines: []gmailrelay.Line{
			{Kind: gmailrelay.KindReceived, Attempt: 1, Channel: "default"},
			{Kind: gmailrelay.KindForwarding, Attempt: 1, State: gmailrelay.StateForwarding},
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
