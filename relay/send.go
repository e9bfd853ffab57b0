package relay

import (
	"context"
	"errors"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/policy"
)

// admission is what the front door decided for a request.
type admission int

const (
	admitForward admission = iota // a new attempt was logged as forwarding
	admitFailed                   // the attempt failed at once (a fault not forwarded)
	admitReplay                   // an earlier result is replayed
	admitRefused                  // no attempt: the quota or daily budget is spent
)

// Send runs one request through the idempotent front door
// (docs/design.md#the-front-door): a new job or a retryable failure is
// attempted; anything else replays or reports the job. Request-level refusals are *Error: CodeInvalid (unknown
// channel; a ThreadID CheckThreadID refuses, which Prepare and the api's
// Gmail-compatible path refuse first, naming their field; more recipients
// than the mailbox's max_recipients), CodeFromNotVerified (a From Gmail
// would replace: see Mailbox.checkFrom; both only for a new job or a new
// attempt, never for a job the front door answers), CodeMismatch
// (same key, other content), CodeMessageIDConflict (a new job whose
// Message-ID differs from an existing job's only in case), CodeInFlight,
// CodeRateLimited (the relay's
// quota budget is spent; nothing was sent), CodeUnavailable (on a shared
// log, the clock fence is closed: see ClockFenced; nothing was logged or
// sent, while a request the front door answers from the job is answered).
// The attempt's own outcome is in Result.Job.
//
// On a log of its own, the front door, the quota and the fault (the
// mailbox's FaultInjector) are decided inside the admission transaction,
// which reads the job as stored: a send's units and a counted rule's count
// are taken there, only
// when an attempt is to be made, and given back if the transaction then
// fails. On a log shared by replicas the budget and the pause are rows of
// the database, read in transactions of their own: the job is read first
// (a replay answers from it), units and counts are taken, then the
// admission transaction runs the front door again and gives them back
// when it finds nothing to attempt (another replica got in first: 409,
// 422 or a replay) or fails. Either way, once Send has returned only
// attempts that were made have spent units or counts, and a replay is
// answered whatever the budget.
//
// A TimingObserver on ctx (WithTimingObserver) hears where the Send's time
// went when it returns.
func (s *Service) Send(ctx context.Context, p Prepared, o SendOptions) (_ Result, err error) {
	defer func() { err = logRefusal(err) }()
	var tm *Timing
	var start time.Time
	if obs := timingObserver(ctx); obs != nil {
		tm, start = &Timing{}, time.Now()
		defer func() { obs.SendTimed(*tm) }()
	}
	// The thread id is stored (thread_id_in) and handed to Gmail: a caller
	// that set it unchecked must not get CR/LF or megabytes into the log.
	if err := CheckThreadID("thread_id", p.ThreadID); err != nil {
		return Result{}, err
	}
	ch, err := s.policy.Channel(p.Channel)
	if err != nil {
		return Result{}, &Error{Code: CodeInvalid, Field: "channel", Message: err.Error()}
	}
	p.Channel = ch.Name
	if err := s.logWritable(); err != nil {
		return Result{}, err
	}
	if p, err = s.byKey(ctx, p); err != nil {
		return Result{}, err
	}
	box, err := s.pick(p)
	if err != nil {
		return Result{}, err
	}
	held, err := s.gate.enter(ctx, p.MessageID)
	if err != nil {
		return Result{}, err
	}
	defer held.release()
	a := &admitTx{s: s, ctx: ctx, p: p, box: box}
	if s.shared {
		if res, done, err := s.frontDoorRead(ctx, p); done {
			return res, err
		}
		// A new attempt or queued job would carry this replica's clock
		// (lease, times) to the others: none while the fence is closed.
		if err := s.ClockFenced(); err != nil {
			return Result{}, err
		}
	}
	if s.mustQueue(ctx, box, p, o) {
		return s.enqueue(ctx, box, p, o) // answers an existing job as the front door does
	}
	if s.shared {
		// frontDoorRead found a new attempt due: refuse it before units
		// are taken (the transaction checks again, as on a log of its own).
		if err := box.checkLimits(&p); err != nil {
			return Result{}, err
		}
		d, err := s.admitAttempt(ctx, box, p.Channel, p.Key, p.MessageID, takeForeground)
		if err != nil {
			if o.Queue && IsRateLimited(err) {
				return s.enqueue(ctx, box, p, o)
			}
			return Result{}, err
		}
		a.d, a.took = d, true
	}
	var t0 time.Time
	if tm != nil {
		t0 = time.Now()
		tm.Admit = t0.Sub(start)
	}
	job, _, err := s.log.Mutate(ctx, p.MessageID, a.change)
	if tm != nil {
		tm.FirstCommit = time.Since(t0)
	}
	if a.took && (err != nil || a.adm != admitForward && a.adm != admitFailed) {
		// Nothing was attempted: give back what admission took.
		s.giveBack(ctx, box, a.d, true)
	}
	if err != nil {
		return Result{}, s.admissionRefused(p.MessageID, a.attempt, a.adm, caseConflict(err))
	}
	if a.adm == admitRefused && o.Queue && IsRateLimited(a.err) {
		return s.enqueue(ctx, box, p, o)
	}
	held.release() // the job's state now tells a duplicate what to answer
	switch a.adm {
	case admitReplay, admitRefused:
		return a.res, a.err
	case admitFailed:
		return Result{Job: job, Fault: a.d}, nil
	}
	return s.forward(ctx, box, job, p.Raw, a.d, o.Queue, tm)
}

// byKey points p at the job its key already has when that job's
// Message-ID is not the one p derives: a job created before an operator
// changed the log's identity (gmailrelay rekey). The front door then
// answers and retries that job, with its own stored message and
// Message-ID, exactly as if the derived Message-ID had matched, so a key
// is never sent twice because the configuration changed.
//
// The lookup is a read of its own, before the admission transaction, and
// needs no more: rekey runs only while no relay runs on the log (the
// bbolt file's lock; on PostgreSQL, no connected replica), so no job of
// an older identity is created while this relay runs, and one of the
// current identity has the derived Message-ID, which the admission
// transaction reads itself.
func (s *Service) byKey(ctx context.Context, p Prepared) (Prepared, error) {
	if p.Key == "" || p.Key == p.MessageID {
		return p, nil // a raw message sent without a key: its Message-ID is its key
	}
	j, err := s.log.JobByKey(ctx, p.Key)
	switch {
	case errors.Is(err, gmailrelay.ErrNotFound):
		return p, nil
	case err != nil:
		return p, err
	case j.MessageID == p.MessageID:
		return p, nil
	}
	// Any new attempt of that job must carry its Message-ID: its own
	// message, stored until the job can no longer be sent (a pruned job
	// is only ever replayed).
	raw, err := s.log.Raw(ctx, j.MessageID)
	if err != nil && !errors.Is(err, gmailrelay.ErrNotFound) {
		return p, err
	}
	p.MessageID, p.Raw = j.MessageID, raw
	return p, nil
}

// frontDoorRead reads the job of p, if any, and answers from it as the
// front door does (done), or says a new attempt is due.
func (s *Service) frontDoorRead(ctx context.Context, p Prepared) (Result, bool, error) {
	cur, err := s.log.Get(ctx, p.MessageID)
	switch {
	case errors.Is(err, gmailrelay.ErrNotFound):
		return Result{}, false, nil
	case err != nil:
		return Result{}, true, err
	}
	return frontDoor(&cur, p)
}

// admitTx is Send's admission transaction, its inputs and what it
// decided, in one allocation (a closure would capture each on its own).
type admitTx struct {
	s *Service
	// ctx is the Send's: the fault decision reads it (a forced fault).
	ctx context.Context
	p   Prepared
	box *Mailbox
	// d is the fault admitAttempt decided and took says it took quota and
	// a rule's count for it (before the transaction on a shared log, in
	// its first run that attempts otherwise): kept across runs of the
	// transaction, so a run again does not take twice.
	d    Fault
	took bool
	// What the transaction decided; reset on every run. attempt is the
	// number of the attempt it wrote (0: none).
	adm     admission
	res     Result
	err     error
	attempt int
}

// newRecord is a new attempt's job record and the lines it writes (a
// received line, a fault line, the forwarding or not_sent line) in one
// allocation.
type newRecord struct {
	job   gmailrelay.Job
	lines [3]gmailrelay.Line
}

func (a *admitTx) change(cur *gmailrelay.Job) (gmailrelay.Change, error) {
	s, p := a.s, &a.p
	a.adm, a.res, a.err, a.attempt = admitForward, Result{}, nil, 0
	if cur != nil {
		if res, done, err := frontDoor(cur, *p); done {
			a.adm, a.res, a.err = admitReplay, res, err
			return gmailrelay.Change{}, nil
		}
	}
	// Only a new attempt is held to Gmail's limits: a job the front door
	// answers is answered whatever they say now.
	if err := a.box.checkLimits(p); err != nil {
		a.adm, a.err = admitRefused, err
		return gmailrelay.Change{}, nil
	}
	if !a.took {
		d, err := s.admitAttempt(a.ctx, a.box, p.Channel, p.Key, p.MessageID, takeForeground)
		if err != nil {
			a.adm, a.err = admitRefused, err
			return gmailrelay.Change{}, nil
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
		*j = gmailrelay.Job{MessageID: p.MessageID, Key: p.Key, Channel: p.Channel, Mailbox: a.box.name,
			Fingerprint: p.Fingerprint, ThreadIDIn: p.ThreadID, CreatedAt: s.acceptedAt()}
		raw = p.Raw
	}
	j.Attempts++
	lines := append(rec.lines[:0], gmailrelay.Line{Kind: gmailrelay.KindReceived, Attempt: j.Attempts, Channel: p.Channel})
	lines, a.adm = s.startAttempt(j, lines, a.d, now)
	a.attempt = j.Attempts
	return gmailrelay.Change{Job: j, Lines: lines, Raw: raw}, nil
}

// admitAttempt takes the fault decision (the mailbox's FaultInjector, on
// ctx) and the quota for one attempt. The quota is checked before a fault
// is decided, so an attempt refused for quota never uses up a counted
// rule; a fault that is not forwarded spends no quota.
func (s *Service) admitAttempt(ctx context.Context, box *Mailbox, channel, key, id string, mode takeMode) (Fault, error) {
	refused := func(in time.Duration) error {
		return &Error{Code: CodeRateLimited, RetryAfter: seconds(in),
			Message: "mailbox " + box.name + ": the relay's Gmail quota budget is spent for now; nothing was sent"}
	}
	spent := func(in time.Duration) error {
		return &Error{Code: CodeRateLimited, RetryAfter: seconds(in),
			Message: "mailbox " + box.name + ": the daily sending budget is spent; nothing was sent"}
	}
	if ok, in := box.budget.Available(); !ok {
		return Fault{}, spent(in)
	}
	if ok, in := box.quota.availableFor(UnitsSend, mode); !ok {
		return Fault{}, refused(in)
	}
	var d Fault
	if box.faults != nil {
		d = box.faults.DecideFault(ctx, FaultQuery{Channel: channel, Key: key, MessageID: id})
	}
	if d.NotForwarded {
		return d, nil
	}
	if ok, in := box.budget.Take(); !ok {
		return Fault{}, spent(in)
	}
	if ok, in := box.quota.takeFor(UnitsSend, mode); !ok {
		box.budget.Refund()
		return Fault{}, refused(in)
	}
	return d, nil
}

// giveBack returns the quota units and the fault's count that
// admitAttempt took on ctx for an attempt that was then not made.
func (s *Service) giveBack(ctx context.Context, box *Mailbox, d Fault, tookQuota bool) {
	if !d.NotForwarded && tookQuota {
		box.quota.Refund(UnitsSend)
		box.budget.Refund()
	}
	if d.Mode != "" && box.faults != nil {
		box.faults.RefundFault(ctx, d)
	}
}

// frontDoor decides a request for the existing job cur, from the job and
// the request alone: an answer without attempting anything (a replay, or
// an error), or (done == false) that a new attempt is due. The caller
// writes what follows.
func frontDoor(cur *gmailrelay.Job, p Prepared) (Result, bool, error) {
	if cur.Fingerprint != p.Fingerprint {
		return Result{}, true, &Error{Code: CodeMismatch, Field: "key",
			Message: "this key was already used for a message with different content"}
	}
	switch cur.State {
	case gmailrelay.StateForwarding:
		return Result{}, true, &Error{Code: CodeInFlight, RetryAfter: 2,
			Message: "a send with this key is being forwarded to Gmail right now"}
	case gmailrelay.StateFailed:
		if cur.Retryable {
			return Result{}, false, nil
		}
	case gmailrelay.StateUnknown:
		if brokenResendUnknown {
			return Result{}, false, nil
		}
	case gmailrelay.StateAbandoned:
		return Result{}, true, &Error{Code: CodeConflict, Field: "key", Message: abandonedBy(cur) + "; it will not be sent"}
	}
	// sent, unknown, review, failed-not-retryable: report the job as it is.
	return Result{Job: *cur, Replayed: true}, true, nil
}

// abandonedBy says who abandoned job j: an API caller (or an operator with
// the admin token) who cancelled it while it was queued, or an operator's
// decision.
func abandonedBy(j *gmailrelay.Job) string {
	if j.LastReason == gmailrelay.ReasonCancelled && j.LastError != "" {
		return "this job was " + j.LastError
	}
	return "an operator abandoned this job"
}

// startAttempt appends the fault and forwarding (or not_sent) lines of a
// new attempt to lines and sets the job's state accordingly.
func (s *Service) startAttempt(j *gmailrelay.Job, lines []gmailrelay.Line, d Fault, now time.Time) ([]gmailrelay.Line, admission) {
	if d.Mode != "" {
		lines = append(lines, gmailrelay.Line{Kind: gmailrelay.KindFault, Attempt: j.Attempts, RuleID: d.RuleID, Mode: d.Mode})
	}
	j.UpdatedAt = now
	j.NextCheckAt = time.Time{}
	if d.NotForwarded {
		j.Retryable = true
		j.LastStatus, j.LastReason, j.LastError = 0, gmailrelay.ReasonFaultInjected, d.Mode+" fault injected: nothing was sent"
		s.scheduleRetry(j, now)
		return append(lines, gmailrelay.Move(j, gmailrelay.StateFailed, gmailrelay.Line{Kind: gmailrelay.KindNotSent, Attempt: j.Attempts,
			Retryable: true, Reason: gmailrelay.ReasonFaultInjected, RuleID: d.RuleID})), admitFailed
	}
	lines = append(lines, gmailrelay.Move(j, gmailrelay.StateForwarding, gmailrelay.Line{Kind: gmailrelay.KindForwarding, Attempt: j.Attempts}))
	j.LeaseUntil = now.Add(s.Lease())
	return lines, admitForward
}

// scheduleRetry lets the sweeper retry a retryable failure on a retry
// channel whose caller never comes back.
func (s *Service) scheduleRetry(j *gmailrelay.Job, now time.Time) {
	ch, err := s.policy.Channel(j.Channel)
	if err == nil && ch.OnUnknown == policy.Retry && j.Retryable {
		j.NextCheckAt = now.Add(ch.Grace)
	}
}
