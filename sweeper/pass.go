package sweeper

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/policy"
	"github.com/gmailrelay/gmailrelay/relay"
)

// pass is the state of one RunOnce.
type pass struct {
	s         *Sweeper
	now       time.Time
	res       Result
	mailboxes map[string]gmailrelay.Mailbox
	// boxes: each mailbox's state in this pass, by the name jobs carry.
	// Every Gmail call and quota take of the pass goes through the one of
	// the job or batch it is for, passed explicitly.
	boxes map[string]*boxPass
	// searchCost is the quota the last search spent.
	searchCost int
	// companions: the companion after: query's answer per mailbox.
	companions map[string]companionAnswer
}

// boxPass is one mailbox's state in a pass.
type boxPass struct {
	name string // the mailbox's name as jobs carry it
	m    *relay.Mailbox
	// stopped: the mailbox's quota or Gmail asked to wait; nothing more
	// that costs its quota is tried in this pass (other mailboxes carry
	// on). wait is how long.
	stopped bool
	wait    time.Duration
	// limited: Gmail answered this mailbox with a rate limit during the
	// pass; answered: Gmail answered one of its calls without one.
	limited, answered bool
	// missing: the job's mailbox is not in the policy (err says why).
	err error
}

// box returns the pass's state of the mailbox a job names.
func (p *pass) box(name string) *boxPass {
	b, ok := p.boxes[name]
	if !ok {
		b = &boxPass{name: name}
		b.m, b.err = p.s.deps.Mailboxes.MailboxOf(name)
		if b.err != nil {
			p.s.deps.Logger.Error().Err(b.err).Str("mailbox", name).
				Msg("due jobs of a mailbox the policy no longer has: left as they are until it comes back or an operator resolves them")
		}
		p.boxes[name] = b
	}
	return b
}

// halted says whether the mailbox can do nothing more this pass.
func (b *boxPass) halted() bool { return b == nil || b.stopped || b.err != nil }

// gmail returns the mailbox's Gmail client and userId.
func (b *boxPass) gmail() (relay.Provider, string) { return b.m.Provider(), b.m.UserID() }

// finish sets the pass result's wait from the mailboxes that stopped: the
// shortest, and partial when some mailbox did not have to wait.
func (p *pass) finish() {
	stopped, going := 0, 0
	for _, b := range p.boxes {
		switch {
		case b.err != nil:
		case b.stopped:
			if stopped == 0 || b.wait < p.res.Wait {
				p.res.Wait = b.wait
			}
			stopped++
		default:
			going++
		}
	}
	p.res.partial = stopped > 0 && going > 0
}

// anyStopped says whether some mailbox had to stop (or is unknown).
func (p *pass) anyStopped() bool {
	for _, b := range p.boxes {
		if b.stopped || b.err != nil {
			return true
		}
	}
	return false
}

// errStopped ends a search when the pass had to stop; errChanged ends a
// Mutate whose job moved on since it was read.
var (
	errStopped = errors.New("sweeper: pass stopped to wait for quota")
	errChanged = errors.New("sweeper: job changed since it was read")
)

// action is what a due job needs.
type action int

const (
	actClear             action = iota // nothing to do: clear NextCheckAt
	actSearch                          // unknown: search and decide
	actVerify                          // sent, not verified: search once
	actRetry                           // retryable failure on a retry channel
	actUntrust                         // unknown in a mailbox whose handle is untrusted: review
	actResend                          // unknown with every check done, resend not made yet
	actDuplicateDelivery               // two own effect lines: delivered twice
)

func (p *pass) run(ctx context.Context) error {
	if p.s.deps.Expire != nil {
		if _, err := p.s.deps.Expire(ctx); err != nil {
			return fmt.Errorf("expire leases: %w", err)
		}
	}
	if err := p.histories(ctx); err != nil {
		return err
	}
	jobs, err := p.s.log.Due(ctx, p.now, p.s.limit)
	if err != nil {
		return fmt.Errorf("read due jobs: %w", err)
	}
	p.res.Due = len(jobs)
	if err := p.noteSends(ctx, jobs); err != nil {
		return err
	}
	handled := 0
	// Search batches, per mailbox, in due order.
	batches := map[string][]gmailrelay.Job{}
	var order []string
	flush := func(mailbox string) error {
		b := batches[mailbox]
		batches[mailbox] = nil
		box := p.box(mailbox)
		if box.halted() {
			return nil
		}
		n, err := p.searchBatch(ctx, box, b)
		handled += n
		return err
	}
	for _, j := range jobs {
		box := p.box(j.Mailbox)
		if box.halted() {
			continue
		}
		act, err := p.classify(ctx, j)
		if err != nil {
			return err
		}
		if act == actSearch && j.State == gmailrelay.StateFailed {
			// A failed job searched before its retry (rare: a resend
			// Gmail rate-limited) goes alone, at once: a one-id query
			// needs no header reads, so it never waits behind a batch
			// whose reads the quota keeps refusing.
			n, err := p.searchBatch(ctx, box, []gmailrelay.Job{j})
			handled += n
			if err != nil {
				return err
			}
			continue
		}
		if act == actSearch || act == actVerify {
			if _, ok := batches[j.Mailbox]; !ok {
				order = append(order, j.Mailbox)
			}
			batches[j.Mailbox] = append(batches[j.Mailbox], j)
			if len(batches[j.Mailbox]) >= p.s.batch {
				if err := flush(j.Mailbox); err != nil {
					return err
				}
			}
			continue
		}
		done, err := p.handle(ctx, box, j, act)
		if err != nil {
			return err
		}
		if done {
			handled++
		}
	}
	for _, mb := range order {
		if len(batches[mb]) > 0 {
			if err := flush(mb); err != nil {
				return err
			}
		}
	}
	if p.anyStopped() {
		p.res.Deferred = len(jobs) - handled
	}
	if len(jobs) >= p.s.limit {
		return p.makeRoom(ctx, jobs)
	}
	return nil
}

// makeRoom is for a full pass (as many due jobs as a pass takes) in which
// a mailbox had to wait longer than the loop's interval: its jobs still
// due would come first again in every pass until it resumes, and hold the
// other mailboxes' jobs out of the pass. Their next check moves to when
// their mailbox may go again.
func (p *pass) makeRoom(ctx context.Context, jobs []gmailrelay.Job) error {
	if len(p.s.deps.Mailboxes.Mailboxes()) < 2 {
		return nil // no other mailbox needs the room
	}
	for _, j := range jobs {
		b := p.boxes[j.Mailbox]
		if b == nil || !b.stopped || b.wait <= p.s.interval {
			continue
		}
		resume := p.now.Add(b.wait)
		_, _, err := p.s.log.Mutate(ctx, j.MessageID, func(cur *gmailrelay.Job) (gmailrelay.Change, error) {
			if cur == nil || cur.NextCheckAt.IsZero() || cur.NextCheckAt.After(p.now) {
				return gmailrelay.Change{}, nil // dealt with in this pass, or not due
			}
			n := *cur
			n.NextCheckAt = resume
			return gmailrelay.Change{Job: &n}, nil
		})
		if err != nil {
			return fmt.Errorf("move the check of %s past its mailbox's wait: %w", j.MessageID, err)
		}
	}
	return nil
}

// classify says what a due job needs.
func (p *pass) classify(ctx context.Context, j gmailrelay.Job) (action, error) {
	switch j.State {
	case gmailrelay.StateUnknown, gmailrelay.StateSent:
		if j.Effects >= 2 {
			dup, err := p.deliveredTwice(ctx, j)
			if err != nil || dup {
				return actDuplicateDelivery, err
			}
		}
		if j.State == gmailrelay.StateSent && j.Verified {
			return actClear, nil
		}
		mb, err := p.mailbox(ctx, j.Mailbox)
		if err != nil {
			return 0, err
		}
		switch {
		case mb.HandleUntrusted && j.State == gmailrelay.StateUnknown:
			return actUntrust, nil
		case j.State == gmailrelay.StateUnknown:
			if ch := p.channel(j.Channel); ch.OnUnknown == policy.Retry && j.Checks >= ch.Checks {
				// Its last miss is recorded; the resend waited for quota
				// (or a crash came between the two). The miss stands only
				// while it is fresh: a resend held back longer (the daily
				// budget, a Gmail pause) searches again first, since the
				// ambiguous copy may have become searchable meanwhile.
				fresh, err := p.missFresh(ctx, j, ch)
				if err != nil || !fresh {
					return actSearch, err
				}
				return actResend, nil
			}
			return actSearch, nil
		}
		// A sent job is verified in an untrusted mailbox too: a miss
		// proves nothing there (Gmail's answer stands), but two hits still
		// prove that Gmail delivered it twice.
		return actVerify, nil
	case gmailrelay.StateFailed:
		ch := p.channel(j.Channel)
		if !j.Retryable || ch.OnUnknown != policy.Retry {
			break
		}
		if j.AmbiguousAt.IsZero() {
			return actRetry, nil
		}
		// An earlier attempt was ambiguous (this failure is a resend that
		// did not go, e.g. Gmail's 429): the miss that decided the resend
		// stands only while it is fresh, as for an unknown job. Otherwise
		// the job is searched again (see decideFailed): a copy found means
		// the ambiguous attempt was delivered after all.
		mb, err := p.mailbox(ctx, j.Mailbox)
		if err != nil {
			return 0, err
		}
		fresh, err := p.missFresh(ctx, j, ch)
		if err != nil || !fresh || mb.HandleUntrusted {
			return actSearch, err
		}
		return actRetry, nil
	}
	return actClear, nil
}

// missFresh reports whether the job's last search is a counted miss (its
// check number is the job's Checks, so it was not a miss held back for
// want of a witness or for the mailbox's lag) recorded less than the
// channel's grace ago: only then may a resend or retry decided on it go
// without searching again. A miss older than that proves nothing about
// now: the index may have caught up with the ambiguous copy since. Nor
// does a miss recorded before a step of the wall clock, whose age the
// step falsified (see beforeStep).
func (p *pass) missFresh(ctx context.Context, j gmailrelay.Job, ch policy.Channel) (bool, error) {
	lines, err := p.s.log.JobLines(ctx, j.MessageID)
	if err != nil {
		return false, fmt.Errorf("read lines of %s: %w", j.MessageID, err)
	}
	for _, l := range slices.Backward(lines) {
		if l.Kind == gmailrelay.KindSearch {
			return l.Hits == 0 && l.Check == j.Checks && p.now.Sub(l.Time) < ch.Grace && !p.beforeStep(l.Time), nil
		}
	}
	return false, nil
}

func (p *pass) mailbox(ctx context.Context, name string) (gmailrelay.Mailbox, error) {
	if mb, ok := p.mailboxes[name]; ok {
		return mb, nil
	}
	mb, err := p.s.log.Mailbox(ctx, name)
	if err != nil {
		return gmailrelay.Mailbox{}, fmt.Errorf("read mailbox %s: %w", name, err)
	}
	p.mailboxes[name] = mb
	return mb, nil
}

// channel returns the job's channel policy. A channel that has left the
// policy since the job was logged is handled as review-only: a human
// decides rather than a guess.
func (p *pass) channel(name string) policy.Channel {
	ch, err := p.s.deps.Policy.Channel(name)
	if err != nil {
		return policy.Channel{Name: name, OnUnknown: policy.Review, Grace: policy.DefaultGrace, Checks: 1, MaxAttempts: 1}
	}
	return ch
}

// handle deals with a job that needs no search. done is false when the
// pass stopped before the job could be decided.
func (p *pass) handle(ctx context.Context, b *boxPass, j gmailrelay.Job, act action) (done bool, err error) {
	switch act {
	case actUntrust:
		line := gmailrelay.Line{Kind: gmailrelay.KindReview, Attempt: j.Attempts,
			Reason: ReasonHandleUntrusted, Note: "Gmail rewrote Message-IDs in this mailbox: a search miss proves nothing"}
		_, err := p.apply(ctx, j, review(j, line))
		return true, err
	case actRetry:
		return p.retry(ctx, b, j, 0)
	case actResend:
		return p.resend(ctx, b, j, 0)
	case actDuplicateDelivery:
		return p.duplicateDelivery(ctx, j)
	}
	_, err = p.apply(ctx, j, recheck(j, time.Time{}))
	return true, err
}
