// Package outbox is the delivery loop of queued jobs: accept now, deliver
// when Gmail allows (docs/design.md#the-outbox). A job is queued by the send
// path when the mailbox's budget is spent or its send_at is ahead; the
// loop hands each one, per mailbox in order of send_at then acceptance,
// to relay.Service.Deliver — the same send path as a caller's send — as
// soon as the quota (leaving reconciliation its share) and the daily
// budget allow. Like the sweeper it is a service: RunOnce returns counts,
// Start/Stop run it in the background, the clock is injected, Wake makes
// it look at once.
package outbox

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/internal/lifecycle"
	"github.com/gmailrelay/gmailrelay/relay"
)

// Config wires an Outbox. Log and Relay are required.
type Config struct {
	// Log is the acceptance log whose queued jobs are delivered.
	Log gmailrelay.Store
	// Relay is the send path that delivers them (relay.Service).
	Relay Relay
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Logger receives one line per pass that delivered something (counts
	// only: never recipients or bodies).
	Logger zerolog.Logger
	// Interval is the longest the loop sleeps without a wake-up (default 30s).
	Interval time.Duration
}

// Mailboxes is the relay's set of mailboxes as the outbox uses it
// (relay.Service): each queued job goes through its own mailbox's quota
// and daily budget.
type Mailboxes interface {
	// MailboxOf returns the mailbox a job's Mailbox names.
	MailboxOf(name string) (*relay.Mailbox, error)
	// Mailboxes returns every mailbox.
	Mailboxes() []*relay.Mailbox
}

// Relay is the send path as the outbox uses it (relay.Service).
type Relay interface {
	Mailboxes
	// Deliver makes the attempt of a queued job.
	Deliver(ctx context.Context, id string) (relay.Result, error)
	// ClockFenced returns the clock fence's error while it is closed.
	ClockFenced() error
}

// Outbox is the delivery loop.
type Outbox struct {
	svc      Relay
	log      gmailrelay.Store
	now      func() time.Time
	logger   zerolog.Logger
	interval time.Duration
	wake     chan struct{}
	life     lifecycle.Loop
	passMu   sync.Mutex // one pass at a time (the loop's and RunOnce callers')
}

// Result counts what one pass did.
type Result struct {
	// Delivered attempts, by the outcome the send path recorded.
	Delivered int `json:"delivered"`
	Sent      int `json:"sent"`
	Failed    int `json:"failed"`
	Unknown   int `json:"unknown"`
	// Requeued attempts found Gmail rate-limiting or not reached: nothing
	// was sent and the job is queued again.
	Requeued int `json:"requeued"`
	// Left is the number of jobs still queued after the pass.
	Left int `json:"left"`
	// Next is how long until the first queued job could go (quota, daily
	// budget, send_at, or another replica's pass on its mailbox, see
	// busyRetry); zero when none is left that this relay serves.
	Next time.Duration `json:"next_ns"`
}

// busyRetry is how soon a pass looks again at a mailbox another replica's
// pass held (on a shared log).
const busyRetry = time.Second

// New returns an Outbox over cfg.Log and cfg.Relay.
func New(cfg Config) (*Outbox, error) {
	if cfg.Log == nil || cfg.Relay == nil {
		return nil, fmt.Errorf("outbox: Log and Relay are required")
	}
	o := &Outbox{svc: cfg.Relay, log: cfg.Log, now: cfg.Now, logger: cfg.Logger,
		interval: cfg.Interval, wake: make(chan struct{}, 1)}
	if o.now == nil {
		o.now = time.Now
	}
	if o.interval <= 0 {
		o.interval = 30 * time.Second
	}
	return o, nil
}

// Queued returns the queued jobs in delivery order: per mailbox, by
// send_at (acceptance time when none), then acceptance, then Message-ID.
func Queued(ctx context.Context, log gmailrelay.Store) ([]gmailrelay.Job, error) {
	jobs, err := log.ByState(ctx, gmailrelay.StateQueued, 0)
	if err != nil {
		return nil, err
	}
	sortQueued(jobs)
	return jobs, nil
}

// claimQueued is Queued for a delivery pass. On a shared log
// (PostgreSQL, gmailrelay.QueueClaimer) it claims the queues of the
// mailboxes of this relay's policy that no other replica's pass holds and
// returns only their jobs, so that one replica at a time delivers a
// mailbox's queue, head first; the others' queued jobs are counted (Busy,
// Unserved), and the names of the mailboxes the policy lacks returned in
// unserved. On bbolt it is Queued, with nothing else. Release must be
// called once the pass is done.
func (o *Outbox) claimQueued(ctx context.Context) (claim gmailrelay.QueueClaim, unserved map[string]bool, err error) {
	c, ok := o.log.(gmailrelay.QueueClaimer)
	if !ok {
		claim.Jobs, err = Queued(ctx, o.log)
		claim.Release = func() {}
		return claim, nil, err
	}
	unserved = map[string]bool{}
	claim, err = c.ClaimQueued(ctx, func(name string) (string, bool) {
		m, err := o.svc.MailboxOf(name)
		if err != nil {
			unserved[name] = true
			return "", false
		}
		return m.Name(), true
	})
	sortQueued(claim.Jobs)
	return claim, unserved, err
}

// sortQueued puts jobs in delivery order (see Queued).
func sortQueued(jobs []gmailrelay.Job) {
	sort.SliceStable(jobs, func(i, k int) bool {
		a, b := jobs[i], jobs[k]
		if a.Mailbox != b.Mailbox {
			return a.Mailbox < b.Mailbox
		}
		if ra, rb := readyAt(a), readyAt(b); !ra.Equal(rb) {
			return ra.Before(rb)
		}
		if !a.CreatedAt.Equal(b.CreatedAt) {
			return a.CreatedAt.Before(b.CreatedAt)
		}
		return a.MessageID < b.MessageID
	})
}

func readyAt(j gmailrelay.Job) time.Time {
	if !j.SendAt.IsZero() {
		return j.SendAt
	}
	return j.CreatedAt
}

// RunOnce delivers every queued job that may go now, in order per
// mailbox. In each mailbox it stops at the first job that must wait (its
// send_at, the mailbox's quota, daily budget or a Gmail pause): nothing of
// that mailbox overtakes it, while the other mailboxes carry on. On a
// shared log it walks only the mailboxes it claimed for the pass (see
// claimQueued); Result.Left still counts every queued job, the others'
// too. While the relay's clock fence is closed (relay.Service.ClockFenced)
// a pass delivers nothing and returns the fence's error.
func (o *Outbox) RunOnce(ctx context.Context) (Result, error) {
	o.passMu.Lock()
	defer o.passMu.Unlock()
	var res Result
	if err := o.svc.ClockFenced(); err != nil {
		return res, err // a delivery's lease would mislead the other replicas
	}
	claim, unserved, err := o.claimQueued(ctx)
	if err != nil {
		return res, err
	}
	defer claim.Release()
	for name := range unserved {
		o.logger.Warn().Str("mailbox", name).Msg("queued jobs of a mailbox this relay's policy does not have: left to a replica that has it")
	}
	jobs := claim.Jobs
	res.Left = claim.Busy + claim.Unserved
	if claim.Busy > 0 {
		// Another replica's pass is delivering a mailbox: take it over
		// soon if that pass leaves jobs behind (new ones, or its own
		// quota spent).
		res.Next = busyRetry
	}
	// The claimed mailboxes' queues are whole, so their holds are known.
	held := heldMailboxes(o.svc, jobs)
	waiting := map[*relay.Mailbox]bool{} // mailboxes done for this pass
	hold := func(m *relay.Mailbox, wait time.Duration) {
		waiting[m] = true
		if res.Next == 0 || wait < res.Next {
			res.Next = wait
		}
	}
	for i, j := range jobs {
		m, err := o.svc.MailboxOf(j.Mailbox)
		if err != nil {
			res.Left++
			o.logger.Error().Err(err).Str("message_id", j.MessageID).Msg("queued job of a mailbox the policy no longer has: it stays queued")
			continue
		}
		if waiting[m] {
			res.Left++
			continue
		}
		now := o.now()
		wait := time.Duration(0)
		if !j.SendAt.IsZero() && j.SendAt.After(now) {
			wait = j.SendAt.Sub(now)
		}
		if t := held[m]; t.After(now) {
			wait = max(wait, t.Sub(now))
		}
		if ok, in := m.Budget().Available(); !ok {
			wait = max(wait, in)
		}
		if ok, in := m.Quota().AvailableDelivery(relay.UnitsSend); !ok {
			wait = max(wait, in)
		}
		if wait > 0 {
			res.Left++
			hold(m, wait)
			continue
		}
		r, err := o.svc.Deliver(ctx, j.MessageID)
		switch {
		case relay.IsRateLimited(err):
			var re *relay.Error
			wait := time.Second
			if errors.As(err, &re) && re.RetryAfter > 0 {
				wait = time.Duration(re.RetryAfter) * time.Second
			}
			res.Left++
			hold(m, wait)
			continue
		case relay.ErrorCode(err) == relay.CodeConflict:
			continue // cancelled meanwhile
		case err != nil:
			res.Left += len(jobs) - i
			return res, fmt.Errorf("deliver %s: %w", j.MessageID, err)
		}
		res.Delivered++
		switch r.Job.State {
		case gmailrelay.StateSent:
			res.Sent++
		case gmailrelay.StateFailed:
			res.Failed++
		case gmailrelay.StateQueued:
			// Gmail rate-limited it or was not reached: it waits again at
			// the head of its mailbox's queue.
			res.Requeued++
			res.Left++
			hold(m, max(r.RetryIn, time.Second))
		default:
			res.Unknown++
		}
	}
	o.logPass(res)
	return res, nil
}

// heldMailboxes returns, per mailbox, the latest relay.HeldUntil of the
// queued jobs: while one of them waits after not reaching Gmail, the whole
// mailbox does, as it waits behind its head job. On a shared log the
// queued jobs are a claimed mailbox's whole queue, read after the claim,
// so a hold another replica's pass left is seen.
func heldMailboxes(svc Mailboxes, queued []gmailrelay.Job) map[*relay.Mailbox]time.Time {
	held := map[*relay.Mailbox]time.Time{}
	for _, j := range queued {
		t := relay.HeldUntil(j)
		if t.IsZero() {
			continue
		}
		if m, err := svc.MailboxOf(j.Mailbox); err == nil && t.After(held[m]) {
			held[m] = t
		}
	}
	return held
}

func (o *Outbox) logPass(res Result) {
	if res.Delivered > 0 {
		o.logger.Info().Int("delivered", res.Delivered).Int("sent", res.Sent).Int("failed", res.Failed).
			Int("unknown", res.Unknown).Int("requeued", res.Requeued).Int("left", res.Left).Msg("outbox pass")
	}
}

// Wake makes the loop run a pass now (a job was queued). It never blocks.
func (o *Outbox) Wake() { lifecycle.Wake(o.wake) }

// Start runs the loop in the background: a pass at once, then one when
// woken, when the first queued job may go, or every Interval. Starting a
// started (or stopped) Outbox does nothing.
func (o *Outbox) Start(ctx context.Context) { o.life.Start(ctx, o.loop) }

// Stop ends the loop and waits for the pass in progress.
func (o *Outbox) Stop() { o.life.Stop() }

func (o *Outbox) loop(ctx context.Context) {
	lifecycle.Repeat(ctx, o.wake, func(ctx context.Context) time.Duration {
		res, err := o.RunOnce(ctx)
		if err != nil {
			if !errors.Is(err, relay.ErrClockSkew) { // the fence logged it
				o.logger.Error().Err(err).Msg("outbox pass")
			}
		} else if res.Left > 0 && res.Next > 0 {
			return min(res.Next, o.interval)
		}
		return o.interval
	})
}
