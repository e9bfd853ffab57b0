package bench

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/acceptlog"
	"github.com/gmailrelay/gmailrelay/gmailapi"
	"github.com/gmailrelay/gmailrelay/policy"
	"github.com/gmailrelay/gmailrelay/relay"
)

// ScaleConfig says what BuildLog writes: Jobs plain sends (newPlainSend);
// the first Forwarding jobs are left in forwarding (a crash mid-flight:
// received and forwarding lines), the next Review jobs are in review (a
// duplicate found by the verify pass: received, forwarding, effect and
// review lines), the rest are sent and verified (received, forwarding,
// effect and search lines). With Raw, every job keeps its raw message
// (PlainRaw), as with no retention set; without, none does.
type ScaleConfig struct {
	Jobs       int
	Forwarding int
	Review     int
	Raw        bool
}

// buildConcurrency is how many writers BuildLog runs: enough for large
// group commits.
const buildConcurrency = 128

// BuildLog writes cfg's jobs into a new acceptance log at path with
// concurrent Mutates (grouped into shared commits), each job in one
// Mutate (its writes as the relay makes them, joined), and closes it.
func BuildLog(ctx context.Context, path string, cfg ScaleConfig) error {
	if cfg.Jobs < cfg.Forwarding+cfg.Review || cfg.Forwarding < 0 || cfg.Review < 0 {
		return fmt.Errorf("build log: %d jobs cannot hold %d forwarding and %d review", cfg.Jobs, cfg.Forwarding, cfg.Review)
	}
	log, err := acceptlog.Open(path, acceptlog.Options{})
	if err != nil {
		return err
	}
	var raw []byte
	if cfg.Raw {
		raw = PlainRaw
	}
	err = parallel(cfg.Jobs, buildConcurrency, func(i int) error {
		p := newPlainSend(i, growthStart.Add(time.Duration(i)*growthSpacing), raw)
		writes := p.writes[:]
		switch {
		case i < cfg.Forwarding:
			writes = writes[:1]
		case i < cfg.Forwarding+cfg.Review:
			writes = append(writes[:2:2], reviewDuplicate)
		}
		_, _, err := log.Mutate(ctx, p.id, joined(writes))
		return err
	})
	if cerr := log.Close(); err == nil {
		err = cerr
	}
	return err
}

// reviewDuplicate is the verify pass finding two copies of a sent job.
func reviewDuplicate(cur *gmailrelay.Job) (gmailrelay.Change, error) {
	cur.State, cur.NextCheckAt = gmailrelay.StateReview, time.Time{}
	return gmailrelay.Change{Job: cur, Lines: []gmailrelay.Line{{Kind: gmailrelay.KindSearch, Attempt: 1,
		Query: "rfc822msgid:" + cur.MessageID[1:len(cur.MessageID)-1], Hits: 2, SentHits: 2, Reason: gmailrelay.ReasonDuplicate},
		{Kind: gmailrelay.KindReview, Attempt: 1, State: gmailrelay.StateReview, Reason: gmailrelay.ReasonDuplicate}}}, nil
}

// joined is writes made as one: each applied to the job the one before
// left, their lines and raw message written together.
func joined(writes []func(*gmailrelay.Job) (gmailrelay.Change, error)) func(*gmailrelay.Job) (gmailrelay.Change, error) {
	return func(cur *gmailrelay.Job) (gmailrelay.Change, error) {
		var all gmailrelay.Change
		for _, w := range writes {
			c, err := w(cur)
			if err != nil {
				return gmailrelay.Change{}, err
			}
			j := *c.Job
			cur, all.Job = &j, &j
			all.Lines = append(all.Lines, c.Lines...)
			if c.Raw != nil {
				all.Raw = c.Raw
			}
		}
		return all, nil
	}
}

// OpenAndRecover opens the log at path and starts the relay over it, whose
// crash recovery turns every forwarding job into unknown. Run it in a fresh
// process for a meaningful RSS. It then closes the log and times the verify
// walk alone (acceptlog.OpenReadOnly: the walk, then bbolt's read-only
// open, which reads only the meta pages).
//
// Figures: open_ms (acceptlog.Open: the verify walk of the whole file, then
// bbolt's open, which rebuilds its free list from the tree since the log
// does not store it), recover_ms (relay.New), recovered (jobs now unknown),
// rss_mb (VmRSS after both), rss_anon_mb and rss_file_mb (its parts: the
// process's own memory, and pages of the mapped log file, which the kernel
// can drop), heap_mb (the Go heap in use), verify_ms (the walk alone,
// measured after: the file's pages are in the page cache for both).
func OpenAndRecover(ctx context.Context, path string) (Metrics, error) {
	t0 := time.Now()
	log, err := acceptlog.Open(path, acceptlog.Options{})
	if err != nil {
		return nil, err
	}
	defer log.Close()
	opened := time.Since(t0)
	prov, err := gmailapi.New(ctx, gmailapi.Config{Endpoint: "http://127.0.0.1:9"}) // never called
	if err != nil {
		return nil, err
	}
	t1 := time.Now()
	if _, err := relay.New(ctx, relay.Config{Log: log, Provider: prov, Policy: policy.Default(), Logger: zerolog.Nop()}); err != nil {
		return nil, err
	}
	recovered := time.Since(t1)
	rss, err := ReadRSS()
	if err != nil {
		return nil, err
	}
	var mem runtime.MemStats
	runtime.ReadMemStats(&mem)
	unknown, err := log.ByState(ctx, gmailrelay.StateUnknown, 0)
	if err != nil {
		return nil, err
	}
	if err := log.Close(); err != nil {
		return nil, err
	}
	t2 := time.Now()
	ro, err := acceptlog.OpenReadOnly(path)
	if err != nil {
		return nil, err
	}
	verified := time.Since(t2)
	if err := ro.Close(); err != nil {
		return nil, err
	}
	return Metrics{
		"open_ms":     ms(opened),
		"recover_ms":  ms(recovered),
		"recovered":   float64(len(unknown)),
		"rss_mb":      float64(rss.Total) / (1 << 20),
		"rss_anon_mb": float64(rss.Anon) / (1 << 20),
		"rss_file_mb": float64(rss.File) / (1 << 20),
		"heap_mb":     float64(mem.HeapInuse) / (1 << 20),
		"verify_ms":   ms(verified),
	}, nil
}

// ReviewQueue opens the log at path and lists its review queue (ByState
// review, limit 100) reps times, returning the mean time of one listing. It
// checks that the queue holds want jobs.
func ReviewQueue(ctx context.Context, path string, want, reps int) (time.Duration, error) {
	log, err := acceptlog.Open(path, acceptlog.Options{})
	if err != nil {
		return 0, err
	}
	defer log.Close()
	if _, err := log.ByState(ctx, gmailrelay.StateReview, 100); err != nil { // warm the pages
		return 0, err
	}
	start := time.Now()
	for range reps {
		jobs, err := log.ByState(ctx, gmailrelay.StateReview, 100)
		if err != nil {
			return 0, err
		}
		if len(jobs) != want {
			return 0, fmt.Errorf("review queue of %s holds %d jobs, want %d", path, len(jobs), want)
		}
	}
	return time.Since(start) / time.Duration(max(reps, 1)), nil
}
