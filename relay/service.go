package relay

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmailrelay/gmailrelay/acceptlog"
	"github.com/gmailrelay/gmailrelay/faultmodes"
	"github.com/gmailrelay/gmailrelay/policy"
)

// Config wires a Service. Log, Policy and a Provider (Provider, or one
// per mailbox in Mailboxes) are required.
//
// The Service has one Mailbox per mailbox of the policy (policy.MailboxList:
// just "default" when the policy names none). Provider, Quota, Budget and
// UserID are the default mailbox's (and Provider every mailbox's that
// Mailboxes gives none).
type Config struct {
	Log      acceptlog.Store
	Provider Provider
	Policy   *policy.Policy
	// Faults holds the runtime fault rules; nil means none.
	Faults *faultmodes.Set
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
	// Logger receives structured logs (never bodies, tokens or recipients).
	Logger zerolog.Logger
	// SendTimeout bounds each Gmail call (default 60s). The call runs on its
	// own context: a caller that goes away never cancels it.
	SendTimeout time.Duration
	// Crash is called by crash-after-forward right after Gmail accepted,
	// before anything is logged. It must not return (os.Exit). nil: the
	// fault is treated as forward-then-drop-response.
	Crash func()
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
	// Faulted is called when a fault rule decides an attempt.
	Faulted(mode faultmodes.Mode)
	// HandleChecked is called after a Message-ID was read back.
	HandleChecked(kept bool)
}

// Service is the send path: admission through the acceptance log, the Gmail
// call, the recording of its outcome, and human resolutions.
type Service struct {
	log      acceptlog.Store
	policy   *policy.Policy
	faults   *faultmodes.Set
	boxes    []*Mailbox // the default mailbox (or the first by name) first
	onQueued func()
	now      func() time.Time
	logger   zerolog.Logger
	timeout  time.Duration
	crash    func()
	obs      Observer
	point    func(string)

	inflight sync.WaitGroup // Gmail calls in progress, for graceful shutdown
	gate     keyGate        // one admission per Message-ID at a time
	// shared: the log is shared by replicas (PostgreSQL), so a mailbox's
	// daily budget and pause live in it and are read in transactions of
	// their own; Send then admits before its transaction (see Send).
	shared bool
}

// SendOptions adjust one Send.
type SendOptions struct {
	// Fault, when non-zero, replaces the rule-based decision (the
	// X-Relay-Fault header, already authorised by the caller).
	Fault faultmodes.Decision
	// Queue: when the budget is spent (or other jobs wait in the outbox),
	// log the job queued instead of refusing it with CodeRateLimited.
	// A job with a future Prepared.SendAt is queued whatever Queue says.
	Queue bool
	// Timing, when non-nil, is filled with where the Send's time went (the
	// benchmark's phase breakdown); nil costs nothing.
	Timing *Timing
}

// Timing is where one Send's time went: admission before the log (the
// channel, the front door's read of the job, quota and fault rules), the
// admission commit (the forwarding line made durable), the Gmail call,
// and the outcome commit. A phase the Send did not reach stays zero.
type Timing struct {
	Admit, FirstCommit, Gmail, OutcomeCommit time.Duration
}

// Result is what a Send or an attempt did.
type Result struct {
	// Job is the job as the log now holds it.
	Job acceptlog.Job
	// Replayed: nothing was attempted; Job is an earlier result.
	Replayed bool
	// Fault is the fault decision taken for this attempt (zero if none).
	Fault faultmodes.Decision
	// Dropped: forward-then-drop-response fired; the caller must get no
	// answer (or 504 when Fault.Drop is "504").
	Dropped bool
	// RetryIn, when Gmail answered this attempt with a rate limit, is how
	// long the mailbox is paused (the caller's Retry-After).
	RetryIn time.Duration
}

// New opens the send path and recovers from a crash: every job still in
// forwarding becomes unknown with an ambiguous line (reason
// recovered_after_restart), its check scheduled after its channel's grace.
func New(ctx context.Context, cfg Config) (*Service, error) {
	if cfg.Log == nil || cfg.Policy == nil {
		return nil, errors.New("relay: Log and Policy are required")
	}
	s := &Service{shared: acceptlog.IsShared(cfg.Log),
		log: cfg.Log, policy: cfg.Policy, faults: cfg.Faults,
		onQueued: cfg.OnQueued, now: cfg.Now, logger: cfg.Logger,
		timeout: cfg.SendTimeout, crash: cfg.Crash, obs: cfg.Observer, point: cfg.CrashPoint,
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
	if err := s.buildMailboxes(ctx, cfg); err != nil {
		return nil, err
	}
	for _, m := range s.boxes {
		if m.provider == nil {
			return nil, fmt.Errorf("relay: mailbox %s has no Provider", m.name)
		}
	}
	recover, what := s.recover, "recovered jobs left in forwarding by a crash"
	if acceptlog.IsShared(s.log) {
		// Other replicas' attempts in flight are theirs until their lease
		// runs out; the sweeper takes over expired ones (RecoverExpired).
		recover, what = s.RecoverExpired, "jobs left in forwarding past their lease"
	}
	n, err := recover(ctx)
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
		jobs, err := s.log.ByState(ctx, acceptlog.StateForwarding, 500)
		if err != nil {
			return n, err
		}
		if len(jobs) == 0 {
			return n, nil
		}
		for _, j := range jobs {
			if _, err := s.markUnknown(ctx, j.MessageID, j.Attempts, Outcome{Verdict: Unknown, Reason: acceptlog.ReasonRecoveredAfterRestart}, ""); err != nil {
				return n, err
			}
			n++
		}
	}
}

// Lease is how long an attempt in flight belongs to the process that
// started it: twice the Gmail call's deadline, so an owner that is alive has
// recorded its outcome long before.
func (s *Service) Lease() time.Duration { return 2 * s.timeout }

// RecoverExpired turns unknown (reason lease_expired) every forwarding job
// whose attempt started (UpdatedAt) more than Lease ago: its owner, this
// process or another replica on a shared log, died before recording the
// outcome. The sweeper calls it on every pass on a shared log. An owner
// that records late still moves the job on (unknown → sent is allowed).
func (s *Service) RecoverExpired(ctx context.Context) (int, error) {
	jobs, err := s.log.ByState(ctx, acceptlog.StateForwarding, 0)
	if err != nil {
		return 0, err
	}
	cutoff := s.now().Add(-s.Lease())
	n := 0
	for _, j := range jobs {
		if !j.UpdatedAt.Before(cutoff) {
			continue
		}
		_, err := s.markUnknown(ctx, j.MessageID, j.Attempts, Outcome{Verdict: Unknown, Reason: acceptlog.ReasonLeaseExpired}, "")
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

// Log returns the acceptance log.
func (s *Service) Log() acceptlog.Store { return s.log }

// Policy returns the channel policy.
func (s *Service) Policy() *policy.Policy { return s.policy }

// Now returns the service's clock reading.
func (s *Service) Now() time.Time { return s.now() }

// Logger returns the service's logger.
func (s *Service) Logger() *zerolog.Logger { return &s.logger }

// Faults returns the fault rule set (nil when faults are disabled).
func (s *Service) Faults() *faultmodes.Set { return s.faults }

// Wait blocks until every Gmail call in progress has been recorded.
func (s *Service) Wait() { s.inflight.Wait() }

// admission is what the front door decided for a request.
type admission int

const (
	admitForward admission = iota // a new attempt was logged as forwarding
	admitFailed                   // the attempt failed at once (fail-before-forward)
	admitReplay                   // an earlier result is replayed
	admitRefused                  // no attempt: the quota or daily budget is spent
)

// Send runs one request through the idempotent front door (DESIGN.md): a
// new job or a retryable failure is attempted; anything else replays or
// reports the job. Request-level refusals are *Error: CodeInvalid (unknown
// channel), CodeMismatch (same key, other content), CodeInFlight,
// CodeRateLimited (the relay's quota budget is spent; nothing was sent).
// The attempt's own outcome is in Result.Job.
//
// On a log of its own, the front door, the quota and the fault rules are
// decided inside the admission transaction, which reads the job as
// stored: a send's units and a counted rule's count are taken there, only
// when an attempt is to be made, and given back if the transaction then
// fails. On a log shared by replicas the budget and the pause are rows of
// the database, read in transactions of their own: the job is read first
// (a replay answers from it), units and counts are taken, then the
// admission transaction runs the front door again and gives them back
// when it finds nothing to attempt (another replica got in first: 409,
// 422 or a replay) or fails. Either way, once Send has returned only
// attempts that were made have spent units or counts, and a replay is
// answered whatever the budget.
func (s *Service) Send(ctx context.Context, p Prepared, o SendOptions) (Result, error) {
	var start time.Time
	if o.Timing != nil {
		start = time.Now()
	}
	ch, err := s.policy.Channel(p.Channel)
	if err != nil {
		return Result{}, &Error{Code: CodeInvalid, Field: "channel", Message: err.Error()}
	}
	p.Channel = ch.Name
	box, err := s.pick(p)
	if err != nil {
		return Result{}, err
	}
	held, err := s.gate.enter(ctx, p.MessageID)
	if err != nil {
		return Result{}, err
	}
	defer held.release()
	a := &admitTx{s: s, p: p, box: box, forced: o.Fault}
	if s.shared {
		if res, done, err := s.frontDoorRead(ctx, p); done {
			return res, err
		}
	}
	if s.mustQueue(ctx, box, p, o) {
		return s.enqueue(ctx, box, p, o) // answers an existing job as the front door does
	}
	if s.shared {
		d, err := s.admitAttempt(box, o.Fault, p.Channel, p.Key, p.MessageID, takeForeground)
		if err != nil {
			if o.Queue && IsRateLimited(err) {
				return s.enqueue(ctx, box, p, o)
			}
			return Result{}, err
		}
		a.d, a.took = d, true
	}
	var t0 time.Time
	if o.Timing != nil {
		t0 = time.Now()
		o.Timing.Admit = t0.Sub(start)
	}
	job, _, err := s.log.Mutate(ctx, p.MessageID, a.change)
	if o.Timing != nil {
		o.Timing.FirstCommit = time.Since(t0)
	}
	if a.took && (err != nil || a.adm != admitForward && a.adm != admitFailed) {
		// Nothing was attempted: give back what admission took.
		s.giveBack(box, o.Fault, a.d, true)
	}
	if err != nil {
		return Result{}, err
	}
	if a.adm == admitRefused && o.Queue && IsRateLimited(a.err) {
		return s.enqueue(ctx, box, p, o)
	}
	held.release() // the job's state now tells a duplicate what to answer
	switch a.adm {
	case admitReplay, admitRefused:
		return a.res, a.err
	case admitFailed:
		s.observeFault(a.d)
		return Result{Job: job, Fault: a.d}, nil
	}
	s.observeFault(a.d)
	return s.forward(ctx, box, job, p.Raw, a.d, o.Timing)
}

// frontDoorRead reads the job of p, if any, and answers from it as the
// front door does (done), or says a new attempt is due.
func (s *Service) frontDoorRead(ctx context.Context, p Prepared) (Result, bool, error) {
	cur, err := s.log.Get(ctx, p.MessageID)
	switch {
	case errors.Is(err, acceptlog.ErrNotFound):
		return Result{}, false, nil
	case err != nil:
		return Result{}, true, err
	}
	return s.frontDoor(&cur, p)
}

// admitTx is Send's admission transaction, its inputs and what it
// decided, in one allocation (a closure would capture each on its own).
type admitTx struct {
	s      *Service
	p      Prepared
	box    *Mailbox
	forced faultmodes.Decision // the request's X-Relay-Fault, if any
	// d is the fault decision admitAttempt made and took says it took
	// quota and a rule's count for it (before the transaction on a
	// shared log, in its first run that attempts otherwise): kept across
	// runs of the transaction, so a run again does not take twice.
	d    faultmodes.Decision
	took bool
	// What the transaction decided; reset on every run.
	adm admission
	res Result
	err error
}

// newRecord is a new attempt's job record and the lines it writes (a
// received line, a fault line, the forwarding or not_sent line) in one
// allocation.
type newRecord struct {
	job   acceptlog.Job
	lines [3]acceptlog.Line
}

func (a *admitTx) change(cur *acceptlog.Job) (acceptlog.Change, error) {
	s, p := a.s, &a.p
	a.adm, a.res, a.err = admitForward, Result{}, nil
	if cur != nil {
		if res, done, err := s.frontDoor(cur, *p); done {
			a.adm, a.res, a.err = admitReplay, res, err
			return acceptlog.Change{}, nil
		}
	}
	if !a.took {
		d, err := s.admitAttempt(a.box, a.forced, p.Channel, p.Key, p.MessageID, takeForeground)
		if err != nil {
			a.adm, a.err = admitRefused, err
			return acceptlog.Change{}, nil
		}
		a.d, a.took = d, true
	}
	now := s.now()
	rec := &newRecord{}
	j := &rec.job
	var raw []byte
	if cur != nil {
		*j = *cur
	} else {
		*j = acceptlog.Job{MessageID: p.MessageID, Key: p.Key, Channel: p.Channel, Mailbox: a.box.name,
			Fingerprint: p.Fingerprint, ThreadIDIn: p.ThreadID, CreatedAt: now}
		raw = p.Raw
	}
	j.Attempts++
	lines := append(rec.lines[:0], acceptlog.Line{Kind: acceptlog.KindReceived, Attempt: j.Attempts, Channel: p.Channel})
	lines, a.adm = s.startAttempt(j, lines, a.d, now)
	return acceptlog.Change{Job: j, Lines: lines, Raw: raw}, nil
}

// admitAttempt takes the fault decision and the quota for one attempt. The
// quota is checked before a fault rule is consumed, so an attempt refused
// for quota never uses up a counted rule; fail-before-forward spends no
// quota. forced, when set, replaces the rule-based decision.
func (s *Service) admitAttempt(box *Mailbox, forced faultmodes.Decision, channel, key, id string, mode takeMode) (faultmodes.Decision, error) {
	refused := func(in time.Duration) error {
		return &Error{Code: CodeRateLimited, RetryAfter: seconds(in),
			Message: "mailbox " + box.name + ": the relay's Gmail quota budget is spent for now; nothing was sent"}
	}
	spent := func(in time.Duration) error {
		return &Error{Code: CodeRateLimited, RetryAfter: seconds(in),
			Message: "mailbox " + box.name + ": the daily sending budget is spent; nothing was sent"}
	}
	if ok, in := box.budget.Available(); !ok {
		return faultmodes.Decision{}, spent(in)
	}
	if ok, in := box.quota.availableFor(UnitsSend, mode); !ok {
		return faultmodes.Decision{}, refused(in)
	}
	d := forced
	if d.Mode == "" && s.faults != nil {
		d = s.faults.Decide(channel, key, id)
	}
	if d.Mode == faultmodes.FailBeforeForward {
		return d, nil
	}
	if ok, in := box.budget.Take(); !ok {
		return faultmodes.Decision{}, spent(in)
	}
	if ok, in := box.quota.takeFor(UnitsSend, mode); !ok {
		box.budget.Refund()
		return faultmodes.Decision{}, refused(in)
	}
	return d, nil
}

// giveBack returns the quota units and the fault rule's count that
// admitAttempt took for an attempt that was then not made. A forced
// decision (the X-Relay-Fault header) consumed no rule.
func (s *Service) giveBack(box *Mailbox, forced, d faultmodes.Decision, tookQuota bool) {
	if d.Mode != faultmodes.FailBeforeForward && tookQuota {
		box.quota.Refund(UnitsSend)
		box.budget.Refund()
	}
	if forced.Mode == "" && s.faults != nil {
		s.faults.Refund(d)
	}
}

// frontDoor answers a request for an existing job without attempting
// anything, or says (done == false) that a new attempt is due.
func (s *Service) frontDoor(cur *acceptlog.Job, p Prepared) (Result, bool, error) {
	if cur.Fingerprint != p.Fingerprint {
		return Result{}, true, &Error{Code: CodeMismatch, Field: "key",
			Message: "this key was already used for a message with different content"}
	}
	switch cur.State {
	case acceptlog.StateForwarding:
		return Result{}, true, &Error{Code: CodeInFlight, RetryAfter: 2,
			Message: "a send with this key is being forwarded to Gmail right now"}
	case acceptlog.StateFailed:
		if cur.Retryable {
			return Result{}, false, nil
		}
	case acceptlog.StateUnknown:
		if brokenResendUnknown {
			return Result{}, false, nil
		}
	case acceptlog.StateAbandoned:
		return Result{}, true, &Error{Code: CodeConflict, Field: "key",
			Message: "an operator abandoned this job; it will not be sent"}
	}
	// sent, unknown, review, failed-not-retryable: report the job as it is.
	return Result{Job: *cur, Replayed: true}, true, nil
}

// startAttempt appends the fault and forwarding (or not_sent) lines of a
// new attempt to lines and sets the job's state accordingly.
func (s *Service) startAttempt(j *acceptlog.Job, lines []acceptlog.Line, d faultmodes.Decision, now time.Time) ([]acceptlog.Line, admission) {
	if d.Mode != "" {
		lines = append(lines, acceptlog.Line{Kind: acceptlog.KindFault, Attempt: j.Attempts, RuleID: d.RuleID, Mode: string(d.Mode)})
	}
	j.UpdatedAt = now
	j.NextCheckAt = time.Time{}
	if d.Mode == faultmodes.FailBeforeForward {
		j.Retryable = true
		j.LastStatus, j.LastReason, j.LastError = 0, "fault_injected", "fail-before-forward fault injected: nothing was sent"
		s.scheduleRetry(j, now)
		return append(lines, acceptlog.Move(j, acceptlog.StateFailed, acceptlog.Line{Kind: acceptlog.KindNotSent, Attempt: j.Attempts,
			Retryable: true, Reason: acceptlog.ReasonFaultInjected, RuleID: d.RuleID})), admitFailed
	}
	return append(lines, acceptlog.Move(j, acceptlog.StateForwarding, acceptlog.Line{Kind: acceptlog.KindForwarding, Attempt: j.Attempts})), admitForward
}

// scheduleRetry lets the sweeper retry a retryable failure on a retry
// channel whose caller never comes back.
func (s *Service) scheduleRetry(j *acceptlog.Job, now time.Time) {
	ch, err := s.policy.Channel(j.Channel)
	if err == nil && ch.OnUnknown == policy.Retry && j.Retryable {
		j.NextCheckAt = now.Add(ch.Grace)
	}
}

func (s *Service) observeFault(d faultmodes.Decision) {
	if d.Mode != "" && d.Mode != faultmodes.ForwardAndRespond && s.obs != nil {
		s.obs.Faulted(d.Mode)
	}
}

// forward calls Gmail for a job already logged as forwarding and records
// the outcome. The call runs on its own context. tm, when non-nil, gets
// the Gmail call's and the outcome commit's durations.
func (s *Service) forward(ctx context.Context, box *Mailbox, job acceptlog.Job, raw []byte, d faultmodes.Decision, tm *Timing) (Result, error) {
	s.inflight.Add(1)
	defer s.inflight.Done()
	if raw == nil {
		var err error
		if raw, err = s.log.Raw(ctx, job.MessageID); err != nil {
			return Result{}, fmt.Errorf("read stored message %s: %w", job.MessageID, err)
		}
	}
	s.point(CrashAfterForwardingLogged)
	// The call and the outcome's record run on a context the caller
	// cannot cancel.
	rec := context.WithoutCancel(ctx)
	callCtx, cancel := context.WithTimeout(rec, s.timeout)
	defer cancel()
	start := time.Now()
	sent, err := box.provider.Send(callCtx, box.userID, raw, job.ThreadIDIn)
	took := time.Since(start)
	if tm != nil {
		tm.Gmail = took
		defer func(at time.Time) { tm.OutcomeCommit = time.Since(at) }(time.Now())
	}
	s.point(CrashAfterGmailAnswer)
	out := Classify(err)
	s.noteRateLimit(box, out)
	if s.obs != nil {
		s.obs.Attempted(job.Channel, out, took)
	}
	switch d.Mode {
	case faultmodes.CrashAfterForward:
		if s.crash != nil {
			s.crash()
		}
		fallthrough
	case faultmodes.ForwardThenDropResponse:
		j, err := s.markUnknown(rec, job.MessageID, job.Attempts, Outcome{Verdict: Unknown, Reason: acceptlog.ReasonFaultInjectedDrop}, d.RuleID)
		return Result{Job: j, Fault: d, Dropped: true}, err
	}
	var j acceptlog.Job
	var retryIn time.Duration
	switch out.Verdict {
	case Sent:
		j, err = s.markSent(rec, job.MessageID, job.Attempts, sent)
		if err == nil {
			s.verifyHandle(rec, box, j)
		}
	case Failed:
		j, err = s.markFailed(rec, job.MessageID, job.Attempts, out)
		if out.Reason == acceptlog.ReasonRateLimited {
			retryIn = max(box.quota.PausedFor(), time.Second)
		}
		if out.Alarm {
			s.logger.Error().Str("message_id", job.MessageID).Str("mailbox", box.name).Int("status", out.Status).Str("reason", string(out.Reason)).
				Msg("ALARM: Gmail refused the mailbox's credentials (or their refresh failed); its sends fail until an operator fixes them")
		}
	default:
		j, err = s.markUnknown(rec, job.MessageID, job.Attempts, out, "")
	}
	if err != nil {
		s.logger.Error().Err(err).Str("message_id", job.MessageID).Msg("record outcome; the job stays forwarding and recovery will make it unknown")
		return Result{}, err
	}
	s.point(CrashAfterOutcomeLogged)
	return Result{Job: j, Fault: d, RetryIn: retryIn}, nil
}

// noteRateLimit tells the mailbox's quota what Gmail's answer says of its
// rate limit: a rate limit pauses sends and searches until Gmail's retry
// time (or the next backoff step); any other answer from Gmail resets the
// backoff. No answer at all (not reached, timeout) changes nothing.
func (s *Service) noteRateLimit(box *Mailbox, out Outcome) {
	switch {
	case out.Reason == acceptlog.ReasonRateLimited:
		d := box.quota.RateLimited(out.RetryIn)
		s.logger.Warn().Str("mailbox", box.name).Int("status", out.Status).Dur("pause", d).Bool("gmail_retry_time", out.RetryIn > 0).
			Msg("Gmail rate limit: the mailbox's sends and searches pause")
	case out.Verdict == Sent || out.Status != 0:
		box.quota.Answered()
	}
}

// errStale says a recorded outcome no longer applies (the attempt is not
// the job's current one): a programming or concurrency error.
var errStale = errors.New("outcome of an attempt that is not in flight")

// recordOutcome writes the outcome of the attempt in flight: edit turns
// the job (a copy, already stamped UpdatedAt) into its new record and
// returns the line that explains it. An attempt that is no longer the
// job's one in flight is errStale and writes nothing.
func (s *Service) recordOutcome(ctx context.Context, id string, attempt int, edit func(j *acceptlog.Job, now time.Time) (acceptlog.State, acceptlog.Line)) (acceptlog.Job, error) {
	j, _, err := s.log.Mutate(ctx, id, func(cur *acceptlog.Job) (acceptlog.Change, error) {
		if cur == nil || cur.State != acceptlog.StateForwarding || cur.Attempts != attempt {
			return acceptlog.Change{}, errStale
		}
		now := s.now()
		rec := &outcomeRecord{job: *cur}
		j := &rec.job
		j.UpdatedAt = now
		to, line := edit(j, now)
		line.Attempt = attempt
		rec.lines[0] = acceptlog.Move(j, to, line)
		return acceptlog.Change{Job: j, Lines: rec.lines[:]}, nil
	})
	return j, err
}

// outcomeRecord is an outcome's job record and its one line, in one
// allocation.
type outcomeRecord struct {
	job   acceptlog.Job
	lines [1]acceptlog.Line
}

func (s *Service) markSent(ctx context.Context, id string, attempt int, m SentMessage) (acceptlog.Job, error) {
	return s.recordOutcome(ctx, id, attempt, func(j *acceptlog.Job, now time.Time) (acceptlog.State, acceptlog.Line) {
		j.GmailID, j.ThreadID, j.LabelIDs = m.ID, m.ThreadID, m.LabelIDs
		j.Effects++
		j.Verified, j.Checks = false, 0
		j.NextCheckAt = now.Add(s.grace(j.Channel)) // the verify pass
		return acceptlog.StateSent, acceptlog.Line{Kind: acceptlog.KindEffect, Source: acceptlog.SourceResponse,
			GmailID: m.ID, ThreadID: m.ThreadID, LabelIDs: m.LabelIDs}
	})
}

func (s *Service) markFailed(ctx context.Context, id string, attempt int, o Outcome) (acceptlog.Job, error) {
	return s.recordOutcome(ctx, id, attempt, func(j *acceptlog.Job, now time.Time) (acceptlog.State, acceptlog.Line) {
		j.Retryable = o.Retryable
		j.LastStatus, j.LastReason, j.LastError = o.Status, o.Reason, errText(o.Err)
		j.NextCheckAt = time.Time{}
		s.scheduleRetry(j, now)
		return acceptlog.StateFailed, acceptlog.Line{Kind: acceptlog.KindNotSent, Status: o.Status, Retryable: o.Retryable,
			Reason: o.Reason, Error: j.LastError}
	})
}

func (s *Service) markUnknown(ctx context.Context, id string, attempt int, o Outcome, ruleID string) (acceptlog.Job, error) {
	return s.recordOutcome(ctx, id, attempt, func(j *acceptlog.Job, now time.Time) (acceptlog.State, acceptlog.Line) {
		j.LastStatus, j.LastReason, j.LastError = o.Status, o.Reason, errText(o.Err)
		j.AmbiguousAt, j.Checks = now, 0
		j.NextCheckAt = now.Add(s.grace(j.Channel))
		return acceptlog.StateUnknown, acceptlog.Line{Kind: acceptlog.KindAmbiguous, Status: o.Status, Reason: o.Reason,
			Error: j.LastError, RuleID: ruleID}
	})
}

// grace is the channel's grace, or the default channel's for a channel
// that has left the policy since the job was logged.
func (s *Service) grace(channel string) time.Duration {
	if ch, err := s.policy.Channel(channel); err == nil {
		return ch.Grace
	}
	return 3 * time.Minute
}

// verifyHandle reads the stored Message-ID back per the policy's
// verify_handle setting and records a handle line. A rewritten id marks
// the mailbox untrusted: from then on its ambiguous jobs go to review.
func (s *Service) verifyHandle(ctx context.Context, box *Mailbox, j acceptlog.Job) {
	mode := s.policy.VerifyHandle
	if mode == policy.VerifyNever || j.GmailID == "" {
		return
	}
	if mode == policy.VerifyFirst && box.handleChecked.Load() {
		return
	}
	if ok, _ := box.quota.TakeForeground(UnitsGet); !ok {
		return // try again on a later send
	}
	callCtx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	h, err := box.provider.GetHeader(callCtx, box.userID, j.GmailID)
	s.noteRateLimit(box, Classify(err))
	if err != nil {
		s.logger.Warn().Err(err).Str("message_id", j.MessageID).Msg("read the Message-ID back")
		return
	}
	if err := s.RecordHandle(ctx, j.MessageID, h.MessageID); err != nil {
		s.logger.Error().Err(err).Str("message_id", j.MessageID).Msg("record handle check")
		return
	}
	box.handleChecked.Store(true)
}

// RecordHandle writes a handle line for a job whose stored Message-ID was
// read back as stored, and updates the mailbox's record. A mismatch marks
// the mailbox's handle untrusted and raises an alarm in the log.
func (s *Service) RecordHandle(ctx context.Context, id, stored string) error {
	kept := stored == id
	reason := acceptlog.ReasonHandleKept
	if !kept {
		reason = acceptlog.ReasonHandleRewritten
	}
	var mailbox string
	// The mailbox is read and written back in the same transaction as the
	// handle line: a concurrent kept read-back can never reset the
	// untrusted flag a rewritten one set, nor lose a rewrite's count.
	_, _, err := s.log.Mutate(ctx, id, func(cur *acceptlog.Job) (acceptlog.Change, error) {
		if cur == nil {
			return acceptlog.Change{}, acceptlog.ErrNotFound
		}
		mailbox = cur.Mailbox
		return acceptlog.Change{
			EditMailbox: func(mb *acceptlog.Mailbox) {
				mb.HandleChecked = true
				if !kept {
					mb.HandleUntrusted = true
					mb.Rewrites++
				}
			},
			Lines: []acceptlog.Line{{Kind: acceptlog.KindHandle, Attempt: cur.Attempts,
				Reason: reason, StoredMessageID: stored, HandleKept: &kept}},
		}, nil
	})
	if err != nil {
		return fmt.Errorf("record handle of %s: %w", id, err)
	}
	if s.obs != nil {
		s.obs.HandleChecked(kept)
	}
	if !kept {
		s.logger.Error().Str("message_id", id).Str("stored_message_id", stored).Str("mailbox", mailbox).
			Msg("ALARM: Gmail replaced our Message-ID; ambiguous jobs of this mailbox now go to review (a search miss proves nothing)")
	}
	return nil
}

// Attempt makes a new attempt for an existing job with the same
// Message-ID, through the same path as Send (fault rules apply). from lists
// the states the job may be in; reason is written on the received line
// (for example "sweeper_resend" or "resolved_retry"). The quota is taken
// as background work unless foreground is set. Like Send, an attempt the
// transaction then refuses (the job moved on: CodeConflict) gives back the
// units and the fault rule's count it took.
func (s *Service) Attempt(ctx context.Context, id string, from []acceptlog.State, reason acceptlog.Reason, foreground bool) (Result, error) {
	mode := takeBackground
	if foreground {
		mode = takeForeground
	}
	return s.attempt(ctx, id, from, reason, mode, nil)
}

// attempt is Attempt; before, when set, makes the lines to write first in
// the same transaction (a resolve retry's resolved line), so that they are
// written exactly when the attempt starts.
func (s *Service) attempt(ctx context.Context, id string, from []acceptlog.State, reason acceptlog.Reason, mode takeMode, before func(j *acceptlog.Job) []acceptlog.Line) (Result, error) {
	cur, err := s.log.Get(ctx, id)
	if err != nil {
		return Result{}, err
	}
	box, err := s.jobMailbox(cur)
	if err != nil {
		return Result{}, err
	}
	d, err := s.admitAttempt(box, faultmodes.Decision{}, cur.Channel, cur.Key, cur.MessageID, mode)
	if err != nil {
		return Result{}, err
	}
	if d.Mode == faultmodes.FailBeforeForward && cur.State == acceptlog.StateQueued {
		// Gmail "unreachable" before anything was sent: a queued job stays
		// queued (queued → failed is not in the table); the outbox tries
		// again shortly. No attempt was made, so nothing is logged.
		s.observeFault(d)
		return Result{Job: cur, Fault: d}, &Error{Code: CodeRateLimited, RetryAfter: 1,
			Message: "fault fail-before-forward injected (rule " + d.RuleID + ") on delivery: nothing was sent; the job stays queued"}
	}
	var adm admission
	job, _, err := s.log.Mutate(ctx, id, func(cur *acceptlog.Job) (acceptlog.Change, error) {
		if cur == nil {
			return acceptlog.Change{}, acceptlog.ErrNotFound
		}
		if !stateIn(cur.State, from) {
			return acceptlog.Change{}, &Error{Code: CodeConflict, Message: fmt.Sprintf("job is %s, not %v", cur.State, from)}
		}
		j := *cur
		var lines []acceptlog.Line
		if before != nil {
			lines = before(&j)
		}
		j.Attempts++
		lines = append(lines, acceptlog.Line{Kind: acceptlog.KindReceived, Attempt: j.Attempts, Channel: j.Channel, Reason: reason})
		var change acceptlog.Change
		lines, adm = s.startAttempt(&j, lines, d, s.now())
		change.Job, change.Lines = &j, lines
		return change, nil
	})
	if err != nil {
		s.giveBack(box, faultmodes.Decision{}, d, true)
		return Result{}, err
	}
	s.observeFault(d)
	if adm == admitFailed {
		return Result{Job: job, Fault: d}, nil
	}
	return s.forward(ctx, box, job, nil, d, nil)
}

func stateIn(s acceptlog.State, set []acceptlog.State) bool {
	for _, v := range set {
		if s == v {
			return true
		}
	}
	return false
}

// Resolution actions for Resolve.
const (
	ActionMarkSent = string(acceptlog.ReasonMarkSent)
	ActionRetry    = string(acceptlog.ReasonRetry)
	ActionAbandon  = string(acceptlog.ReasonAbandon)
)

// Resolve applies a human decision to a job in review (or unknown, or
// failed): mark-sent records that the message was sent (an effect line with
// source human when none exists yet), retry makes one forced resend with
// the same Message-ID, abandon gives up. Every resolution is a resolved
// line carrying actor and note. Errors: CodeNotFound, CodeInvalid (action),
// CodeConflict (the job's state does not allow it).
func (s *Service) Resolve(ctx context.Context, id, action, note, actor string) (Result, error) {
	resolvable := []acceptlog.State{acceptlog.StateReview, acceptlog.StateUnknown, acceptlog.StateFailed}
	var target acceptlog.State
	switch action {
	case ActionMarkSent:
		target = acceptlog.StateSent
	case ActionAbandon:
		target = acceptlog.StateAbandoned
	case ActionRetry:
		// The resolved line is written with the attempt, in one
		// transaction: an attempt refused (quota) leaves no trace of a
		// retry that did not happen.
		res, err := s.attempt(ctx, id, resolvable, acceptlog.ReasonResolvedRetry, takeForeground, func(j *acceptlog.Job) []acceptlog.Line {
			return []acceptlog.Line{{Kind: acceptlog.KindResolved, Attempt: j.Attempts, Reason: acceptlog.ReasonRetry, Actor: actor, Note: note}}
		})
		if errors.Is(err, acceptlog.ErrNotFound) {
			err = &Error{Code: CodeNotFound, Message: "no job with that Message-ID"}
		}
		return res, err
	default:
		return Result{}, Invalid("action", "action must be mark-sent, retry or abandon, not %q", action)
	}
	return s.resolveLine(ctx, id, action, note, actor, resolvable, target)
}

// resolveLine writes the resolved line (and, with a target, the state).
func (s *Service) resolveLine(ctx context.Context, id, action, note, actor string, from []acceptlog.State, target acceptlog.State) (Result, error) {
	j, _, err := s.log.Mutate(ctx, id, func(cur *acceptlog.Job) (acceptlog.Change, error) {
		if cur == nil {
			return acceptlog.Change{}, &Error{Code: CodeNotFound, Message: "no job with that Message-ID"}
		}
		if !stateIn(cur.State, from) {
			return acceptlog.Change{}, &Error{Code: CodeConflict, Message: fmt.Sprintf("job is %s; only review, unknown or failed jobs can be resolved", cur.State)}
		}
		now := s.now()
		j := *cur
		line := acceptlog.Line{Kind: acceptlog.KindResolved, Attempt: j.Attempts, Reason: acceptlog.Reason(action), Actor: actor, Note: note}
		lines := []acceptlog.Line{line}
		if target != "" {
			j.UpdatedAt, j.NextCheckAt = now, time.Time{}
			lines[0] = acceptlog.Move(&j, target, line)
			if target == acceptlog.StateSent && j.Effects == 0 {
				j.Effects++
				lines = append(lines, acceptlog.Move(&j, target, acceptlog.Line{Kind: acceptlog.KindEffect, Attempt: j.Attempts, Source: acceptlog.SourceHuman}))
			}
			j.Verified = true // a human looked; the verify pass leaves it alone
		}
		return acceptlog.Change{Job: &j, Lines: lines}, nil
	})
	if errors.Is(err, acceptlog.ErrNotFound) {
		err = &Error{Code: CodeNotFound, Message: "no job with that Message-ID"}
	}
	return Result{Job: j}, err
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func seconds(d time.Duration) int {
	s := int((d + time.Second - 1) / time.Second)
	return max(s, 1)
}
