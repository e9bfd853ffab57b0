package api

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gmailrelay/gmailrelay/faultmodes"
	"github.com/gmailrelay/gmailrelay/policy"
	"github.com/gmailrelay/gmailrelay/relay"
)

// Metrics are the relay's Prometheus metrics. Counters and histograms are
// fed as things happen (it is a relay.Observer and wraps the Provider);
// gauges of the log are read from the same numbers as /v1/stats at scrape.
type Metrics struct {
	reg    *prometheus.Registry
	sends  *prometheus.CounterVec
	calls  *prometheus.HistogramVec
	handle *prometheus.CounterVec

	// stats is the server the stats collector reads at scrape time: the
	// last one built on these Metrics. The collector is registered once.
	stats     atomic.Pointer[Server]
	statsOnce sync.Once
}

// NewMetrics builds the registry with Go and process collectors.
func NewMetrics() *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	m.sends = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gmailrelay_sends_total", Help: "Gmail send attempts by channel and outcome (sent, failed, unknown).",
	}, []string{"channel", "outcome", "reason"})
	m.calls = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "gmailrelay_gmail_call_seconds", Help: "Latency of Gmail API calls by mailbox and method.",
		Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
	}, []string{"mailbox", "method", "result"})
	m.handle = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gmailrelay_handle_checks_total", Help: "Message-IDs read back after a send, by whether Gmail kept ours.",
	}, []string{"kept"})
	m.reg.MustRegister(m.sends, m.calls, m.handle,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Attempted implements relay.Observer.
func (m *Metrics) Attempted(channel string, o relay.Outcome, _ time.Duration) {
	m.sends.WithLabelValues(channel, o.Verdict.String(), string(o.Reason)).Inc()
}

// HandleChecked implements relay.Observer.
func (m *Metrics) HandleChecked(kept bool) {
	if kept {
		m.handle.WithLabelValues("true").Inc()
	} else {
		m.handle.WithLabelValues("false").Inc()
	}
}

// Provider wraps p so every Gmail call's latency is observed, labelled
// with the default mailbox (a relay of one mailbox).
func (m *Metrics) Provider(p relay.Provider) relay.Provider {
	return m.MailboxProvider(p, policy.DefaultMailbox)
}

// MailboxProvider wraps mailbox's Gmail client p so every call's latency
// is observed with the label mailbox.
func (m *Metrics) MailboxProvider(p relay.Provider, mailbox string) relay.Provider {
	return &timedProvider{p: p, m: m, mailbox: mailbox}
}

type timedProvider struct {
	p       relay.Provider
	m       *Metrics
	mailbox string
}

func (t *timedProvider) observe(method string, start time.Time, err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	t.m.calls.WithLabelValues(t.mailbox, method, result).Observe(time.Since(start).Seconds())
}

func (t *timedProvider) Send(ctx context.Context, mailbox string, raw []byte, threadID string) (relay.SentMessage, error) {
	start := time.Now()
	r, err := t.p.Send(ctx, mailbox, raw, threadID)
	t.observe("send", start, err)
	return r, err
}

func (t *timedProvider) List(ctx context.Context, mailbox, q string, labelIDs []string, pageToken string, max int64) (relay.ListPage, error) {
	start := time.Now()
	r, err := t.p.List(ctx, mailbox, q, labelIDs, pageToken, max)
	t.observe("list", start, err)
	return r, err
}

func (t *timedProvider) GetHeader(ctx context.Context, mailbox, id string) (relay.StoredHeader, error) {
	start := time.Now()
	r, err := t.p.GetHeader(ctx, mailbox, id)
	t.observe("get", start, err)
	return r, err
}

func (t *timedProvider) SendAs(ctx context.Context, mailbox string) ([]relay.SendAsAddress, error) {
	start := time.Now()
	r, err := t.p.SendAs(ctx, mailbox)
	t.observe("send_as_list", start, err)
	return r, err
}

func (t *timedProvider) Profile(ctx context.Context, mailbox string) (uint64, error) {
	start := time.Now()
	id, err := t.p.Profile(ctx, mailbox)
	t.observe("profile", start, err)
	return id, err
}

func (t *timedProvider) History(ctx context.Context, mailbox string, start uint64, label, pageToken string) (relay.HistoryPage, error) {
	began := time.Now()
	page, err := t.p.History(ctx, mailbox, start, label, pageToken)
	t.observe("history", began, err)
	return page, err
}

func (t *timedProvider) GetRaw(ctx context.Context, mailbox, id string) ([]byte, error) {
	start := time.Now()
	raw, err := t.p.GetRaw(ctx, mailbox, id)
	t.observe("get_raw", start, err)
	return raw, err
}

// statsCollector turns /v1/stats into gauges at scrape time.
type statsCollector struct{ m *Metrics }

var (
	descJobs     = prometheus.NewDesc("gmailrelay_jobs", "Jobs in the acceptance log by state.", []string{"state"}, nil)
	descReview   = prometheus.NewDesc("gmailrelay_review_queue_depth", "Jobs waiting for a human.", nil, nil)
	descOldest   = prometheus.NewDesc("gmailrelay_oldest_unknown_age_seconds", "Age of the oldest unknown job (0 when none).", nil, nil)
	descQuota    = prometheus.NewDesc("gmailrelay_quota_units_spent_total", "Gmail quota units the relay has spent.", nil, nil)
	descEffects  = prometheus.NewDesc("gmailrelay_effect_lines_total", "Effect lines written (Gmail accepted a message).", nil, nil)
	descDups     = prometheus.NewDesc("gmailrelay_duplicates_found_total", "Duplicates found in the mailbox (sent to review).", nil, nil)
	descRewrites = prometheus.NewDesc("gmailrelay_handle_failures_total", "Sends whose Message-ID Gmail replaced.", nil, nil)
	descFaults   = prometheus.NewDesc("gmailrelay_faults_injected_total", "Faults injected by mode.", []string{"mode"}, nil)
	descSweeper  = prometheus.NewDesc("gmailrelay_sweeper_jobs_total", "Sweeper results by kind, since start.", []string{"result"}, nil)
	descLogBytes = prometheus.NewDesc("gmailrelay_log_bytes", "Size of the acceptance log file.", nil, nil)
	descPruned   = prometheus.NewDesc("gmailrelay_retention_pruned_jobs_total", "Jobs whose raw message and detail lines the retention pass removed, since start.", nil, nil)

	descQueueDepth  = prometheus.NewDesc("gmailrelay_outbox_queue_depth", "Queued jobs waiting for the mailbox's budget or their send_at.", []string{"mailbox"}, nil)
	descQueueOldest = prometheus.NewDesc("gmailrelay_outbox_oldest_queued_age_seconds", "Age of the mailbox's oldest queued job (0 when none).", []string{"mailbox"}, nil)
	descBudgetLeft  = prometheus.NewDesc("gmailrelay_daily_send_budget_left", "Sends the mailbox's daily budget still allows over the rolling 24 h.", []string{"mailbox"}, nil)

	descMailboxQuota     = prometheus.NewDesc("gmailrelay_mailbox_quota_units_spent_total", "Gmail quota units the relay has spent in the mailbox.", []string{"mailbox"}, nil)
	descMailboxUntrusted = prometheus.NewDesc("gmailrelay_mailbox_handle_untrusted", "1 when Gmail was seen replacing our Message-ID in the mailbox (a search miss proves nothing there), else 0.", []string{"mailbox"}, nil)
	descMailboxPaused    = prometheus.NewDesc("gmailrelay_mailbox_paused_seconds", "How long the mailbox's sends and searches stay paused after a Gmail rate-limit answer (0: not paused).", []string{"mailbox"}, nil)
	descMailboxSendAs    = prometheus.NewDesc("gmailrelay_mailbox_send_as_checked", "1 when the mailbox's send-as list was read from Gmail and a send's From is checked against it, 0 while no read has succeeded (From not checked).", []string{"mailbox"}, nil)
	descHistoryLag       = prometheus.NewDesc("gmailrelay_history_lag_seconds", "How long ago the mailbox's history was last read to its end (the history tail's staleness).", []string{"mailbox"}, nil)
	descHistoryFallbacks = prometheus.NewDesc("gmailrelay_history_fallbacks_total", "History cursors Gmail no longer kept (404): their jobs were left to the search path.", []string{"mailbox"}, nil)
	descMailboxReady     = prometheus.NewDesc("gmailrelay_mailbox_ready", "1 when the mailbox's credentials refresh and its last readiness probe answered, else 0.", []string{"mailbox"}, nil)
)

func (c statsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descJobs, descReview, descOldest, descQuota, descEffects, descDups, descRewrites, descFaults, descSweeper, descLogBytes, descPruned, descQueueDepth, descQueueOldest, descBudgetLeft,
		descMailboxQuota, descMailboxUntrusted, descMailboxPaused, descMailboxReady, descMailboxSendAs, descHistoryLag, descHistoryFallbacks} {
		ch <- d
	}
}

func (c statsCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	srv := c.m.stats.Load()
	if srv == nil {
		return
	}
	st, err := srv.CollectStats(ctx)
	if err != nil {
		return
	}
	for _, state := range statesForMetrics {
		ch <- prometheus.MustNewConstMetric(descJobs, prometheus.GaugeValue, float64(st.ByState[state]), string(state))
	}
	ch <- prometheus.MustNewConstMetric(descReview, prometheus.GaugeValue, float64(st.ReviewDepth))
	ch <- prometheus.MustNewConstMetric(descOldest, prometheus.GaugeValue, st.OldestUnknownAge)
	for name, mb := range st.Mailboxes {
		ch <- prometheus.MustNewConstMetric(descQueueDepth, prometheus.GaugeValue, float64(mb.Depth), name)
		ch <- prometheus.MustNewConstMetric(descQueueOldest, prometheus.GaugeValue, mb.OldestAge, name)
		ch <- prometheus.MustNewConstMetric(descBudgetLeft, prometheus.GaugeValue, float64(mb.BudgetLeft), name)
		ch <- prometheus.MustNewConstMetric(descMailboxQuota, prometheus.CounterValue, float64(mb.QuotaUnitsSpent), name)
		ch <- prometheus.MustNewConstMetric(descMailboxUntrusted, prometheus.GaugeValue, boolGauge(mb.HandleUntrusted), name)
		ch <- prometheus.MustNewConstMetric(descMailboxPaused, prometheus.GaugeValue, mb.PausedFor, name)
		ch <- prometheus.MustNewConstMetric(descMailboxReady, prometheus.GaugeValue, boolGauge(mb.Ready), name)
		ch <- prometheus.MustNewConstMetric(descMailboxSendAs, prometheus.GaugeValue, boolGauge(mb.SendAsChecked), name)
		if h := mb.History; h != nil {
			ch <- prometheus.MustNewConstMetric(descHistoryLag, prometheus.GaugeValue, h.LagS, name)
			ch <- prometheus.MustNewConstMetric(descHistoryFallbacks, prometheus.CounterValue, float64(h.Fallbacks), name)
		}
	}
	ch <- prometheus.MustNewConstMetric(descQuota, prometheus.CounterValue, float64(st.QuotaUnitsSpent))
	ch <- prometheus.MustNewConstMetric(descEffects, prometheus.CounterValue, float64(st.EffectLines))
	ch <- prometheus.MustNewConstMetric(descDups, prometheus.CounterValue, float64(st.DuplicatesFound))
	ch <- prometheus.MustNewConstMetric(descRewrites, prometheus.CounterValue, float64(st.HandleRewrites))
	for _, mode := range []faultmodes.Mode{faultmodes.FailBeforeForward, faultmodes.ForwardThenDropResponse, faultmodes.CrashAfterForward} {
		ch <- prometheus.MustNewConstMetric(descFaults, prometheus.CounterValue, float64(st.FaultsInjected[mode]), string(mode))
	}
	ch <- prometheus.MustNewConstMetric(descLogBytes, prometheus.GaugeValue, float64(st.LogBytes))
	if st.Pruned != nil {
		ch <- prometheus.MustNewConstMetric(descPruned, prometheus.CounterValue, float64(st.Pruned.Jobs))
	}
	if t := st.Sweeper; t != nil {
		for name, v := range map[string]int{"checked": t.Checked, "found": t.Found, "duplicates": t.Duplicates,
			"missed": t.Missed, "resent": t.Resent, "retried": t.Retried, "reviewed": t.Reviewed, "deferred": t.Deferred,
			"verified": t.Verified, "errors": t.Errors} {
			ch <- prometheus.MustNewConstMetric(descSweeper, prometheus.CounterValue, float64(v), name)
		}
	}
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Register adds each collector to the relay's registry (the sweeper's
// measured index lag, its delivery reports), so /metrics serves them too.
func (m *Metrics) Register(cs ...prometheus.Collector) error {
	for _, c := range cs {
		if err := m.reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// handler serves the registry, with the stats collector reading s. The
// collector is registered on the first call only: a second server built on
// the same Metrics takes it over instead of panicking on a duplicate
// registration.
func (m *Metrics) handler(s *Server) http.Handler {
	m.stats.Store(s)
	m.statsOnce.Do(func() { m.reg.MustRegister(statsCollector{m: m}) })
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}
