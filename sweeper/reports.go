package sweeper

import (
	"context"
	"errors"
	"fmt"
	"net/mail"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/dsn"
	"github.com/gmailrelay/gmailrelay/relay"
)

// Delivery reports: the history tail also reads the messages added to
// INBOX. One whose sender writes delivery reports (mailer-daemon,
// postmaster, Gmail's nobody@gmail.com) is read whole (5 units) and
// parsed (package dsn); each failed or delayed recipient of a report that
// names one of the relay's jobs — by a returned Message-ID or job header —
// becomes a bounce line on that job, which stays sent. A report the parser
// cannot read, or that names no job, is logged and counted, never guessed
// into a job. See docs/design.md#delivery-reports.

// inboxLabel is the label of received mail.
const inboxLabel = "INBOX"

// report looks at the INBOX message gmailID: its sender first (the
// metadata read, 5 units), then, for a report sender, the whole message.
func (t *tail) report(ctx context.Context, gmailID string) error {
	if !t.b.take(relay.UnitsGet, 0) {
		return errStopped
	}
	prov, user := t.b.gmail()
	h, err := prov.GetHeader(ctx, user, gmailID)
	if errors.Is(err, relay.ErrMessageNotFound) {
		return nil
	}
	if err != nil {
		return t.p.gmailErr(t.b, err)
	}
	if !reportSender(h.From) {
		return nil
	}
	if !t.b.take(relay.UnitsGet, 0) {
		return errStopped
	}
	raw, err := prov.GetRaw(ctx, user, gmailID)
	if errors.Is(err, relay.ErrMessageNotFound) {
		return nil
	}
	if err != nil {
		return t.p.gmailErr(t.b, err)
	}
	rep, err := dsn.Parse(raw)
	if err != nil {
		t.p.s.reports.add(t.b.m.Name(), "unreadable")
		t.p.s.deps.Logger.Warn().Err(err).Str("mailbox", t.b.m.Name()).Str("gmail_id", gmailID).
			Msg("a message from a report sender is no delivery report the relay can read: counted, no job changed")
		return nil
	}
	if rep.Kind == dsn.KindSendingLimit {
		return t.limitBounce(ctx, gmailID)
	}
	return t.bounces(ctx, gmailID, rep)
}

// bounces writes the report's failed and delayed recipients on each job
// it names.
func (t *tail) bounces(ctx context.Context, reportID string, rep dsn.Report) error {
	ids := map[string]bool{}
	for _, id := range rep.MessageIDs {
		ids[id] = true
	}
	for _, job := range rep.Jobs {
		if id := jobMessageID(job, t.p.s.deps.Policy.MsgIDDomain); id != "" {
			ids[id] = true
		}
	}
	matched := false
	for id := range ids {
		if gmailrelay.CheckMessageID(id) != nil {
			continue
		}
		lines, err := t.p.s.log.JobLines(ctx, id)
		if errors.Is(err, gmailrelay.ErrNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("read lines of %s: %w", id, err)
		}
		var written []gmailrelay.Line
		_, _, err = t.p.s.log.Mutate(ctx, id, func(cur *gmailrelay.Job) (gmailrelay.Change, error) {
			written = nil
			if cur == nil {
				return gmailrelay.Change{}, nil
			}
			ch := bounceChange(*cur, reportID, rep.Recipients, lines)
			written = ch.Lines
			return ch, nil
		})
		if err != nil {
			return fmt.Errorf("record the report %s on %s: %w", reportID, id, err)
		}
		matched = true
		for _, l := range written {
			t.p.s.reports.add(t.b.m.Name(), l.Action)
			t.p.s.deps.Logger.Info().Str("message_id", id).Str("action", l.Action).Str("status", l.DSNStatus).
				Msg("delivery report: a recipient's server refused or delayed the message; the job stays sent")
		}
	}
	if !matched {
		t.p.s.reports.add(t.b.m.Name(), "unmatched")
		t.p.s.deps.Logger.Warn().Str("mailbox", t.b.m.Name()).Str("gmail_id", reportID).
			Msg("a delivery report names no job of the relay: counted, no job changed")
	}
	return nil
}

// limitBounce acts on Gmail's notice noticeID that the mailbox reached
// its sending limit: the notice names no message, and Gmail answered 200
// to sends it then did not send. Every send of the mailbox in the policy's
// limit_bounce_window before the notice that no delivery report accounts
// for goes to review (sending_limit_bounce): a human decides what went
// out. The mailbox's daily budget is held spent until it frees, so later
// sends wait (queued, or refused with Retry-After) instead of going the
// same way. An alarm and a counter say so.
func (t *tail) limitBounce(ctx context.Context, noticeID string) error {
	name := t.b.m.Name()
	t.p.s.reports.add(name, "sending_limit")
	if b := t.b.m.Budget(); b != nil {
		b.Exhaust()
	}
	window := t.p.s.deps.Policy.BounceWindow()
	sent, err := t.p.s.log.ByState(ctx, gmailrelay.StateSent, 0)
	if err != nil {
		return fmt.Errorf("read sent jobs: %w", err)
	}
	doubted := 0
	for _, j := range sent {
		if m, err := t.p.s.deps.Mailboxes.MailboxOf(j.Mailbox); err != nil || m.Name() != name {
			continue
		}
		d, ok := limitReview(j, noticeID, t.p.now, window)
		if !ok {
			continue
		}
		written, err := t.p.apply(ctx, j, d)
		if err != nil {
			return err
		}
		if written {
			doubted++
		}
	}
	t.p.s.deps.Logger.Error().Str("mailbox", name).Str("gmail_id", noticeID).Int("sends_in_review", doubted).Dur("window", window).
		Msg("ALARM: Gmail says the mailbox reached its sending limit after answering 200: the window's sends are in review, the mailbox waits for its daily budget")
	return nil
}

// limitReview decides a sent job of a mailbox Gmail said reached its
// sending limit (notice noticeID, read at now): review, reason
// sending_limit_bounce, when the job's send is within window before the
// notice and no delivery report accounts for it (a report means the
// message left Gmail).
func limitReview(j gmailrelay.Job, noticeID string, now time.Time, window time.Duration) (decision, bool) {
	if j.State != gmailrelay.StateSent || j.Bounced > 0 || j.Delayed > 0 || j.UpdatedAt.Before(now.Add(-window)) {
		return decision{}, false
	}
	why := gmailrelay.Line{Kind: gmailrelay.KindReview, Attempt: j.Attempts, Reason: gmailrelay.ReasonSendingLimitBounce, GmailID: noticeID,
		Note: fmt.Sprintf("Gmail said the mailbox reached its sending limit (notice %s); this send, answered within %s before, may not have gone out", noticeID, window)}
	return review(j, why).counting(0), true
}

// bounceChange is the change that records report reportID's failed and
// delayed recipients on job j: a bounce line each, unless one of the
// job's lines (have) records that report's recipient already (a report
// read twice changes nothing), and the job's Bounced and Delayed counts.
// The state stays.
func bounceChange(j gmailrelay.Job, reportID string, rs []dsn.Recipient, have []gmailrelay.Line) gmailrelay.Change {
	var lines []gmailrelay.Line
	for _, r := range rs {
		if r.Action != dsn.ActionFailed && r.Action != dsn.ActionDelayed {
			continue
		}
		if slices.ContainsFunc(have, func(l gmailrelay.Line) bool {
			return l.Kind == gmailrelay.KindBounce && l.GmailID == reportID && strings.EqualFold(l.Recipient, r.Address)
		}) {
			continue
		}
		lines = append(lines, gmailrelay.Line{Kind: gmailrelay.KindBounce, Attempt: j.Attempts, GmailID: reportID,
			Recipient: r.Address, Action: r.Action, DSNStatus: r.Status, Diagnostic: r.Diagnostic})
	}
	if len(lines) == 0 {
		return gmailrelay.Change{}
	}
	n := j
	for _, l := range lines {
		if l.Action == dsn.ActionFailed {
			n.Bounced++
		} else {
			n.Delayed++
		}
	}
	return gmailrelay.Change{Job: &n, Lines: lines}
}

// reportSender reports whether from is an address delivery reports come
// from: a mailer-daemon or postmaster, or Gmail's nobody@gmail.com.
func reportSender(from string) bool {
	a, err := mail.ParseAddress(from)
	if err != nil {
		return false
	}
	addr := strings.ToLower(a.Address)
	local, _, _ := strings.Cut(addr, "@")
	return local == "mailer-daemon" || local == "postmaster" || addr == "nobody@gmail.com"
}

// reportCounts counts the delivery reports read, per mailbox and outcome:
// failed and delayed recipients recorded, reports unmatched or
// unreadable, sending-limit notices.
type reportCounts struct {
	mu sync.Mutex
	n  map[[2]string]int
}

func (c *reportCounts) add(mailbox, what string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[[2]string]int{}
	}
	c.n[[2]string{mailbox, what}]++
}

var (
	descBounces      = prometheus.NewDesc("gmailrelay_bounces_total", "Recipients delivery reports said failed or were delayed, by mailbox and action.", []string{"mailbox", "action"}, nil)
	descLimitBounces = prometheus.NewDesc("gmailrelay_sending_limit_bounces_total", "Gmail's notices that the mailbox reached its sending limit.", []string{"mailbox"}, nil)
	descReportsOther = prometheus.NewDesc("gmailrelay_delivery_reports_ignored_total", "Messages from report senders the relay could not read, or reports naming none of its jobs.", []string{"mailbox", "why"}, nil)
)

// ReportCollector returns the Prometheus collector of the delivery reports
// the history tail read.
func (s *Sweeper) ReportCollector() prometheus.Collector { return reportCollector{&s.reports} }

type reportCollector struct{ c *reportCounts }

func (r reportCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descBounces
	ch <- descLimitBounces
	ch <- descReportsOther
}

func (r reportCollector) Collect(ch chan<- prometheus.Metric) {
	r.c.mu.Lock()
	defer r.c.mu.Unlock()
	for k, n := range r.c.n {
		switch k[1] {
		case dsn.ActionFailed, dsn.ActionDelayed:
			ch <- prometheus.MustNewConstMetric(descBounces, prometheus.CounterValue, float64(n), k[0], k[1])
		case "sending_limit":
			ch <- prometheus.MustNewConstMetric(descLimitBounces, prometheus.CounterValue, float64(n), k[0])
		default:
			ch <- prometheus.MustNewConstMetric(descReportsOther, prometheus.CounterValue, float64(n), k[0], k[1])
		}
	}
}
