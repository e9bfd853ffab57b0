package relay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gmailrelay/gmailrelay/acceptlog"
	"github.com/gmailrelay/gmailrelay/faultmodes"
)

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
