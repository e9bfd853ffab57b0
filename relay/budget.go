package relay

import (
	"context"
	"sync"
	"time"

	"github.com/gmailrelay/gmailrelay"
)

// BudgetWindow is the daily sending budget's rolling window.
const BudgetWindow = 24 * time.Hour

// Budget is one mailbox's daily sending budget: at most Limit attempts
// handed to Gmail per rolling 24 h, resends included.
//
// On a log of one process (bbolt) it is counted from the log's index of
// forwarding lines when it is made (so it comes back after a restart) and
// kept in memory from then on; a take and its refund are serialised, so
// concurrent sends never overshoot the limit.
//
// On a shared log (gmailrelay.SendBudget: PostgreSQL) nothing is kept in
// memory: every Available, Take and Left counts the shared index at that
// moment, and a Take holds its attempt in the database (serialised per
// mailbox across replicas) until its forwarding line takes the hold over,
// so a budget spent through one replica is spent for all. A database error
// refuses the attempt (retry in a second).
type Budget struct {
	mu      sync.Mutex
	limit   int
	now     func() time.Time
	times   []time.Time // attempts in the window, oldest first
	shared  gmailrelay.SendBudget
	mailbox string
	// spentUntil, when later than now, holds the budget spent whatever
	// it counts (Exhaust).
	spentUntil time.Time
}

// budgetDBTimeout bounds one shared-budget query.
const budgetDBTimeout = 10 * time.Second

// NewBudget counts mailbox's attempts of the last 24 h from the log.
// now may be nil (time.Now); limit <= 0 means no limit.
func NewBudget(ctx context.Context, log gmailrelay.Store, mailbox string, limit int, now func() time.Time) (*Budget, error) {
	if now == nil {
		now = time.Now
	}
	b := &Budget{limit: limit, now: now, mailbox: mailbox}
	if sb, ok := log.(gmailrelay.SendBudget); ok && gmailrelay.IsShared(log) {
		b.shared = sb
		return b, nil
	}
	if log != nil {
		times, err := log.SendTimes(ctx, mailbox, now().Add(-BudgetWindow))
		if err != nil {
			return nil, err
		}
		b.times = times
	}
	return b, nil
}

// Limit returns the budget's limit (0: none).
func (b *Budget) Limit() int { return b.limit }

// expireLocked drops the attempts older than the window.
func (b *Budget) expireLocked(now time.Time) {
	cut := now.Add(-BudgetWindow)
	i := 0
	for i < len(b.times) && !b.times[i].After(cut) {
		i++
	}
	b.times = b.times[i:]
}

// availableLocked reports whether one more attempt fits, or how long
// until it does (when the oldest attempt that must leave the window does).
func (b *Budget) availableLocked(now time.Time) (bool, time.Duration) {
	if now.Before(b.spentUntil) {
		return false, max(b.spentUntil.Sub(now), time.Second)
	}
	if b.limit <= 0 {
		return true, 0
	}
	b.expireLocked(now)
	if len(b.times) < b.limit {
		return true, 0
	}
	frees := b.times[len(b.times)-b.limit].Add(BudgetWindow)
	return false, max(frees.Sub(now), time.Second)
}

// Available reports, without taking, whether one attempt fits now, and if
// not how long until it does.
func (b *Budget) Available() (bool, time.Duration) {
	if b.shared != nil {
		return b.ask(false)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.availableLocked(b.now())
}

// Exhaust holds the budget spent, whatever it counts, until the oldest
// attempt of the window leaves it (a day after now when it holds none):
// Gmail said the mailbox reached its sending limit, which the relay's own
// count did not see (a lower limit than the policy's, sends made
// elsewhere). Only this process's budget: a shared budget (PostgreSQL)
// is not changed.
func (b *Budget) Exhaust() {
	if b.shared != nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	b.expireLocked(now)
	until := now.Add(BudgetWindow)
	if len(b.times) > 0 {
		until = b.times[0].Add(BudgetWindow)
	}
	if until.After(b.spentUntil) {
		b.spentUntil = until
	}
}

// Take counts one attempt now if it fits; otherwise it counts nothing and
// returns how long until one fits.
func (b *Budget) Take() (bool, time.Duration) {
	if b.shared != nil {
		return b.ask(true)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	if ok, in := b.availableLocked(now); !ok {
		return false, in
	}
	b.times = append(b.times, now)
	return true, 0
}

// Refund gives back the latest take (an attempt that was then not made).
func (b *Budget) Refund() {
	if b.shared != nil {
		if b.limit > 0 {
			ctx, cancel := context.WithTimeout(context.Background(), budgetDBTimeout)
			defer cancel()
			_ = b.shared.ReleaseSend(ctx, b.mailbox) // a hold left behind stops counting after a few minutes
		}
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if n := len(b.times); n > 0 {
		b.times = b.times[:n-1]
	}
}

// Left returns how many attempts fit in the window now (-1 without a
// limit).
func (b *Budget) Left() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.limit <= 0 {
		return -1
	}
	if b.shared != nil {
		ans, err := b.query(false)
		if err != nil {
			return 0
		}
		return max(b.limit-ans.Used, 0)
	}
	b.expireLocked(b.now())
	return max(b.limit-len(b.times), 0)
}

// ask is Available (hold false) or Take (hold true) on a shared log.
func (b *Budget) ask(hold bool) (bool, time.Duration) {
	if b.limit <= 0 {
		return true, 0
	}
	now := b.now()
	ans, err := b.query(hold)
	if err != nil {
		return false, time.Second
	}
	if ans.OK {
		return true, 0
	}
	return false, max(ans.Frees.Add(BudgetWindow).Sub(now), time.Second)
}

func (b *Budget) query(hold bool) (gmailrelay.BudgetAnswer, error) {
	ctx, cancel := context.WithTimeout(context.Background(), budgetDBTimeout)
	defer cancel()
	now := b.now()
	return b.shared.SendBudget(ctx, b.mailbox, b.limit, now.Add(-BudgetWindow), now, hold)
}
