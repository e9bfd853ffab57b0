package sweeper

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/policy"
	"github.com/gmailrelay/gmailrelay/relay"
)

// The sweeper's new attempts: a resend of an unknown job whose checks all
// missed, a retry of a retryable failed job. Both go through the send path
// (Config.Attempter), as a caller's attempt does.

// resend gives an unknown job whose checks all missed a new attempt with
// the same Message-ID, or hands it to a human when it has none left.
func (p *pass) resend(ctx context.Context, b *boxPass, j gmailrelay.Job, redo int) (bool, error) {
	spent, err := p.attemptsSpent(ctx, j, func(used, allowed int) string {
		return fmt.Sprintf("not in the mailbox after %d checks and %d attempts; the channel allows %d", j.Checks, used, allowed)
	})
	if spent || err != nil {
		return spent, err
	}
	if agrees, err := p.historyAgrees(ctx, j); err != nil || !agrees {
		return false, err
	}
	if !p.s.deps.DisableWitness {
		suspect, note, done, err := p.storedUnderGmailID(ctx, b, j)
		switch {
		case err != nil:
			p.res.Errors++
			p.s.deps.Logger.Warn().Err(err).Str("message_id", j.MessageID).Msg("list the attempt's window before a resend; tried again on a later pass")
			return true, nil
		case !done:
			return false, nil
		case suspect:
			line := gmailrelay.Line{Kind: gmailrelay.KindReview, Attempt: j.Attempts,
				Reason: ReasonHandleUntrusted, Note: "not found by its Message-ID, but " + note}
			_, err := p.apply(ctx, j, review(j, line))
			return true, err
		}
	}
	return p.attempt(ctx, b, j, gmailrelay.StateUnknown, ReasonResend, redo, &p.res.Resent)
}

// resendUnchecked resends an unknown job the history tail found no copy
// of: the tail read every SENT message of the attempt's window, with its
// Message-ID and job header, so the window check of resend is already
// done. The channel's attempts still bound it.
func (p *pass) resendUnchecked(ctx context.Context, b *boxPass, j gmailrelay.Job) (bool, error) {
	spent, err := p.attemptsSpent(ctx, j, func(used, allowed int) string {
		return fmt.Sprintf("not in the mailbox's history after %d attempts; the channel allows %d", used, allowed)
	})
	if spent || err != nil {
		return spent, err
	}
	return p.attempt(ctx, b, j, gmailrelay.StateUnknown, ReasonResend, 0, &p.res.Resent)
}

// retry gives a retryable failed job a new attempt, or hands it to a human
// when it has none left. The request never reached Gmail (or Gmail said it
// did not send), so no search is needed — unless an earlier attempt of the
// job was ambiguous: then classify has the job searched first (see
// decideFailed) when the miss behind the resend is not fresh. redo is as
// for attempt.
func (p *pass) retry(ctx context.Context, b *boxPass, j gmailrelay.Job, redo int) (bool, error) {
	spent, err := p.attemptsSpent(ctx, j, func(used, allowed int) string {
		return fmt.Sprintf("%d attempts, none sent; the channel allows %d", used, allowed)
	})
	if spent || err != nil {
		return spent, err
	}
	return p.attempt(ctx, b, j, gmailrelay.StateFailed, ReasonRetry, redo, &p.res.Retried)
}

// attemptsSpent hands j to a human (true) when its channel's attempts are
// used up; note says what they found, for the review line.
func (p *pass) attemptsSpent(ctx context.Context, j gmailrelay.Job, note func(used, allowed int) string) (bool, error) {
	ch := p.channel(j.Channel)
	used, err := p.attemptsUsed(ctx, j, ch)
	if err != nil || used < ch.MaxAttempts {
		return false, err
	}
	line := gmailrelay.Line{Kind: gmailrelay.KindReview, Attempt: j.Attempts, Reason: ReasonMaxAttempts, Note: note(used, ch.MaxAttempts)}
	_, err = p.apply(ctx, j, review(j, line))
	return true, err
}

// attemptsUsed is the job's attempts that count against MaxAttempts: every
// attempt but those Gmail refused with a rate limit and those that went
// back to the outbox's queue (Gmail rate-limited them or was not reached):
// they sent nothing and must never use up a job's attempts.
func (p *pass) attemptsUsed(ctx context.Context, j gmailrelay.Job, ch policy.Channel) (int, error) {
	if j.Attempts < ch.MaxAttempts {
		return j.Attempts, nil // the common case, without reading lines
	}
	lines, err := p.s.log.JobLines(ctx, j.MessageID)
	if err != nil {
		return 0, fmt.Errorf("read lines of %s: %w", j.MessageID, err)
	}
	used := j.Attempts
	for _, l := range lines {
		if l.Kind == gmailrelay.KindNotSent && (l.Reason == gmailrelay.ReasonRateLimited || l.State == gmailrelay.StateQueued) {
			used--
		}
	}
	return used, nil
}

// attempt makes a new attempt through the send path and counts it in
// *made when it was made (or failed with an error); done is false when the
// pass had to stop first (quota) or the job moved on. An attempt refused by the
// mailbox's daily sending budget is done without being made: the job's
// next check moves to when the budget frees (see deferToBudget) and the
// pass carries on, since searches and verifies spend no budget. redo is
// the quota the next pass spends again before it gets back to this attempt
// (the search that led to it): the wait reported covers it too, or a pass
// would spend the refill on the search and find the send refused again.
func (p *pass) attempt(ctx context.Context, b *boxPass, j gmailrelay.Job, from gmailrelay.State, reason gmailrelay.Reason, redo int, made *int) (done bool, err error) {
	if b.halted() {
		return false, nil
	}
	res, err := p.s.deps.Attempter.Attempt(ctx, relay.AttemptRequest{ID: j.MessageID, From: []gmailrelay.State{from}, Seen: j.Attempts, Reason: reason})
	var rerr *relay.Error
	switch {
	case errors.As(err, &rerr) && rerr.Code == relay.CodeRateLimited:
		if frees, spent := b.budgetSpent(); spent {
			return p.deferToBudget(ctx, j, reason, frees)
		}
		wait := time.Duration(max(rerr.RetryAfter, 1)) * time.Second
		// How long until send and search both fit (takes nothing).
		if ok, w := b.m.Quota().Available(relay.UnitsSend+redo, true); !ok {
			wait = max(wait, w)
		}
		b.stop(wait)
		return false, nil
	case errors.As(err, &rerr) && rerr.Code == relay.CodeConflict:
		return false, nil // someone else moved the job: theirs stands
	case errors.Is(err, relay.ErrClockSkew):
		b.stop(p.s.interval) // the clock fence closed during the pass: nothing was sent
		return false, nil
	case err != nil:
		p.res.Errors++
		p.s.deps.Logger.Warn().Err(err).Str("message_id", j.MessageID).Str("reason", string(reason)).Msg("sweeper attempt")
		*made++
		return true, nil
	}
	p.s.deps.Logger.Info().Str("message_id", j.MessageID).Str("reason", string(reason)).Int("attempt", res.Job.Attempts).
		Str("state", string(res.Job.State)).Msg("sweeper made a new attempt with the same Message-ID")
	if res.Job.State == gmailrelay.StateFailed && res.Job.LastReason == gmailrelay.ReasonRateLimited {
		p.rateLimited(b, 0) // Gmail said 429 to the send: nothing more this pass
	} else {
		b.answered = true
	}
	*made++
	return true, nil
}

// budgetSpent tells a refusal by the mailbox's daily sending
// budget from one by the per-minute quota or a Gmail rate-limit pause
// (all three are relay.CodeRateLimited): the send path asks the budget
// first, so a budget that has no room now refused the attempt. frees is
// how long until it has room.
func (b *boxPass) budgetSpent() (frees time.Duration, spent bool) {
	budget := b.m.Budget()
	if budget == nil {
		return 0, false
	}
	ok, in := budget.Available()
	return in, !ok
}

// deferToBudget moves the next check of a job whose attempt the daily
// budget refused to when the budget frees (a fenced write: a job that moved
// on is left to whoever moved it). Only this job waits: the budget can free
// hours later, and the mailbox's other searches and verifies must not wait
// with it. When the check comes, the job is looked at afresh: a resend
// whose miss is no longer fresh searches again first (see missFresh).
func (p *pass) deferToBudget(ctx context.Context, j gmailrelay.Job, reason gmailrelay.Reason, frees time.Duration) (bool, error) {
	next := p.now.Add(max(frees, time.Second))
	written, err := p.apply(ctx, j, recheck(j, next))
	if written {
		p.s.deps.Logger.Info().Str("message_id", j.MessageID).Str("reason", string(reason)).Time("next_check_at", next).
			Msg("the mailbox's daily sending budget is spent: the attempt waits for it, the sweeper carries on")
	}
	return true, err
}
