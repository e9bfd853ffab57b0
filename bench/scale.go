package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/acceptlog"
	"github.com/gmailrelay/gmailrelay/gmailapi"
	"github.com/gmailrelay/gmailrelay/policy"
	"github.com/gmailrelay/gmailrelay/relay"
)

// ScaleConfig says what BuildLog writes: Jobs jobs of LinesPerJob lines
// each; the first Forwarding jobs are left in forwarding (a crash
// mid-flight), the next Review jobs are in review, the rest are sent.
type ScaleConfig struct {
	Jobs        int
	LinesPerJob int
	Forwarding  int
	Review      int
}

// buildConcurrency is how many writers BuildLog runs: enough for large
// group commits.
const buildConcurrency = 128

// BuildLog writes cfg's jobs into a new acceptance log at path with
// concurrent Mutates (grouped into shared commits) and closes it.
func BuildLog(ctx context.Context, path string, cfg ScaleConfig) error {
	if cfg.Jobs < cfg.Forwarding+cfg.Review || cfg.LinesPerJob < 2 {
		return fmt.Errorf("build log: %d jobs cannot hold %d forwarding and %d review, or fewer than 2 lines a job",
			cfg.Jobs, cfg.Forwarding, cfg.Review)
	}
	log, err := acceptlog.Open(path, acceptlog.Options{})
	if err != nil {
		return err
	}
	err = parallel(cfg.Jobs, buildConcurrency, func(i int) error {
		state := gmailrelay.StateSent
		switch {
		case i < cfg.Forwarding:
			state = gmailrelay.StateForwarding
		case i < cfg.Forwarding+cfg.Review:
			state = gmailrelay.StateReview
		}
		id := fmt.Sprintf("<scale-%08d@%s>", i, MsgIDDomain)
		_, _, err := log.Mutate(ctx, id, scaleJob(id, state, cfg.LinesPerJob))
		return err
	})
	if cerr := log.Close(); err == nil {
		err = cerr
	}
	return err
}

// scaleJob is a job in state with n lines: received, searches, and a last
// line that carries the state.
func scaleJob(id string, state gmailrelay.State, n int) func(*gmailrelay.Job) (gmailrelay.Change, error) {
	return func(cur *gmailrelay.Job) (gmailrelay.Change, error) {
		if cur != nil {
			return gmailrelay.Change{}, fmt.Errorf("job %s exists already", id)
		}
		j := gmailrelay.Job{MessageID: id, Key: id, Channel: policy.DefaultChannel, Mailbox: "me", Fingerprint: "bench",
			State: state, Attempts: 1}
		lines := make([]gmailrelay.Line, 0, n)
		lines = append(lines, gmailrelay.Line{Kind: gmailrelay.KindReceived, Attempt: 1, Channel: policy.DefaultChannel})
		for len(lines) < n-1 {
			lines = append(lines, gmailrelay.Line{Kind: gmailrelay.KindSearch, Attempt: 1,
				Query: "rfc822msgid:" + id[1:len(id)-1], Check: len(lines)})
		}
		last := gmailrelay.Line{Attempt: 1, State: state}
		switch state {
		case gmailrelay.StateForwarding:
			last.Kind = gmailrelay.KindForwarding
		case gmailrelay.StateReview:
			last.Kind, last.Reason = gmailrelay.KindReview, "duplicate"
		default:
			j.Effects = 1
			last.Kind, last.Source, last.GmailID = gmailrelay.KindEffect, gmailrelay.SourceResponse, "18c0ffee00000000"
		}
		return gmailrelay.Change{Job: &j, Lines: append(lines, last)}, nil
	}
}

// OpenAndRecover opens the log at path and starts the relay over it, whose
// crash recovery turns every forwarding job into unknown. Run it in a fresh
// process for a meaningful RSS.
//
// Figures: open_ms (acceptlog.Open), recover_ms (relay.New), recovered
// (jobs now unknown), rss_mb (VmRSS after both).
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
	rss, err := RSS()
	if err != nil {
		return nil, err
	}
	unknown, err := log.ByState(ctx, gmailrelay.StateUnknown, 0)
	if err != nil {
		return nil, err
	}
	return Metrics{
		"open_ms":    ms(opened),
		"recover_ms": ms(recovered),
		"recovered":  float64(len(unknown)),
		"rss_mb":     float64(rss) / (1 << 20),
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
