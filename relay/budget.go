package relay

import (
	"context"
	"sync"
	"time"

	"github.com/gmailrelay/gmailrelay/acceptlog"
)

// BudgetWindow is the daily sending budget's rolling window.
const BudgetWindow = 24 * time.Hour

// Budget is one mailbox's daily sending budget: at most Limit attempts
// handed to Gmail per rolling 24 h, resends included. It is counted from
// the log's index of forwarding lines when it is made (so it comes back
// after a restart) and kept in memory from then on; a take and its
// refund are serialised, so concurrent sends never overshoot the limit.
type Budget struct {
	mu    sync.Mutex
	limit int
	now   func() time.Time
	times []time.Time // attempts in the window, oldest first
}

// NewBudget counts mailbox's attempts of the last 24 h from the log.
// now may be nil (time.Now); limit <= 0 means no limit.
func NewBudget(ctx context.Context, log acceptlog.Store, mailbox string, limit int, now func() time.Time) (*Budget, error) {
	if now == nil {
		now = time.Now
	}
	b := &Budget{limit: limit, now: now}
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
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.availableLocked(b.now())
}

// Take counts one attempt now if it fits; otherwise it counts nothing and
// returns how long until one fits.
func (b *Budget) Take() (bool, time.Duration) {
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
	b.expireLocked(b.now())
	return max(b.limit-len(b.times), 0)
}
