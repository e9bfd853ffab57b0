package relay

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gmailrelay/gmailrelay"
)

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
	d, err := s.admitAttempt(ctx, box, cur.Channel, cur.Key, cur.MessageID, mode)
	if err != nil {
		return Result{}, err
	}
	if d.NotForwarded && cur.State == gmailrelay.StateQueued {
		// Gmail "unreachable" before anything was sent: a queued job stays
		// queued (queued → failed is not in the table); the outbox tries
		// again shortly. No attempt was made, so nothing is logged.
		return Result{Job: cur, Fault: d}, &Error{Code: CodeRateLimited, RetryAfter: 1,
			Message: "fault " + d.Mode + " injected (rule " + d.RuleID + ") on delivery: nothing was sent; the job stays queued"}
	}
	// The message is read before the attempt is logged: a forwarding line
	// with nothing to send (retention pruned the message, or the read
	// failed) would leave the job in flight with nothing in flight.
	raw, err := s.log.Raw(ctx, id)
	if err != nil {
		s.giveBack(ctx, box, d, true)
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
		s.giveBack(ctx, box, d, true)
		return Result{}, s.admissionRefused(id, made, adm, err)
	}
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
