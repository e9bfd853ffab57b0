package sweeper

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gmailrelay/gmailrelay"
)

// lagSample returns the lag sample of a sent job whose verify search just
// found it, for the decision's edit of its mailbox's record (boxEdit), made
// in the transaction of the search line (nil: no sample). The lag runs from
// Gmail's answer (the job's last effect line, from the response) to now.
// Not from the job's creation: a job the outbox held (a spent budget, a
// rate-limit pause, send_at) was sent long after, and a lag counted from
// its creation would hold every miss of the mailbox back by that wait. A
// job without such a line gives no sample, nor does a search that ran more
// than grace after it was due (a backlog, a pause for Gmail's rate limit,
// a restart): its bound says how late the sweeper looked, not how far
// behind the index was, and one such sample would hold every later miss of
// the mailbox back by it. Nor does a send answered before a step of the
// wall clock (see beforeStep): its sample would be off by the step.
func (p *pass) lagSample(ctx context.Context, j gmailrelay.Job) (*lagEdit, error) {
	if !j.NextCheckAt.IsZero() && p.now.Sub(j.NextCheckAt) > p.channel(j.Channel).Grace {
		return nil, nil
	}
	lines, err := p.s.log.JobLines(ctx, j.MessageID)
	if err != nil {
		return nil, fmt.Errorf("read lines of %s: %w", j.MessageID, err)
	}
	for i := len(lines) - 1; i >= 0; i-- {
		if l := lines[i]; l.Kind == gmailrelay.KindEffect && l.Source == gmailrelay.SourceResponse && l.Attempt == j.Attempts {
			if p.beforeStep(l.Time) {
				return nil, nil
			}
			return &lagEdit{key: strconv.Itoa(j.Attempts) + " " + j.MessageID, d: max(p.now.Sub(l.Time), 0)}, nil
		}
	}
	return nil, nil
}

// lagEdit adds one lag sample to a mailbox's record (in the log, where
// every relay on it, and this one after a restart, reads it: see
// Sweeper.loadLags), read and written in the transaction of the verify
// search that measured it, so a sample another replica adds meanwhile is
// kept and a job another replica decided since gives none. The sample's
// key is the job's attempt: one send measured twice gives one sample.
type lagEdit struct {
	key    string
	d      time.Duration
	stored gmailrelay.LagSamples // the record's samples after the edit
}

// keepLag makes the pass's copies follow the record once the write holding
// the sample has committed.
func (p *pass) keepLag(mailbox string, e *lagEdit) {
	if e == nil {
		return
	}
	p.s.lags.set(mailbox, e.stored)
	if mb, ok := p.mailboxes[mailbox]; ok {
		mb.Lags = e.stored
		p.mailboxes[mailbox] = mb
	}
}

// loadLags reads every mailbox's measured lag from its record in the log
// into the lag book: at the first pass, so that a restarted relay keeps
// the floor it measured before, and at every pass on a log several
// replicas share, whose samples any of them adds. Samples of a mailbox
// the relay no longer serves are read when a pass measures one.
func (s *Sweeper) loadLags(ctx context.Context) error {
	if s.lags.loaded && !s.shared {
		return nil // this relay alone writes the records, and its book follows them
	}
	for _, m := range s.deps.Mailboxes.Mailboxes() {
		rec, err := s.log.Mailbox(ctx, m.Name())
		if err != nil {
			return fmt.Errorf("read the measured lag of mailbox %s: %w", m.Name(), err)
		}
		s.lags.set(m.Name(), rec.Lags)
	}
	s.lags.loaded = true
	return nil
}

// lagBook is the measured index lag of each mailbox: Gmail's answer to a
// send (the time of its effect line) → first hit of the verify pass. A
// sample is an upper bound (the verify pass looks after grace, then once
// more); it is what the relay has seen, not what Gmail promises. The
// samples live in the mailboxes' records in the log (gmailrelay.Mailbox's
// Lags, the newest gmailrelay.MaxLagSamples); the book is their copy as of
// the last pass or sample. Safe for concurrent
// use (metrics read it while passes write).
type lagBook struct {
	mu      sync.Mutex
	samples map[string][]time.Duration
	// loaded: a pass has read the records (see loadLags). Guarded by
	// the Sweeper's passMu.
	loaded bool
}

// set makes mailbox's samples those of its record.
func (b *lagBook) set(mailbox string, s gmailrelay.LagSamples) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if s.Len() == 0 {
		delete(b.samples, mailbox)
		return
	}
	if b.samples == nil {
		b.samples = map[string][]time.Duration{}
	}
	b.samples[mailbox] = s.Durations()
}

// quantile is the nearest-rank q-quantile of mailbox's samples, and how
// many there are (0: no sample, zero lag).
func (b *lagBook) quantile(mailbox string, q float64) (time.Duration, int) {
	b.mu.Lock()
	s := slices.Clone(b.samples[mailbox])
	b.mu.Unlock()
	if len(s) == 0 {
		return 0, 0
	}
	slices.Sort(s)
	i := int(q*float64(len(s))+0.999999) - 1
	return s[min(max(i, 0), len(s)-1)], len(s)
}

// IndexLag returns the mailbox's observed index lag at quantile q (0.5,
// 0.99, 1 for the maximum) and the number of samples it is drawn from.
func (s *Sweeper) IndexLag(mailbox string, q float64) (time.Duration, int) {
	return s.lags.quantile(mailbox, q)
}

// LagCollector is a Prometheus collector of the measured index lag:
// gmailrelay_index_lag_seconds{mailbox, quantile="0.5"|"0.99"|"1"} and
// gmailrelay_index_lag_samples{mailbox}. Register it on the relay's
// registry.
func (s *Sweeper) LagCollector() prometheus.Collector { return lagCollector{s} }

var (
	lagDesc = prometheus.NewDesc("gmailrelay_index_lag_seconds",
		"Measured Gmail index lag per mailbox (send to first hit of the verify pass, an upper bound), by quantile.",
		[]string{"mailbox", "quantile"}, nil)
	lagSamplesDesc = prometheus.NewDesc("gmailrelay_index_lag_samples",
		"Samples behind gmailrelay_index_lag_seconds, per mailbox.", []string{"mailbox"}, nil)
)

type lagCollector struct{ s *Sweeper }

func (c lagCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- lagDesc
	ch <- lagSamplesDesc
}

func (c lagCollector) Collect(ch chan<- prometheus.Metric) {
	c.s.lags.mu.Lock()
	mailboxes := make([]string, 0, len(c.s.lags.samples))
	for mb := range c.s.lags.samples {
		mailboxes = append(mailboxes, mb)
	}
	c.s.lags.mu.Unlock()
	slices.Sort(mailboxes)
	for _, mb := range mailboxes {
		for _, q := range []struct {
			v     float64
			label string
		}{{0.5, "0.5"}, {0.99, "0.99"}, {1, "1"}} {
			d, n := c.s.lags.quantile(mb, q.v)
			if n == 0 {
				continue
			}
			ch <- prometheus.MustNewConstMetric(lagDesc, prometheus.GaugeValue, d.Seconds(), mb, q.label)
		}
		_, n := c.s.lags.quantile(mb, 1)
		ch <- prometheus.MustNewConstMetric(lagSamplesDesc, prometheus.GaugeValue, float64(n), mb)
	}
}
