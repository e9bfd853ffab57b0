package relay

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/internal/lifecycle"
	"github.com/gmailrelay/gmailrelay/policy"
)

// Config wires a Service. Log, Policy and a Provider (Provider, or one
// per mailbox in Mailboxes) are required. A Provider that is also a
// FaultInjector (faultmodes wraps one around the Gmail client) injects
// faults into its mailbox's sends.
//
// The Service has one Mailbox per mailbox of the policy (policy.MailboxList:
// just "default" when the policy names none). Provider, Quota, Budget and
// UserID are the default mailbox's (and Provider every mailbox's that
// Mailboxes gives none).
type Config struct {
	Log      gmailrelay.Store
	Provider Provider
	Policy   *policy.Policy
	// Quota is the default mailbox's Gmail budget; nil means
	// NewQuota(QuotaPerMinute, Now).
	Quota *Quota
	// QuotaPerMinute is the quota of a mailbox whose policy sets no
	// quota_per_minute (default 6000).
	QuotaPerMinute int
	// Budget is the default mailbox's daily sending budget; nil means one
	// counted from the log with the policy's daily_send_limit.
	Budget *Budget
	// Mailboxes overrides, per mailbox name, its client, quota, budget,
	// userId and health (see MailboxConfig).
	Mailboxes map[string]MailboxConfig
	// OnQueued, when set, is called after a job was queued (the outbox's
	// wake-up). It must not block.
	OnQueued func()
	// UserID is the default mailbox's Gmail userId when the policy gives
	// it no address ("me" by default).
	UserID string
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// ManualClock says Now is a manual clock (tests, serve --clock
	// manual): it runs apart from the other replicas' clocks by design,
	// so the clock fence (CheckClock) is off.
	ManualClock bool
	// Logger receives structured logs (never bodies, tokens or recipients).
	Logger zerolog.Logger
	// SendTimeout bounds each Gmail call (default 60s). The call runs on its
	// own context: a caller that goes away never cancels it.
	SendTimeout time.Duration
	// Observer, when set, hears about every attempt outcome (metrics).
	Observer Observer
	// CrashPoint, when set, is called at the named points of the send path
	// (CrashAfterForwardingLogged, CrashAfterGmailAnswer,
	// CrashAfterOutcomeLogged). Crash tests make it kill the process.
	CrashPoint func(point string)
}

// Crash points of the send path, for CrashPoint.
const (
	CrashAfterForwardingLogged = "after-forwarding-logged" // forwarding is durable; Gmail not called yet
	CrashAfterGmailAnswer      = "after-gmail-answer"      // Gmail answered; nothing recorded yet
	CrashAfterOutcomeLogged    = "after-outcome-logged"    // outcome durable; the caller has no answer yet
)

// Observer hears about attempts, for metrics. Calls are synchronous and
// must be cheap.
type Observer interface {
	// Attempted is called once per Gmail send attempt with its outcome.
	Attempted(channel string, o Outcome, took time.Duration)
	// HandleChecked is called after a Message-ID was read back.
	HandleChecked(kept bool)
}

// Service is the send path: admission through the acceptance log, the Gmail
// call, the recording of its outcome, and human resolutions.
type Service struct {
	log      gmailrelay.Store
	policy   *policy.Policy
	boxes    []*Mailbox // the default mailbox (or the first by name) first
	onQueued func()
	now      func() time.Time
	// accepted is the last new job's CreatedAt (UnixNano); see acceptedAt.
	accepted atomic.Int64
	logger   zerolog.Logger
	timeout  time.Duration
	obs      Observer
	point    func(string)

	inflight sync.WaitGroup // Gmail calls in progress, for graceful shutdown
	gate     keyGate        // one admission per Message-ID at a time
	// shared: the log is shared by replicas (PostgreSQL), so a mailbox's
	// daily budget and pause live in it and are read in transactions of
	// their own; Send then admits before its transaction (see Send).
	shared bool
	// clock is the clock fence of a replica on a shared log (clockfence.go).
	clock clockFence
	// sendAsLoop runs WatchSendAs.
	sendAsLoop lifecycle.Loop
	// unlogged are the attempts whose record the log refused, for the
	// LogWatch to settle (logwatch.go).
	unlogged unlogged
}

// SendOptions adjust one Send.
type SendOptions struct {
	// Queue: when the budget is spent (or other jobs wait in the outbox),
	// log the job queued instead of refusing it with CodeRateLimited; and
	// when the attempt finds Gmail rate-limiting or not reached, put the
	// job back in the queue instead of failing it (see requeues).
	// A job with a future Prepared.SendAt is queued whatever Queue says.
	Queue bool
}

// Result is what a Send or an attempt did.
type Result struct {
	// Job is the job as the log now holds it.
	Job gmailrelay.Job
	// Replayed: nothing was attempted; Job is an earlier result.
	Replayed bool
	// Fault is the fault injected into this attempt (zero if none).
	Fault Fault
	// Dropped: a fault dropped Gmail's answer (FaultError); the caller
	// must get no answer (or 504 when Fault.Drop is "504").
	Dropped bool
	// RetryIn, when Gmail answered this attempt with a rate limit, is how
	// long the mailbox is paused (the caller's Retry-After).
	RetryIn time.Duration
}

// New opens the send path and recovers from a crash: every job still in
// forwarding becomes unknown with an ambiguous line (reason
// recovered_after_restart), its check scheduled after its channel's grace.
// On a shared log it measures its clock against the other replicas' first
// (the clock fence, CheckClock) and recovers only the attempts whose lease ran
// out (RecoverExpired), none while the fence is closed.
func New(ctx context.Context, cfg Config) (*Service, error) {
	if cfg.Log == nil || cfg.Policy == nil {
		return nil, errors.New("relay: Log and Policy are required")
	}
	s := &Service{shared: gmailrelay.IsShared(cfg.Log),
		log: cfg.Log, policy: cfg.Policy,
		onQueued: cfg.OnQueued, now: cfg.Now, logger: cfg.Logger,
		timeout: cfg.SendTimeout, obs: cfg.Observer, point: cfg.CrashPoint,
	}
	if s.point == nil {
		s.point = func(string) {}
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.timeout <= 0 {
		s.timeout = 60 * time.Second
	}
	s.initClockFence(cfg)
	if err := s.buildMailboxes(ctx, cfg); err != nil {
		return nil, err
	}
	for _, m := range s.boxes {
		if m.provider == nil {
			return nil, fmt.Errorf("relay: mailbox %s has no Provider", m.name)
		}
		m.faults, _ = m.provider.(FaultInjector)
	}
	if err := s.RefreshQuotaShares(ctx); err != nil {
		s.logger.Warn().Err(err).Msg("quota: count the replicas on the log (each mailbox's quota stays whole until the sweeper counts them)")
	}
	recover, what := s.recover, "recovered jobs left in forwarding by a crash"
	if gmailrelay.IsShared(s.log) {
		// Other replicas' attempts in flight are theirs until their lease
		// runs out; the sweeper takes over expired ones (RecoverExpired).
		// Their leases are read on this replica's clock: measure it first
		// (a failed measurement leaves the fence open).
		recover, what = s.RecoverExpired, "jobs left in forwarding past their lease"
		_ = s.CheckClock(ctx)
	}
	n, err := recover(ctx)
	if errors.Is(err, ErrClockSkew) {
		n, err = 0, nil // CheckClock said why; the sweeper recovers once the clock is fixed
	}
	if err != nil {
		return nil, fmt.Errorf("recover: %w", err)
	}
	if n > 0 {
		s.logger.Warn().Int("jobs", n).Msg(what + ": now unknown, the sweeper will resolve them")
	}
	return s, nil
}

func (s *Service) recover(ctx context.Context) (int, error) {
	n := 0
	for {
		jobs, err := s.log.ByState(ctx, gmailrelay.StateForwarding, 500)
		if err != nil {
			return n, err
		}
		if len(jobs) == 0 {
			return n, nil
		}
		for _, j := range jobs {
			if _, err := s.markUnknown(ctx, j.MessageID, j.Attempts, Outcome{Verdict: Unknown, Reason: gmailrelay.ReasonRecoveredAfterRestart}, ""); err != nil {
				return n, err
			}
			n++
		}
	}
}

// RefreshQuotaShares divides each mailbox's per-minute quota between the
// relays alive on a log they share (the quota is shared:
// docs/design.md#several-relays-on-one-postgresql): it counts them
// (gmailrelay.ReplicaCounter) and gives every mailbox's Quota its share
// (Quota.SetShare). New calls it, and so does every sweeper pass on a
// shared log, so shares follow replicas as they come and go. On a log
// that is not shared it does nothing. When the count fails it returns the
// error and leaves the shares as they were: sends never wait for it.
func (s *Service) RefreshQuotaShares(ctx context.Context) error {
	rc, ok := s.log.(gmailrelay.ReplicaCounter)
	if !s.shared || !ok {
		return nil
	}
	n, err := rc.LiveReplicas(ctx)
	if err != nil {
		return fmt.Errorf("count replicas: %w", err)
	}
	for _, m := range s.boxes {
		m.quota.SetShare(n)
	}
	return nil
}

// Lease is how long an attempt in flight belongs to the process that
// started it: twice the Gmail call's deadline, so an owner that is alive has
// recorded its outcome long before.
func (s *Service) Lease() time.Duration { return 2 * s.timeout }

// RecoverExpired turns unknown (reason lease_expired) every forwarding job
// whose lease has run out: its owner, this process or another replica on a
// shared log, died before recording the outcome. The lease is the owner's
// (Job.LeaseUntil, set from its own --send-timeout when the attempt
// started), so a replica with a shorter timeout never takes an attempt a
// slower owner is still waiting on; a job without one (started by an
// older gmailrelay) gets this process's Lease from its start (UpdatedAt).
// Replicas compare times from their own clocks: every lease is honoured
// for LeaseMargin more (two replicas the fence lets through may stand up
// to twice MaxClockSkew apart), and a replica whose clock the fence found
// further off than MaxClockSkew takes nothing (it returns ClockFenced's
// error, cause ErrClockSkew). The sweeper calls it on every pass on a shared log. An
// owner that is only late (its Gmail call outlived its lease and the
// margin) finds the job no longer forwarding and records nothing (its
// caller gets an error); the job is then the sweeper's, like any unknown
// one: a send Gmail took is found by search (or goes to review on a
// review channel).
// LeaseMargin is how much longer than its lease an attempt of another
// replica is left alone (RecoverExpired): each replica the clock fence lets through is
// within MaxClockSkew of the reference (plus its measurement's
// uncertainty, under a second on any sane network), so two of them are
// within twice that.
const LeaseMargin = 2*MaxClockSkew + time.Second

func (s *Service) RecoverExpired(ctx context.Context) (int, error) {
	if err := s.ClockFenced(); err != nil {
		return 0, err
	}
	jobs, err := s.log.ByState(ctx, gmailrelay.StateForwarding, 0)
	if err != nil {
		return 0, err
	}
	now := s.now()
	n := 0
	for _, j := range jobs {
		until := j.LeaseUntil
		if until.IsZero() {
			until = j.UpdatedAt.Add(s.Lease())
		}
		// The owner's clock may be up to LeaseMargin behind ours.
		if !now.After(until.Add(LeaseMargin)) {
			continue
		}
		_, err := s.markUnknown(ctx, j.MessageID, j.Attempts, Outcome{Verdict: Unknown, Reason: gmailrelay.ReasonLeaseExpired}, "")
		switch {
		case errors.Is(err, errStale):
			// Its owner recorded it meanwhile.
		case err != nil:
			return n, err
		default:
			n++
		}
	}
	return n, nil
}

// tieWindow bounds how far acceptedAt moves a stamp past the clock.
const tieWindow = time.Millisecond

// acceptedAt is the CreatedAt of a new job: now, made a nanosecond later
// than the last one this Service gave when the clock has not moved on
// since (a manual clock; a coarse one; within tieWindow). The outbox
// delivers jobs of one send_at in CreatedAt order, and the order is
// acceptance order (docs/design.md#the-outbox): taken inside the job's
// creating transaction, the stamps follow it. A clock that stepped back further than tieWindow is
// taken as it is: a job's CreatedAt never runs ahead of its own lines.
func (s *Service) acceptedAt() time.Time {
	now := s.now()
	for {
		last := s.accepted.Load()
		t := now
		if d := last + 1 - now.UnixNano(); d > 0 && d <= int64(tieWindow) {
			t = now.Add(time.Duration(d))
		}
		if s.accepted.CompareAndSwap(last, t.UnixNano()) {
			return t
		}
	}
}

// Wait blocks until every Gmail call in progress has been recorded.
func (s *Service) Wait() { s.inflight.Wait() }
