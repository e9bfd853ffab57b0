package outbox

import (
	"context"
	"time"

	"github.com/gmailrelay/gmailrelay/relay"
)

// Snapshot is the outbox as /v1/stats and /metrics show it (one mailbox
// today).
type Snapshot struct {
	// Depth is the number of queued jobs.
	Depth int `json:"queue_depth"`
	// OldestAge is how long the oldest queued job has waited since it was
	// accepted, in seconds (0 with an empty queue).
	OldestAge float64 `json:"oldest_queued_age_seconds"`
	// BudgetLeft is the attempts the daily sending budget still allows
	// over the rolling 24 h; DailyLimit is the budget.
	BudgetLeft int `json:"budget_left_today"`
	DailyLimit int `json:"daily_send_limit"`
}

// Estimate returns the outbox's snapshot and an estimated delivery time
// per queued job (by Message-ID): in delivery order, each job goes one
// send's worth of delivery quota (the per-minute budget less
// reconciliation's share) after the one before, not before its send_at,
// and the jobs beyond what the daily budget allows today wait for it to
// free up.
func Estimate(ctx context.Context, svc *relay.Service) (Snapshot, map[string]time.Time, error) {
	jobs, err := Queued(ctx, svc.Log())
	if err != nil {
		return Snapshot{}, nil, err
	}
	now := svc.Now()
	b := svc.Budget()
	snap := Snapshot{Depth: len(jobs), BudgetLeft: b.Left(), DailyLimit: b.Limit()}
	perMin := float64(svc.Quota().PerMinute()) * 0.9
	step := time.Duration(float64(relay.UnitsSend) / perMin * float64(time.Minute))
	_, quotaWait := svc.Quota().AvailableDelivery(relay.UnitsSend)
	_, budgetWait := b.Available()
	etas := make(map[string]time.Time, len(jobs))
	next := now.Add(quotaWait)
	oldest := now
	for i, j := range jobs {
		if j.CreatedAt.Before(oldest) {
			oldest = j.CreatedAt
		}
		at := next
		if !j.SendAt.IsZero() && j.SendAt.After(at) {
			at = j.SendAt
		}
		if snap.BudgetLeft >= 0 && i >= snap.BudgetLeft {
			at = at.Add(max(budgetWait, time.Second))
		}
		etas[j.MessageID] = at.UTC()
		next = at.Add(step)
	}
	snap.OldestAge = now.Sub(oldest).Seconds()
	return snap, etas, nil
}
