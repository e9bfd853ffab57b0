package sweeper

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gmailrelay/gmailrelay/acceptlog"
)

// measureLag records the lag sample of a sent job whose verify search just
// found it: from Gmail's answer (its last effect line, from the response)
// to now. Not from the job's creation: a job the outbox held (a spent
// budget, a rate-limit pause, send_at) was sent long after, and a lag
// counted from its creation would hold every miss of the mailbox back by
// that wait. A job without such a line gives no sample, nor does a
// search that ran more than grace after it was due (a backlog, a pause for
// Gmail's rate limit, a restart): its bound says how late the sweeper
// looked, not how far behind the index was, and one such sample would
// hold every later miss of the mailbox back by it.
func (p *pass) measureLag(ctx context.Context, j acceptlog.Job) error {
	if !j.NextCheckAt.IsZero() && p.now.Sub(j.NextCheckAt) > p.channel(j.Channel).Grace {
		return nil
	}
	lines, err := p.s.log.JobLines(ctx, j.MessageID)
	if err != nil {
		return fmt.Errorf("read lines of %s: %w", j.MessageID, err)
	}
	for i := len(lines) - 1; i >= 0; i-- {
		if l := lines[i]; l.Kind == acceptlog.KindEffect && l.Source == acceptlog.SourceResponse && l.Attempt == j.Attempts {
			return p.recordLag(ctx, j, max(p.now.Sub(l.Time), 0))
		}
	}
	return nil
}

// recordLag adds the sample d to the record of j's mailbox in the log,
// where every relay on the log, and this one after a restart, reads it
// (see Sweeper.loadLags). The record is read and written in one
// transaction (a sample another replica adds meanwhile is kept), and only
// while j is as the pass read it: a job another replica decided since was
// measured there. The sample's key is the job's attempt, so a send
// measured twice (the record written, then a crash before the search
// line) gives one sample.
func (p *pass) recordLag(ctx context.Context, j acceptlog.Job, d time.Duration) error {
	var stored acceptlog.LagSamples
	_, _, err := p.s.log.Mutate(ctx, j.MessageID, func(cur *acceptlog.Job) (acceptlog.Change, error) {
		if cur == nil || cur.State != j.State || cur.Attempts != j.Attempts || cur.Checks != j.Checks ||
			cur.Verified != j.Verified || cur.VerifyLooks != j.VerifyLooks {
			return acceptlog.Change{}, errChanged
		}
		return acceptlog.Change{EditMailbox: func(m *acceptlog.Mailbox) {
			m.Lags.Add(strconv.Itoa(j.Attempts)+" "+j.MessageID, d)
			stored = m.Lags
		}}, nil
	})
	if errors.Is(err, errChanged) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("record the index lag of %s: %w", j.MessageID, err)
	}
	p.s.lags.set(j.Mailbox, stored)
	if mb, ok := p.mailboxes[j.Mailbox]; ok {
		mb.Lags = stored
		p.mailboxes[j.Mailbox] = mb
	}
	return nil
}

// loadLags reads every mailbox's measured lag from its record in the log
// into the lag book: at the first pass, so that a restarted relay keeps
// the floor it measured before, and at every pass on a log several
// replicas share, whose samples any of them adds. Samples of a mailbox
// the relay no longer serves are read when a pass measures one.
func (s *Sweeper) loadLags(ctx context.Context) error {
	if s.lags.loaded && !acceptlog.IsShared(s.log) {
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
// samples live in the mailboxes' records in the log (acceptlog.Mailbox's
// Lags, the newest acceptlog.MaxLagSamples); the book is their copy as of
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
func (b *lagBook) set(mailbox string, s acceptlog.LagSamples) {
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
