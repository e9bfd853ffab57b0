package relay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gmailrelay/gmailrelay/acceptlog"
	"github.com/gmailrelay/gmailrelay/policy"
)

// initOutbox sets up the daily budget when the Config gave none.
// It also charges the quota with the sends the log shows in the last
// minute: a restart does not find a full bucket Gmail has already spent.
func (s *Service) initOutbox(ctx context.Context) error {
	recent, err := s.log.SendTimes(ctx, s.mailbox, s.now().Add(-time.Minute))
	if err != nil {
		return fmt.Errorf("count the last minute's sends from the log: %w", err)
	}
	s.quota.Charge(len(recent) * UnitsSend)
	if s.budget != nil {
		return nil
	}
	b, err := NewBudget(ctx, s.log, s.mailbox, s.policy.DailySendLimit(policy.DefaultMailbox), s.now)
	if err != nil {
		return fmt.Errorf("count the daily sending budget from the log: %w", err)
	}
	s.budget = b
	return nil
}

// Budget returns the mailbox's daily sending budget.
func (s *Service) Budget() *Budget { return s.budget }

// IsRateLimited reports whether err is a CodeRateLimited refusal.
func IsRateLimited(err error) bool { return ErrorCode(err) == CodeRateLimited }

// QueueDepth returns the number of jobs in the queued state.
func (s *Service) QueueDepth(ctx context.Context) (int, error) {
	st, err := s.log.Stats(ctx)
	if err != nil {
		return 0, err
	}
	return st.ByState[acceptlog.StateQueued], nil
}

// mustQueue says whether a new send is queued without trying: its send_at
// is ahead, or the caller accepts queueing and other jobs wait (a new send
// never overtakes the queue).
// It asks the log for one queued job (an index read), not for the
// log's counters, since it runs on every send.
func (s *Service) mustQueue(ctx context.Context, p Prepared, o SendOptions) bool {
	if !p.SendAt.IsZero() && p.SendAt.After(s.now()) {
		return true
	}
	if !o.Queue {
		return false
	}
	queued, err := s.log.ByState(ctx, acceptlog.StateQueued, 1)
	return err == nil && len(queued) > 0
}

// enqueue logs a new job as queued (fsynced) and wakes the outbox. An
// existing job is answered by the front door as Send does; a retryable
// failed job cannot be queued (not in the transition table) and gets the
// refusal instead.
func (s *Service) enqueue(ctx context.Context, p Prepared, o SendOptions) (Result, error) {
	var front *Result
	var frontErr error
	job, _, err := s.log.Mutate(ctx, p.MessageID, func(cur *acceptlog.Job) (acceptlog.Change, error) {
		front, frontErr = nil, nil
		if cur != nil {
			res, done, err := s.frontDoor(cur, p)
			if !done {
				err = &Error{Code: CodeRateLimited, RetryAfter: 60,
					Message: "the mailbox's budget is spent and a failed job cannot be queued; nothing was sent"}
			}
			front, frontErr = &res, err
			return acceptlog.Change{}, nil
		}
		now := s.now()
		reason := acceptlog.ReasonBudgetSpent
		if p.SendAt.After(now) {
			reason = acceptlog.ReasonSendAt
		}
		j := acceptlog.Job{MessageID: p.MessageID, Key: p.Key, Channel: p.Channel, Mailbox: s.mailbox,
			Fingerprint: p.Fingerprint, ThreadIDIn: p.ThreadID, SendAt: p.SendAt, CreatedAt: now, UpdatedAt: now}
		lines := []acceptlog.Line{
			{Kind: acceptlog.KindReceived, Channel: p.Channel},
			acceptlog.Move(&j, acceptlog.StateQueued, acceptlog.Line{Kind: acceptlog.KindState, Reason: reason}),
		}
		return acceptlog.Change{Job: &j, Lines: lines, Raw: p.Raw}, nil
	})
	if err != nil {
		return Result{}, err
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
	return s.attempt(ctx, id, []acceptlog.State{acceptlog.StateQueued}, acceptlog.ReasonOutbox, takeDelivery, nil)
}

// Cancel abandons a queued job: a resolved line (actor, reason cancelled)
// moves it to abandoned. Errors: CodeNotFound, CodeConflict (the job is
// not queued).
func (s *Service) Cancel(ctx context.Context, id, actor string) (Result, error) {
	j, _, err := s.log.Mutate(ctx, id, func(cur *acceptlog.Job) (acceptlog.Change, error) {
		if cur == nil {
			return acceptlog.Change{}, &Error{Code: CodeNotFound, Message: "no job with that Message-ID"}
		}
		if cur.State != acceptlog.StateQueued {
			return acceptlog.Change{}, &Error{Code: CodeConflict, Message: fmt.Sprintf("job is %s; only a queued job can be cancelled", cur.State)}
		}
		j := *cur
		j.UpdatedAt = s.now()
		line := acceptlog.Move(&j, acceptlog.StateAbandoned, acceptlog.Line{Kind: acceptlog.KindResolved,
			Attempt: j.Attempts, Reason: acceptlog.ReasonCancelled, Actor: actor})
		return acceptlog.Change{Job: &j, Lines: []acceptlog.Line{line}}, nil
	})
	if errors.Is(err, acceptlog.ErrNotFound) {
		err = &Error{Code: CodeNotFound, Message: "no job with that Message-ID"}
	}
	return Result{Job: j}, err
}
