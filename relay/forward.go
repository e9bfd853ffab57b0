package relay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/policy"
)

// forward calls Gmail with raw, the message of a job already logged as
// forwarding, and records the outcome. The call runs on its own context.
// Nothing may fail between the forwarding commit and the call but the
// call itself, so raw is read before the attempt is logged. queue says the attempt
// may wait: an attempt Gmail did not take (a rate limit, or not reached)
// then goes back to the outbox's queue instead of ending failed. d is the
// attempt's fault, carried to the Provider on the call's context
// (WithFault); a *FaultError from it (the fault dropped Gmail's answer)
// records the attempt unknown. tm, when non-nil, gets the Gmail call's and
// the outcome commit's durations.
func (s *Service) forward(ctx context.Context, box *Mailbox, job gmailrelay.Job, raw []byte, d Fault, queue bool, tm *Timing) (Result, error) {
	s.inflight.Add(1)
	defer s.inflight.Done()
	s.point(CrashAfterForwardingLogged)
	// The call and the outcome's record run on a context the caller
	// cannot cancel.
	rec := context.WithoutCancel(ctx)
	callCtx, cancel := context.WithTimeout(rec, s.timeout)
	defer cancel()
	start := time.Now()
	sent, err := box.provider.Send(WithFault(callCtx, d), box.userID, withJobHeader(raw, job.MessageID), job.ThreadIDIn)
	took := time.Since(start)
	if tm != nil {
		tm.Gmail = took
		defer func(at time.Time) { tm.OutcomeCommit = time.Since(at) }(time.Now())
	}
	s.point(CrashAfterGmailAnswer)
	var dropped *FaultError
	if errors.As(err, &dropped) {
		err = dropped.Err // Gmail's own answer, for the pause and the metrics
	}
	out := Classify(err)
	s.noteRateLimit(box, out)
	if s.obs != nil {
		s.obs.Attempted(job.Channel, out, took)
	}
	if dropped != nil {
		j, err := s.markUnknown(rec, job.MessageID, job.Attempts, Outcome{Verdict: Unknown, Reason: dropped.Reason}, dropped.RuleID)
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
			box.recent.note(sent.ID, job.MessageID, s.now())
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
