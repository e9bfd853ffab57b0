package relay

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/faultmodes"
	"github.com/gmailrelay/gmailrelay/policy"
)

// forward calls Gmail with raw, the message of a job already logged as
// forwarding, and records the outcome. The call runs on its own context.
// Nothing may fail between the forwarding commit and the call but the
// call itself, so raw is read before the attempt is logged. queue says the attempt
// may wait: an attempt Gmail did not take (a rate limit, or not reached)
// then goes back to the outbox's queue instead of ending failed. tm, when
// non-nil, gets the Gmail call's and the outcome commit's durations.
func (s *Service) forward(ctx context.Context, box *Mailbox, job gmailrelay.Job, raw []byte, d faultmodes.Decision, queue bool, tm *Timing) (Result, error) {
	s.inflight.Add(1)
	defer s.inflight.Done()
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
		j, err := s.markUnknown(rec, job.MessageID, job.Attempts, Outcome{Verdict: Unknown, Reason: gmailrelay.ReasonFaultInjectedDrop}, d.RuleID)
		if err != nil {
			return Result{}, s.outcomeUnlogged(job, err)
		}
		return Result{Job: j, Fault: d, Dropped: true}, nil
	}
	var j gmailrelay.Job
	var retryIn time.Duration
	switch out.Verdict {
	case Sent:
		j, err = s.markSent(rec, job.MessageID, job.Attempts, sent)
		if err == nil {
			box.recent.note(sent.ID, job.MessageID)
			s.verifyHandle(rec, box, j)
		}
	case Failed:
		requeue := queue && requeues(out)
		if requeue {
			j, err = s.markQueued(rec, job.MessageID, job.Attempts, out)
		} else {
			j, err = s.markFailed(rec, job.MessageID, job.Attempts, out)
		}
		switch {
		case out.Reason == gmailrelay.ReasonRateLimited:
			retryIn = max(box.quota.PausedFor(), time.Second)
		case requeue:
			retryIn = notReachedDelay(job.Attempts)
		}
		if requeue && err == nil && s.onQueued != nil {
			s.onQueued()
		}
		if out.Alarm {
			s.logger.Error().Str("message_id", job.MessageID).Str("mailbox", box.name).Int("status", out.Status).Str("reason", string(out.Reason)).
				Msg("ALARM: Gmail refused the mailbox's credentials (or their refresh failed); its sends fail until an operator fixes them")
		}
	default:
		j, err = s.markUnknown(rec, job.MessageID, job.Attempts, out, "")
	}
	if err != nil {
		return Result{}, s.outcomeUnlogged(job, err)
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
	case out.Reason == gmailrelay.ReasonRateLimited:
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
//
// A sent outcome of a job that already had an effect (a human's retry of
// a job the sweeper found in the mailbox, or of one delivered twice
// before) is a second delivery: the same transaction hands the job to
// review with reason duplicate_delivery, so no moment of the log shows
// two effects outside review.
func (s *Service) recordOutcome(ctx context.Context, id string, attempt int, edit func(j *gmailrelay.Job, now time.Time) (gmailrelay.State, gmailrelay.Line)) (gmailrelay.Job, error) {
	j, _, err := s.log.Mutate(ctx, id, func(cur *gmailrelay.Job) (gmailrelay.Change, error) {
		if cur == nil || cur.State != gmailrelay.StateForwarding || cur.Attempts != attempt {
			return gmailrelay.Change{}, errStale
		}
		now := s.now()
		rec := &outcomeRecord{job: *cur}
		j := &rec.job
		j.UpdatedAt = now
		to, line := edit(j, now)
		line.Attempt = attempt
		rec.lines[0] = gmailrelay.Move(j, to, line)
		n := 1
		if to == gmailrelay.StateSent && j.Effects > 1 {
			j.NextCheckAt = time.Time{}
			rec.lines[1] = gmailrelay.Move(j, gmailrelay.StateReview, gmailrelay.Line{Kind: gmailrelay.KindReview, Attempt: attempt,
				Reason: gmailrelay.ReasonDuplicateDelivery, GmailID: j.GmailID,
				Note: fmt.Sprintf("Gmail accepted attempt %d of a job it had already accepted (%d effect lines)", attempt, j.Effects)})
			n = 2
		}
		return gmailrelay.Change{Job: j, Lines: rec.lines[:n]}, nil
	})
	return j, err
}

// outcomeRecord is an outcome's job record and its lines (one, two for a
// second delivery), in one allocation.
type outcomeRecord struct {
	job   gmailrelay.Job
	lines [2]gmailrelay.Line
}

func (s *Service) markSent(ctx context.Context, id string, attempt int, m SentMessage) (gmailrelay.Job, error) {
	j, err := s.recordOutcome(ctx, id, attempt, func(j *gmailrelay.Job, now time.Time) (gmailrelay.State, gmailrelay.Line) {
		j.GmailID, j.ThreadID, j.LabelIDs = m.ID, m.ThreadID, m.LabelIDs
		j.Effects++
		j.Verified, j.Checks = false, 0
		j.NextCheckAt = now.Add(s.grace(j.Channel)) // the verify pass
		return gmailrelay.StateSent, gmailrelay.Line{Kind: gmailrelay.KindEffect, Source: gmailrelay.SourceResponse,
			GmailID: m.ID, ThreadID: m.ThreadID, LabelIDs: m.LabelIDs}
	})
	if err == nil && j.State == gmailrelay.StateReview {
		s.logger.Error().Str("message_id", id).Int("effects", j.Effects).
			Msg("ALARM: the relay delivered a message twice (two own effects); handed to a human")
	}
	return j, err
}

func (s *Service) markFailed(ctx context.Context, id string, attempt int, o Outcome) (gmailrelay.Job, error) {
	return s.recordOutcome(ctx, id, attempt, func(j *gmailrelay.Job, now time.Time) (gmailrelay.State, gmailrelay.Line) {
		j.Retryable = o.Retryable
		j.LastStatus, j.LastReason, j.LastError = o.Status, o.Reason, errText(o.Err)
		j.NextCheckAt = time.Time{}
		s.scheduleRetry(j, now)
		return gmailrelay.StateFailed, gmailrelay.Line{Kind: gmailrelay.KindNotSent, Status: o.Status, Retryable: o.Retryable,
			Reason: o.Reason, Error: j.LastError}
	})
}

// markQueued records an attempt Gmail did not take, for a job that may
// wait: it goes back to the queue (its not_sent line says why) and the
// delivery loop sends it when the mailbox's pause, or HeldUntil, allows.
func (s *Service) markQueued(ctx context.Context, id string, attempt int, o Outcome) (gmailrelay.Job, error) {
	return s.recordOutcome(ctx, id, attempt, func(j *gmailrelay.Job, now time.Time) (gmailrelay.State, gmailrelay.Line) {
		j.Retryable = o.Retryable
		j.LastStatus, j.LastReason, j.LastError = o.Status, o.Reason, errText(o.Err)
		j.NextCheckAt = time.Time{}
		return gmailrelay.StateQueued, gmailrelay.Line{Kind: gmailrelay.KindNotSent, Status: o.Status, Retryable: o.Retryable,
			Reason: o.Reason, Error: j.LastError}
	})
}

func (s *Service) markUnknown(ctx context.Context, id string, attempt int, o Outcome, ruleID string) (gmailrelay.Job, error) {
	return s.recordOutcome(ctx, id, attempt, func(j *gmailrelay.Job, now time.Time) (gmailrelay.State, gmailrelay.Line) {
		j.LastStatus, j.LastReason, j.LastError = o.Status, o.Reason, errText(o.Err)
		j.AmbiguousAt, j.Checks = now, 0
		j.NextCheckAt = now.Add(s.grace(j.Channel))
		return gmailrelay.StateUnknown, gmailrelay.Line{Kind: gmailrelay.KindAmbiguous, Status: o.Status, Reason: o.Reason,
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
func (s *Service) verifyHandle(ctx context.Context, box *Mailbox, j gmailrelay.Job) {
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
	reason := gmailrelay.ReasonHandleKept
	if !kept {
		reason = gmailrelay.ReasonHandleRewritten
	}
	var mailbox string
	// The mailbox is read and written back in the same transaction as the
	// handle line: a concurrent kept read-back can never reset the
	// untrusted flag a rewritten one set, nor lose a rewrite's count.
	_, _, err := s.log.Mutate(ctx, id, func(cur *gmailrelay.Job) (gmailrelay.Change, error) {
		if cur == nil {
			return gmailrelay.Change{}, gmailrelay.ErrNotFound
		}
		mailbox = cur.Mailbox
		return gmailrelay.Change{
			EditMailbox: func(mb *gmailrelay.Mailbox) {
				mb.HandleChecked = true
				if !kept {
					mb.HandleUntrusted = true
					mb.Rewrites++
				}
			},
			Lines: []gmailrelay.Line{{Kind: gmailrelay.KindHandle, Attempt: cur.Attempts,
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

// AnyAttempts, as the Seen of an AttemptRequest or a ResolveRequest, means
// the caller decided without a count of the job's attempts: the call fences
// on the count it reads itself when it starts.
const AnyAttempts = -1

// Attempt makes a new attempt for an existing job with the same
// Message-ID, through the same path as Send (fault rules apply). The job
// must be in one of r.From and have made r.Seen attempts: when another
// attempt has been made since the caller decided, the call is refused with
// CodeConflict and nothing is sent, so two deciders (two replicas'
// sweepers, a sweeper and a human) never both resend one ambiguous send.
// Like Send, an attempt the transaction then refuses (the job moved on:
// CodeConflict) gives back the units and the fault rule's count it took.
// While the clock fence is closed (ClockFenced) every attempt, Deliver's
// and a resolve retry's too, is refused with its CodeUnavailable.
func (s *Service) Attempt(ctx context.Context, r AttemptRequest) (Result, error) {
	mode := takeBackground
	if r.Priority == Foreground {
		mode = takeForeground
	}
	return s.attempt(ctx, r.ID, r.From, r.Seen, r.Reason, mode, nil)
}

// attempt is Attempt; before, when set, makes the lines to write first in
// the same transaction (a resolve retry's resolved line), so that they are
// written exactly when the attempt starts.
func (s *Service) attempt(ctx context.Context, id string, from []gmailrelay.State, seen int, reason gmailrelay.Reason, mode takeMode, before func(j *gmailrelay.Job) []gmailrelay.Line) (_ Result, err error) {
	defer func() { err = logRefusal(err) }()
	if err := s.ClockFenced(); err != nil {
		return Result{}, err // its lease would mislead the other replicas
	}
	if err := s.logWritable(); err != nil {
		return Result{}, err
	}
	cur, err := s.log.Get(ctx, id)
	if err != nil {
		return Result{}, err
	}
	if seen == AnyAttempts {
		seen = cur.Attempts
	}
	box, err := s.jobMailbox(cur)
	if err != nil {
		return Result{}, err
	}
	d, err := s.admitAttempt(box, faultmodes.Decision{}, cur.Channel, cur.Key, cur.MessageID, mode)
	if err != nil {
		return Result{}, err
	}
	if d.Mode == faultmodes.FailBeforeForward && cur.State == gmailrelay.StateQueued {
		// Gmail "unreachable" before anything was sent: a queued job stays
		// queued (queued → failed is not in the table); the outbox tries
		// again shortly. No attempt was made, so nothing is logged.
		s.observeFault(d)
		return Result{Job: cur, Fault: d}, &Error{Code: CodeRateLimited, RetryAfter: 1,
			Message: "fault fail-before-forward injected (rule " + d.RuleID + ") on delivery: nothing was sent; the job stays queued"}
	}
	// The message is read before the attempt is logged: a forwarding line
	// with nothing to send (retention pruned the message, or the read
	// failed) would leave the job in flight with nothing in flight.
	raw, err := s.log.Raw(ctx, id)
	if err != nil {
		s.giveBack(box, faultmodes.Decision{}, d, true)
		if errors.Is(err, gmailrelay.ErrNotFound) {
			return Result{}, errPruned()
		}
		return Result{}, fmt.Errorf("read stored message %s: %w", id, err)
	}
	var (
		adm  admission
		made int // the attempt the transaction wrote
	)
	job, _, err := s.log.Mutate(ctx, id, func(cur *gmailrelay.Job) (gmailrelay.Change, error) {
		made = 0
		if cur == nil {
			return gmailrelay.Change{}, gmailrelay.ErrNotFound
		}
		if err := fence(cur, from, seen); err != nil {
			return gmailrelay.Change{}, err
		}
		if !cur.PrunedAt.IsZero() {
			// Retention pruned it after its message was read above: a
			// send now would leave a job with no message to resend.
			return gmailrelay.Change{}, errPruned()
		}
		j := *cur
		var lines []gmailrelay.Line
		if before != nil {
			lines = before(&j)
		}
		j.Attempts++
		lines = append(lines, gmailrelay.Line{Kind: gmailrelay.KindReceived, Attempt: j.Attempts, Channel: j.Channel, Reason: reason})
		var change gmailrelay.Change
		lines, adm = s.startAttempt(&j, lines, d, s.now())
		made = j.Attempts
		change.Job, change.Lines = &j, lines
		return change, nil
	})
	if err != nil {
		s.giveBack(box, faultmodes.Decision{}, d, true)
		return Result{}, s.admissionRefused(id, made, adm, err)
	}
	s.observeFault(d)
	if adm == admitFailed {
		return Result{Job: job, Fault: d}, nil
	}
	return s.forward(ctx, box, job, raw, d, mode == takeDelivery, nil)
}

// errPruned refuses an attempt of a job whose message retention pruned.
func errPruned() error {
	return &Error{Code: CodeConflict, Message: "the job's message is no longer stored (retention pruned it): it cannot be sent again"}
}

// fence refuses (CodeConflict) a change decided on a job that has moved
// on: it is no longer in one of the from states, or it has made another
// attempt than the seen ones (AnyAttempts: any number).
func fence(cur *gmailrelay.Job, from []gmailrelay.State, seen int) error {
	switch {
	case !stateIn(cur.State, from):
		names := make([]string, len(from))
		for i, st := range from {
			names[i] = string(st)
		}
		return &Error{Code: CodeConflict, Message: fmt.Sprintf("job is %s, not %s", cur.State, strings.Join(names, ", "))}
	case seen != AnyAttempts && cur.Attempts != seen:
		return &Error{Code: CodeConflict, Message: fmt.Sprintf("job changed since the decision: it has made %d attempts, not %d; nothing was done", cur.Attempts, seen)}
	}
	return nil
}

func stateIn(s gmailrelay.State, set []gmailrelay.State) bool {
	for _, v := range set {
		if s == v {
			return true
		}
	}
	return false
}

// Resolution actions for Resolve.
const (
	ActionMarkSent = string(gmailrelay.ReasonMarkSent)
	ActionRetry    = string(gmailrelay.ReasonRetry)
	ActionAbandon  = string(gmailrelay.ReasonAbandon)
)

// Resolve applies a human decision to a job in review (or unknown, or
// failed): mark-sent records that the message was sent (an effect line with
// source human when none exists yet), retry makes one forced resend with
// the same Message-ID, abandon gives up. Every resolution is a resolved
// line carrying the actor and the note. A job that has made another
// attempt since the human looked (r.Seen) is refused, so a decision taken
// on a stale page never resends a job a later attempt may have delivered.
// Errors: CodeNotFound, CodeInvalid (action), CodeConflict (the job's
// state does not allow it, or it changed since the human looked).
func (s *Service) Resolve(ctx context.Context, r ResolveRequest) (Result, error) {
	id, action, note, actor, seen := r.ID, r.Action, r.Note, r.Actor, r.Seen
	resolvable := []gmailrelay.State{gmailrelay.StateReview, gmailrelay.StateUnknown, gmailrelay.StateFailed}
	var target gmailrelay.State
	switch action {
	case ActionMarkSent:
		target = gmailrelay.StateSent
	case ActionAbandon:
		target = gmailrelay.StateAbandoned
	case ActionRetry:
		// The resolved line is written with the attempt, in one
		// transaction: an attempt refused (quota) leaves no trace of a
		// retry that did not happen.
		res, err := s.attempt(ctx, id, resolvable, seen, gmailrelay.ReasonResolvedRetry, takeForeground, func(j *gmailrelay.Job) []gmailrelay.Line {
			return []gmailrelay.Line{{Kind: gmailrelay.KindResolved, Attempt: j.Attempts, Reason: gmailrelay.ReasonRetry, Actor: actor, Note: note}}
		})
		if errors.Is(err, gmailrelay.ErrNotFound) {
			err = &Error{Code: CodeNotFound, Message: "no job with that Message-ID"}
		}
		return res, err
	default:
		return Result{}, Invalid("action", "action must be mark-sent, retry or abandon, not %q", action)
	}
	return s.resolveLine(ctx, id, action, note, actor, resolvable, seen, target)
}

// resolveLine writes the resolved line (and, with a target, the state).
func (s *Service) resolveLine(ctx context.Context, id, action, note, actor string, from []gmailrelay.State, seen int, target gmailrelay.State) (Result, error) {
	j, _, err := s.log.Mutate(ctx, id, func(cur *gmailrelay.Job) (gmailrelay.Change, error) {
		if cur == nil {
			return gmailrelay.Change{}, &Error{Code: CodeNotFound, Message: "no job with that Message-ID"}
		}
		if !stateIn(cur.State, from) {
			return gmailrelay.Change{}, &Error{Code: CodeConflict, Message: fmt.Sprintf("job is %s; only review, unknown or failed jobs can be resolved", cur.State)}
		}
		if err := fence(cur, from, seen); err != nil {
			return gmailrelay.Change{}, err
		}
		now := s.now()
		j := *cur
		line := gmailrelay.Line{Kind: gmailrelay.KindResolved, Attempt: j.Attempts, Reason: gmailrelay.Reason(action), Actor: actor, Note: note}
		lines := []gmailrelay.Line{line}
		if target != "" {
			j.UpdatedAt, j.NextCheckAt = now, time.Time{}
			lines[0] = gmailrelay.Move(&j, target, line)
			if target == gmailrelay.StateSent && j.Effects == 0 {
				j.Effects++
				lines = append(lines, gmailrelay.Move(&j, target, gmailrelay.Line{Kind: gmailrelay.KindEffect, Attempt: j.Attempts, Source: gmailrelay.SourceHuman}))
			}
			j.Verified = true // a human looked; the verify pass leaves it alone
		}
		return gmailrelay.Change{Job: &j, Lines: lines}, nil
	})
	if errors.Is(err, gmailrelay.ErrNotFound) {
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
