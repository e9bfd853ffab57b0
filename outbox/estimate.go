package outbox

import (
	"context"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/relay"
)

// Snapshot is the outbox as /v1/stats and /metrics show it: totals over
// the relay's mailboxes, and each mailbox's own figures.
type Snapshot struct {
	// Depth is the number of queued jobs.
	Depth int `json:"queue_depth"`
	// OldestAge is how long the oldest queued job has waited since it was
	// accepted, in seconds (0 with an empty queue).
	OldestAge float64 `json:"oldest_queued_age_seconds"`
	// BudgetLeft is the attempts the daily sending budgets still allow
	// over the rolling 24 h; DailyLimit is the budget (summed over the
	// mailboxes).
	BudgetLeft int `json:"budget_left_today"`
	DailyLimit int `json:"daily_send_limit"`
	// Mailboxes holds the same figures per mailbox, by name.
	Mailboxes map[string]MailboxSnapshot `json:"mailboxes"`
}

// MailboxSnapshot is one mailbox's outbox figures.
type MailboxSnapshot struct {
	Depth      int     `json:"queue_depth"`
	OldestAge  float64 `json:"oldest_queued_age_seconds"`
	BudgetLeft int     `json:"budget_left_today"`
	DailyLimit int     `json:"daily_send_limit"`
}

// Estimate returns the outbox's snapshot and an estimated delivery time
// per queued job (by Message-ID): in each mailbox's delivery order, each
// job goes one send's worth of that mailbox's delivery quota (the
// per-minute budget less reconciliation's share) after the one before, not
// before its send_at, and the jobs beyond what the mailbox's daily budget
// allows today wait for it to free up. log holds the queued jobs; svc
// gives their mailboxes; now is the relay's clock reading.
func Estimate(ctx context.Context, log gmailrelay.Store, svc Mailboxes, now time.Time) (Snapshot, map[string]time.Time, error) {
	jobs, err := Queued(ctx, log)
	if err != nil {
		return Snapshot{}, nil, err
	}
	held := heldMailboxes(svc, jobs)
	type line struct {
		next       time.Time
		step       time.Duration
		budgetWait time.Duration
		snap       MailboxSnapshot
		oldest     time.Time
	}
	lines := map[*relay.Mailbox]*line{}
	snap := Snapshot{Depth: len(jobs), Mailboxes: map[string]MailboxSnapshot{}}
	var order []*relay.Mailbox
	for _, m := range svc.Mailboxes() {
		b, q := m.Budget(), m.Quota()
		perMin := float64(q.PerMinute()) * 0.9
		_, quotaWait := q.AvailableDelivery(relay.UnitsSend)
		_, budgetWait := b.Available()
		lines[m] = &line{next: latest(now.Add(quotaWait), held[m]), step: time.Duration(float64(relay.UnitsSend) / perMin * float64(time.Minute)),
			budgetWait: budgetWait, snap: MailboxSnapshot{BudgetLeft: b.Left(), DailyLimit: b.Limit()}, oldest: now}
		order = append(order, m)
	}
	etas := make(map[string]time.Time, len(jobs))
	oldest := now
	for _, j := range jobs {
		if j.CreatedAt.Before(oldest) {
			oldest = j.CreatedAt
		}
		m, err := svc.MailboxOf(j.Mailbox)
		if err != nil {
			continue // no mailbox sends it: no estimate
		}
		l := lines[m]
		if j.CreatedAt.Before(l.oldest) {
			l.oldest = j.CreatedAt
		}
		at := l.next
		if !j.SendAt.IsZero() && j.SendAt.After(at) {
			at = j.SendAt
		}
		if l.snap.BudgetLeft >= 0 && l.snap.Depth >= l.snap.BudgetLeft {
			at = at.Add(max(l.budgetWait, time.Second))
		}
		l.snap.Depth++
		etas[j.MessageID] = at.UTC()
		l.next = at.Add(l.step)
	}
	for _, m := range order {
		l := lines[m]
		l.snap.OldestAge = now.Sub(l.oldest).Seconds()
		snap.Mailboxes[m.Name()] = l.snap
		snap.BudgetLeft += l.snap.BudgetLeft
		snap.DailyLimit += l.snap.DailyLimit
	}
	snap.OldestAge = now.Sub(oldest).Seconds()
	return snap, etas, nil
}

// latest is the later of a and b.
func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
