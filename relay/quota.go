package relay

import (
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/gmailrelay/gmailrelay"
)

// Quota is the relay's own Gmail quota budget for one mailbox, in Gmail
// units per minute, shared by the send path and the sweeper. Sends take
// units at once or are refused (the caller gets 429, nothing is sent); the
// sweeper takes units only while a reserve for sends remains, so it yields
// to sends. Time comes from the injected clock. On a log several relays
// share, the bucket is this relay's share of the budget (SetShare).
type Quota struct {
	mu  sync.Mutex
	lim *rate.Limiter
	now func() time.Time
	// perMinute is the mailbox's budget; the bucket holds this relay's
	// share of it (SetShare).
	perMinute int
	replicas  int
	reserve   float64
	spent     atomic.Int64
	// pauseUntil is set when Gmail itself said 429: everybody waits.
	pauseUntil time.Time
	// backoff is the pause for Gmail's rate limits without a retry time
	// (ratelimit.go).
	backoff backoff
	// pauses, when set, shares pauseUntil with every relay on the log
	// (SharePauses).
	pauses  gmailrelay.MailboxPauses
	mailbox string
}

// NewQuota returns a budget of perMinute units per minute (burst: one
// minute's worth). now may be nil (time.Now).
func NewQuota(perMinute int, now func() time.Time) *Quota {
	if now == nil {
		now = time.Now
	}
	if perMinute <= 0 {
		perMinute = 6000
	}
	q := &Quota{
		lim:       rate.NewLimiter(rate.Limit(float64(perMinute)/60), perMinute),
		now:       now,
		perMinute: perMinute,
		replicas:  1,
	}
	q.reserve = reserveOf(perMinute)
	return q
}

// reserveOf is the send reserve of a bucket of burst units: room for one
// send, or a tenth of the bucket, whichever is more, but never more than
// half of it.
func reserveOf(burst int) float64 {
	return min(max(UnitsSend, float64(burst)/10), float64(burst)/2)
}

// SetShare makes the bucket this relay's share of the mailbox's budget
// when replicas relays (counted live on a shared log) spend it: it
// refills at PerMinute/replicas units per minute and holds as much, so
// the replicas together never take more than PerMinute. The send reserve
// and the reconciliation share follow the new size; units already in the
// bucket beyond it are dropped, units taken stay taken. A share is never
// smaller than one send (unless PerMinute is): with more replicas than
// sends per minute, each may still make one, and they refill at their
// share's pace. replicas < 1 counts as 1, which gives back the whole
// budget.
func (q *Quota) SetShare(replicas int) {
	replicas = max(replicas, 1)
	q.mu.Lock()
	defer q.mu.Unlock()
	if replicas == q.replicas {
		return
	}
	burst := max(q.perMinute/replicas, min(q.perMinute, UnitsSend))
	now := q.now()
	// The burst first: SetLimitAt's advance then clips the tokens to it.
	q.lim.SetBurstAt(now, burst)
	q.lim.SetLimitAt(now, rate.Limit(float64(q.perMinute)/float64(replicas)/60))
	q.replicas = replicas
	q.reserve = reserveOf(burst)
}

// Share returns the units per minute this relay's bucket holds: its part
// of PerMinute (SetShare), all of it when it spends the budget alone.
func (q *Quota) Share() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.lim.Burst()
}

// Replicas returns how many relays the budget is divided between (the
// last SetShare; 1 before any).
func (q *Quota) Replicas() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.replicas
}

// TakeForeground takes units for a send. When the budget cannot cover them
// now, it takes nothing and returns how long until it could.
func (q *Quota) TakeForeground(units int) (ok bool, retryIn time.Duration) {
	q.syncPause()
	q.mu.Lock()
	defer q.mu.Unlock()
	now := q.now()
	if now.Before(q.pauseUntil) {
		return false, q.pauseUntil.Sub(now)
	}
	r := q.lim.ReserveN(now, units)
	if !r.OK() {
		return false, time.Minute
	}
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return false, d
	}
	q.spent.Add(int64(units))
	return true, 0
}

// TakeBackground takes units for the sweeper only if a reserve for sends
// remains afterwards; otherwise it takes nothing and returns how long to
// wait before asking again.
func (q *Quota) TakeBackground(units int) (ok bool, wait time.Duration) {
	q.syncPause()
	q.mu.Lock()
	defer q.mu.Unlock()
	now := q.now()
	if ok, wait := q.availableAt(now, units, true); !ok {
		return false, wait
	}
	q.lim.AllowN(now, units)
	q.spent.Add(int64(units))
	return true, 0
}

// Available reports, without taking anything, whether units could be
// taken now (as background work: leaving the send reserve), and if not,
// how long until they could.
func (q *Quota) Available(units int, background bool) (ok bool, wait time.Duration) {
	q.syncPause()
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.availableAt(q.now(), units, background)
}

// availableAt is Available at now; q.mu is held.
func (q *Quota) availableAt(now time.Time, units int, background bool) (bool, time.Duration) {
	if now.Before(q.pauseUntil) {
		return false, q.pauseUntil.Sub(now)
	}
	need := float64(units)
	if background {
		need += q.reserve
	}
	have := q.lim.TokensAt(now)
	if have >= need {
		return true, 0
	}
	return false, time.Duration((need - have) / float64(q.lim.Limit()) * float64(time.Second))
}

// Pause stops every caller until d from now (Gmail answered 429).
func (q *Quota) Pause(d time.Duration) {
	q.mu.Lock()
	until := q.now().Add(d)
	if until.After(q.pauseUntil) {
		q.pauseUntil = until
	}
	q.mu.Unlock()
	q.publishPause(until)
}

// Spent returns the units taken so far.
func (q *Quota) Spent() int64 { return q.spent.Load() }

// Refund gives back units taken for an attempt that was not made (the
// front door found, inside the transaction, nothing to attempt). The
// bucket never holds more than its burst: units that would overflow it are
// dropped, as they would have refilled anyway.
func (q *Quota) Refund(units int) {
	if units <= 0 {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	now := q.now()
	room := float64(q.lim.Burst()) - q.lim.TokensAt(now)
	if give := min(float64(units), room); give >= 1 {
		q.lim.AllowN(now, -int(give)) // a negative take adds tokens
	}
	q.spent.Add(-int64(units))
}

// takeMode is who takes units: a caller's send, the sweeper, or the
// outbox's delivery loop.
type takeMode int

const (
	takeBackground takeMode = iota // the sweeper: leaves the send reserve
	takeForeground                 // a caller's send: may empty the bucket
	takeDelivery                   // the outbox: leaves the reconciliation share
)

// reconcileShare is the part of the per-minute budget delivery leaves for
// reconciliation, above the send reserve the sweeper itself leaves: a
// full queue never starves the sweeper (at least 10 %: docs/design.md#quota-rate-limits-and-the-daily-budget).
func (q *Quota) reconcileShare() float64 { return q.reserve + float64(q.lim.Burst())/10 }

// availableFor is Available for a take mode.
func (q *Quota) availableFor(units int, mode takeMode) (bool, time.Duration) {
	switch mode {
	case takeForeground:
		return q.Available(units, false)
	case takeDelivery:
		return q.AvailableDelivery(units)
	}
	return q.Available(units, true)
}

// takeFor takes units for a take mode.
func (q *Quota) takeFor(units int, mode takeMode) (bool, time.Duration) {
	switch mode {
	case takeForeground:
		return q.TakeForeground(units)
	case takeDelivery:
		return q.TakeDelivery(units)
	}
	return q.TakeBackground(units)
}

// AvailableDelivery reports, without taking anything, whether the outbox
// could take units now (leaving the reconciliation share), and if not how
// long until it could.
func (q *Quota) AvailableDelivery(units int) (bool, time.Duration) {
	q.syncPause()
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.deliveryAt(q.now(), units)
}

func (q *Quota) deliveryAt(now time.Time, units int) (bool, time.Duration) {
	if now.Before(q.pauseUntil) {
		return false, q.pauseUntil.Sub(now)
	}
	need := float64(units) + q.reconcileShare()
	have := q.lim.TokensAt(now)
	if have >= need {
		return true, 0
	}
	return false, time.Duration((need - have) / float64(q.lim.Limit()) * float64(time.Second))
}

// TakeDelivery takes units for the outbox only if the reconciliation
// share (the sweeper's reserve plus a tenth of the per-minute budget)
// remains afterwards.
func (q *Quota) TakeDelivery(units int) (bool, time.Duration) {
	q.syncPause()
	q.mu.Lock()
	defer q.mu.Unlock()
	now := q.now()
	if ok, wait := q.deliveryAt(now, units); !ok {
		return false, wait
	}
	q.lim.AllowN(now, units)
	q.spent.Add(int64(units))
	return true, 0
}

// PerMinute returns the mailbox's budget in units per minute, shared by
// every replica (Share is this relay's part of it).
func (q *Quota) PerMinute() int { return q.perMinute }

// Charge takes units whatever the bucket holds (it may go into debt):
// a restarted relay charges the sends the log shows in the last minute,
// so it does not spend Gmail's budget twice.
func (q *Quota) Charge(units int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	now := q.now()
	for units > 0 {
		n := min(units, q.lim.Burst())
		q.lim.ReserveN(now, n)
		units -= n
	}
}
