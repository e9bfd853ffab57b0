// Package retention is the acceptance log's retention pass: it prunes the
// raw message and detail lines of terminal jobs older than the policy's
// retention (acceptlog.Log.Prune) and keeps their records, so that a re-run
// of a year-old workflow still replays instead of resending. It also drops
// the send index's entries (the attempts the daily sending budget counts)
// older than SendsKeep, whether or not a retention is set, so the index
// holds about two days of sends instead of growing forever. Like the
// sweeper it has RunOnce (for tests and POST /admin/sweep) and a background
// loop; time comes from an injected clock.
package retention

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/internal/lifecycle"
)

// Defaults for Config's zero values.
const (
	DefaultInterval = 10 * time.Minute
	DefaultBatch    = 500
	// DefaultSendsKeep is how long send-index entries are kept: twice the
	// daily budget's rolling 24 h, so a clock step or a late pass never
	// drops an entry the budget still counts.
	DefaultSendsKeep = 48 * time.Hour
)

// minSendsKeep is the shortest SendsKeep New accepts: the budget counts
// the last 24 h.
const minSendsKeep = 24 * time.Hour

// Config configures a Pass.
type Config struct {
	Log gmailrelay.Store
	// Retention is how long a terminal job keeps its detail; zero disables
	// the pass (RunOnce does nothing).
	Retention time.Duration
	// Now is the clock; defaults to time.Now.
	Now func() time.Time
	// Interval is the loop's period; defaults to DefaultInterval.
	Interval time.Duration
	// Batch is how many jobs one transaction prunes; defaults to
	// DefaultBatch. A pass runs transactions until none is left.
	Batch int
	// SendsKeep is how long send-index entries are kept; defaults to
	// DefaultSendsKeep, and is never less than 24 h (the budget's window).
	SendsKeep time.Duration
	Logger    zerolog.Logger
}

// Result counts what a pass pruned, with the cut-off it used (zero when
// the pass is disabled).
type Result struct {
	gmailrelay.PruneResult
	Cutoff time.Time `json:"cutoff,omitzero"`
	// Sends counts the send-index entries dropped (older than SendsKeep).
	Sends int `json:"sends_pruned,omitempty"`
}

// Pass is the retention pass. Its methods are safe for concurrent use;
// passes never overlap.
type Pass struct {
	cfg Config

	passMu sync.Mutex

	totalsMu sync.Mutex
	totals   gmailrelay.PruneResult

	life   lifecycle.Loop
	passes chan Result
}

// New returns a Pass for cfg; it does not start the loop (see Start).
func New(cfg Config) *Pass {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Batch <= 0 {
		cfg.Batch = DefaultBatch
	}
	if cfg.SendsKeep <= 0 {
		cfg.SendsKeep = DefaultSendsKeep
	}
	cfg.SendsKeep = max(cfg.SendsKeep, minSendsKeep)
	return &Pass{cfg: cfg, passes: make(chan Result, 16)}
}

// Enabled reports whether a retention is set (jobs' detail is pruned);
// the send index is pruned either way.
func (p *Pass) Enabled() bool { return p.cfg.Retention > 0 }

// RunOnce drops the send-index entries older than SendsKeep and, when a
// retention is set, prunes every prunable job whose last change is older
// than it, in transactions of Batch jobs, and returns the counts. It
// stops early, returning what it did and ctx's error, when ctx ends. An
// error means the log could not be written; nothing half-pruned is left
// (each transaction prunes whole jobs).
func (p *Pass) RunOnce(ctx context.Context) (Result, error) {
	p.passMu.Lock()
	defer p.passMu.Unlock()
	now := p.cfg.Now()
	var res Result
	n, err := p.cfg.Log.PruneSends(ctx, now.Add(-p.cfg.SendsKeep))
	res.Sends = n
	if err != nil || !p.Enabled() {
		p.publish(res)
		return res, err
	}
	res.Cutoff = now.Add(-p.cfg.Retention)
	for {
		r, err := p.cfg.Log.Prune(ctx, res.Cutoff, p.cfg.Batch)
		res.Jobs += r.Jobs
		res.Lines += r.Lines
		res.RawBytes += r.RawBytes
		if err != nil || !r.More {
			p.add(res.PruneResult)
			p.publish(res)
			return res, err
		}
	}
}

// publish hands res to Passes without blocking.
func (p *Pass) publish(res Result) {
	select {
	case p.passes <- res:
	default:
	}
}

func (p *Pass) add(r gmailrelay.PruneResult) {
	p.totalsMu.Lock()
	defer p.totalsMu.Unlock()
	p.totals.Jobs += r.Jobs
	p.totals.Lines += r.Lines
	p.totals.RawBytes += r.RawBytes
}

// Totals returns the sums of every pass since New.
func (p *Pass) Totals() gmailrelay.PruneResult {
	p.totalsMu.Lock()
	defer p.totalsMu.Unlock()
	return p.totals
}

// Passes delivers the Result of every finished pass, so a caller can wait
// for one without polling; it holds the last 16 undelivered.
func (p *Pass) Passes() <-chan Result { return p.passes }

// Start runs a pass at once and then every Interval until ctx ends or Stop
// is called. It does nothing when already started. Without a retention
// the loop still runs, for the send index.
func (p *Pass) Start(ctx context.Context) {
	p.life.Start(ctx, p.loop)
}

// Stop ends the loop and waits for the pass in progress. It is safe to
// call twice, and without Start.
func (p *Pass) Stop() { p.life.Stop() }

func (p *Pass) loop(ctx context.Context) {
	lifecycle.Repeat(ctx, nil, func(ctx context.Context) time.Duration {
		res, err := p.RunOnce(ctx)
		switch {
		case err != nil && ctx.Err() == nil && !errors.Is(err, context.Canceled):
			p.cfg.Logger.Error().Err(err).Msg("retention pass")
		case res.Jobs > 0 || res.Sends > 0:
			p.cfg.Logger.Info().Int("jobs", res.Jobs).Int("lines", res.Lines).Int("sends", res.Sends).
				Int64("raw_bytes", res.RawBytes).Time("cutoff", res.Cutoff).Msg("retention pass pruned the log")
		}
		return p.cfg.Interval
	})
}
