package relay

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gmailrelay/gmailrelay"
)

// initMailbox sets up a mailbox's daily budget when the Config gave none,
// counted from the log, and charges its quota with the sends the log shows
// in the last minute: a restart does not find a full bucket Gmail has
// already spent.
func (s *Service) initMailbox(ctx context.Context, m *Mailbox) error {
	recent, err := s.log.SendTimes(ctx, m.name, s.now().Add(-time.Minute))
	if err != nil {
		return fmt.Errorf("count the last minute's sends from the log: %w", err)
	}
	m.quota.Charge(len(recent) * UnitsSend)
	if m.budget != nil {
		return nil
	}
	b, err := NewBudget(ctx, s.log, m.name, s.policy.DailySendLimit(m.name), s.now)
	if err != nil {
		return fmt.Errorf("count the daily sending budget from the log: %w", err)
	}
	m.budget = b
	return nil
}

// IsRateLimited reports whether err is a CodeRateLimited refusal.
func IsRateLimited(err error) bool { return ErrorCode(err) == CodeRateLimited }

// QueueDepth returns the number of jobs in the queued state.
func (s *Service) QueueDepth(ctx context.Context) (int, error) {
	st, err := s.log.Stats(ctx)
	if err != nil {
		return 0, err
	}
	return st.ByState[gmailrelay.StateQueued], nil
}

// mustQueue says whether a new send is queued without trying: its send_at
// is ahead, or the caller accepts queueing and a job of its mailbox waits
// ahead of it (a new send never overtakes its mailbox's queue). A job
// scheduled later (send_at ahead) is not ahead of a send for now: the
// outbox order is send_at, then acceptance.
// It asks the log for one queued job (an index read), not for the log's
// counters, since it runs on every send; only when that one does not
// decide does it read the queue, at most queueScan jobs of it: past those
// (many jobs scheduled for later) the send is queued, and the outbox,
// woken at once, delivers it ahead of them, so a large schedule never
// makes every send read it all.
func (s *Service) mustQueue(ctx context.Context, box *Mailbox, p Prepared, o SendOptions) bool {
	now := s.now()
	if !p.SendAt.IsZero() && p.SendAt.After(now) {
		return true
	}
	if !o.Queue {
		return false
	}
	queued, err := s.log.ByState(ctx, gmailrelay.StateQueued, 1)
	if err != nil || len(queued) == 0 {
		return false
	}
	if s.waitsAhead(queued[0], box, now) {
		return true
	}
	if queued, err = s.log.ByState(ctx, gmailrelay.StateQueued, queueScan); err != nil {
		return false
	}
	for _, j := range queued {
		if s.waitsAhead(j, box, now) {
			return true
		}
	}
	return len(queued) == queueScan
}

// queueScan bounds the queued jobs mustQueue reads for one send.
const queueScan = 64

// waitsAhead reports whether queued job j comes before a send of box's
// accepted now: it is box's and not scheduled for later.
func (s *Service) waitsAhead(j gmailrelay.Job, box *Mailbox, now time.Time) bool {
	m, err := s.MailboxOf(j.Mailbox)
	return err == nil && m == box && !j.SendAt.After(now)
}

// enqueue logs a new job as queued (fsynced) and wakes the outbox. An
// existing job is answered by the front door as Send does; a retryable
// failed job cannot be queued (not in the transition table) and gets the
// refusal instead.
func (s *Service) enqueue(ctx context.Context, box *Mailbox, p Prepared, o SendOptions) (Result, error) {
	var front *Result
	var frontErr error
	job, _, err := s.log.Mutate(ctx, p.MessageID, func(cur *gmailrelay.Job) (gmailrelay.Change, error) {
		front, frontErr = nil, nil
		if cur != nil {
			res, done, err := frontDoor(cur, p)
			if !done {
				err = &Error{Code: CodeRateLimited, RetryAfter: 60,
					Message: "the mailbox's budget is spent and a failed job cannot be queued; nothing was sent"}
			}
			front, frontErr = &res, err
			return gmailrelay.Change{}, nil
		}
		if err := box.checkLimits(&p); err != nil {
			front, frontErr = &Result{}, err
			return gmailrelay.Change{}, nil
		}
		now := s.now()
		reason := gmailrelay.ReasonBudgetSpent
		if p.SendAt.After(now) {
			reason = gmailrelay.ReasonSendAt
		}
		j := gmailrelay.Job{MessageID: p.MessageID, Key: p.Key, Channel: p.Channel, Mailbox: box.name,
			Fingerprint: p.Fingerprint, ThreadIDIn: p.ThreadID, SendAt: p.SendAt, CreatedAt: s.acceptedAt(), UpdatedAt: now}
		lines := []gmailrelay.Line{
			{Kind: gmailrelay.KindReceived, Channel: p.Channel},
			gmailrelay.Move(&j, gmailrelay.StateQueued, gmailrelay.Line{Kind: gmailrelay.KindState, Reason: reason}),
		}
		return gmailrelay.Change{Job: &j, Lines: lines, Raw: p.Raw}, nil
	})
	if err != nil {
		return Result{}, caseConflict(err)
	}
	if front != nil {
		return *front, frontErr
	}
	if s.onQueued != nil {
		s.onQueued()
	}
	return Result{Job: job}, nil
}

// Deliver makes the outbox's attempt of a queued job through the send path
// (same Message-ID, fault rules, outcome table), taking quota as the
// delivery loop (leaving the reconciliation share) and one unit of the
// daily budget. A spent budget is CodeRateLimited (the job stays queued);
// a job no longer queued is CodeConflict.
func (s *Service) Deliver(ctx context.Context, id string) (Result, error) {
	return s.attempt(ctx, id, []gmailrelay.State{gmailrelay.StateQueued}, AnyAttempts, gmailrelay.ReasonOutbox, takeDelivery, nil)
}

// Cancel abandons a queued job: a resolved line (actor, reason cancelled)
// moves it to abandoned. Errors: CodeNotFound, CodeConflict (the job is
// not queued).
func (s *Service) Cancel(ctx context.Context, id, actor string) (Result, error) {
	j, _, err := s.log.Mutate(ctx, id, func(cur *gmailrelay.Job) (gmailrelay.Change, error) {
		if cur == nil {
			return gmailrelay.Change{}, &Error{Code: CodeNotFound, Message: "no job with that Message-ID"}
		}
		if cur.State != gmailrelay.StateQueued {
			return gmailrelay.Change{}, &Error{Code: CodeConflict, Message: fmt.Sprintf("job is %s; only a queued job can be cancelled", cur.State)}
		}
		j := *cur
		j.UpdatedAt = s.now()
		// The job says who ended it, for whoever reads the job alone (the
		// front door's answer to its key, the console): the earlier
		// attempts' outcomes stay on their lines.
		j.LastStatus, j.LastReason, j.LastError = 0, gmailrelay.ReasonCancelled, CancelledBy(actor)
		line := gmailrelay.Move(&j, gmailrelay.StateAbandoned, gmailrelay.Line{Kind: gmailrelay.KindResolved,
			Attempt: j.Attempts, Reason: gmailrelay.ReasonCancelled, Actor: actor})
		return gmailrelay.Change{Job: &j, Lines: []gmailrelay.Line{line}}, nil
	})
	if errors.Is(err, gmailrelay.ErrNotFound) {
		err = &Error{Code: CodeNotFound, Message: "no job with that Message-ID"}
	}
	return Result{Job: j}, err
}

// CancelledBy is the job's last_error after Cancel: who cancelled it.
// actor is the API's ("api" for the API token, "admin" for the admin
// token, either followed by ":" and the caller's ?actor=).
func CancelledBy(actor string) string {
	who := "an API caller"
	if actor == "admin" || strings.HasPrefix(actor, "admin:") {
		who = "an operator with the admin token"
	}
	return "cancelled while queued by " + who + " (DELETE /v1/jobs, actor " + actor + ")"
}

// requeues reports whether an attempt's outcome sends its job back to the
// queue when the attempt may wait: Gmail answered a rate limit, or was not
// reached, so nothing was sent and waiting is the cure. A token that
// cannot be refreshed is not: an operator must fix it, and the job fails.
func requeues(o Outcome) bool {
	return o.Verdict == Failed && (o.Reason == gmailrelay.ReasonRateLimited || o.Reason == gmailrelay.ReasonNotReached)
}

// notReachedDelay is how long a job that went back to the queue because
// Gmail was not reached waits before the next attempt: 5 s after its
// first attempt, doubling with each further one, at most 15 minutes (as
// the rate-limit backoff): every attempt counts against the daily budget.
func notReachedDelay(attempts int) time.Duration {
	return min(5*time.Second<<min(max(attempts-1, 0), 8), 15*time.Minute)
}

// HeldUntil is the time before which the delivery loop leaves a queued job
// alone on its own account: after an attempt that did not reach Gmail,
// notReachedDelay after it. It is read off the job, so it holds across
// restarts and replicas. A rate limit pauses the whole mailbox through its
// quota instead. Zero for any other job.
func HeldUntil(j gmailrelay.Job) time.Time {
	if j.State != gmailrelay.StateQueued || j.LastReason != gmailrelay.ReasonNotReached {
		return time.Time{}
	}
	return j.UpdatedAt.Add(notReachedDelay(j.Attempts))
}
