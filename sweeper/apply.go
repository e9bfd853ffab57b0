package sweeper

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmailrelay/gmailrelay"
)

// decision is what the sweeper does with one job once it has looked, as a
// plain value: the decide functions (decide.go) compute it without I/O, and
// pass.apply alone writes it. Whatever a decision sets, it sets in one
// transaction with the lines that explain it.
type decision struct {
	// lines are written first, in order: the search that led to the
	// decision, a handle line.
	lines []gmailrelay.Line
	// found is the copy of the job's message a search found once; its
	// effect line depends on the effects the job has when the write reads
	// it (see settleFound).
	found *hit
	// to is the state the job moves to ("": it stays), why the line that
	// says so, written last.
	to  gmailrelay.State
	why gmailrelay.Line
	// checks, looks and verified are the job's Checks, VerifyLooks and
	// Verified after the write. The write's guard re-checks them against
	// the job as read, so a decision knows their values before.
	checks, looks int
	verified      bool
	// next is the job's next check after the write (zero: none), unless
	// keepNext leaves the job's own.
	next     time.Time
	keepNext bool
	// mailbox edits the job's mailbox record in the same transaction.
	mailbox boxEdit
	// then is what the pass does once the decision is written.
	then follow
	// count is the Result counters a written decision adds one to; every
	// move to review also counts Reviewed.
	count tally
	// say is logged once the decision is written (as is every move to
	// review, at warning level with its reason).
	say logLine
}

// keep is the decision that changes nothing but the job's UpdatedAt: the
// base of every decision.
func keep(j gmailrelay.Job) decision {
	return decision{checks: j.Checks, looks: j.VerifyLooks, verified: j.Verified, keepNext: true}
}

// recheck is the decision to write lines and look at j again at next
// (zero: not again).
func recheck(j gmailrelay.Job, next time.Time, lines ...gmailrelay.Line) decision {
	d := keep(j)
	d.lines, d.next, d.keepNext = lines, next, false
	return d
}

// review is the decision to write lines and hand j to a human with the
// review line why.
func review(j gmailrelay.Job, why gmailrelay.Line, lines ...gmailrelay.Line) decision {
	d := recheck(j, time.Time{}, lines...)
	d.to, d.why = gmailrelay.StateReview, why
	return d
}

// counting is d counting t too.
func (d decision) counting(t tally) decision {
	d.count |= t
	return d
}

// follow is what the pass does once a decision is written.
type follow int

const (
	followNone   follow = iota
	followResend        // a new attempt of an unknown job (pass.resend)
	followRetry         // a new attempt of a retryable failed job (pass.retry)
)

// tally is a set of Result counters.
type tally uint8

const (
	tChecked tally = 1 << iota
	tFound
	tDuplicates
	tMissed
	tUnwitnessed
	tVerified
)

// add adds one to each of r's counters in t.
func (t tally) add(r *Result) {
	for _, c := range []struct {
		t tally
		n *int
	}{{tChecked, &r.Checked}, {tFound, &r.Found}, {tDuplicates, &r.Duplicates}, {tMissed, &r.Missed},
		{tUnwitnessed, &r.Unwitnessed}, {tVerified, &r.Verified}} {
		if t&c.t != 0 {
			*c.n++
		}
	}
}

// logLine is a log line of a written decision: its level, message, and
// attributes (key, value, ...) beside the job's message_id.
type logLine struct {
	level zerolog.Level
	msg   string
	attrs []string
}

// alarm is an error-level log line.
func alarm(msg string, attrs ...string) logLine {
	return logLine{level: zerolog.ErrorLevel, msg: msg, attrs: attrs}
}

// boxEdit is what a decision changes in the record of the job's mailbox
// (and in the pass's copies of it).
type boxEdit struct {
	// lag is a lag sample to add (see lagSample).
	lag *lagEdit
	// rewrites is how many rewrites of a Message-ID by Gmail to add to the
	// record, which then says the handle was checked and is untrusted.
	rewrites int
	// untrusted: Gmail replaced the job's Message-ID, so the pass's copy
	// of the record says the handle is untrusted.
	untrusted bool
	// forget: the job's Message-ID will never be found again and so can
	// witness nothing: it is no longer the mailbox's last send.
	forget bool
}

// edit is the gmailrelay.Change.EditMailbox of a write of e for the job
// whose Message-ID is id; nil when e changes nothing in the record.
func (e boxEdit) edit(id string) func(m *gmailrelay.Mailbox) {
	if e.lag == nil && e.rewrites == 0 && !e.forget {
		return nil
	}
	return func(m *gmailrelay.Mailbox) {
		if e.lag != nil {
			m.Lags.Add(e.lag.key, e.lag.d)
			e.lag.stored = m.Lags
		}
		if e.rewrites > 0 {
			m.HandleChecked, m.HandleUntrusted = true, true
			m.Rewrites += e.rewrites
		}
		if e.forget && m.LastSendID == id {
			m.LastSendID, m.LastSendAt = "", time.Time{}
		}
	}
}

// apply writes d, decided on the job as the pass read it (read), and says
// whether it wrote. The write is one Mutate: d's lines, the job's new
// fields and state, the edit of its mailbox's record. It is guarded: when
// the job moved on since it was read (another state, attempt, check count
// or verification), nothing is written and the error is nil — whoever moved
// it decided. What d does not know from the job as read (its effects, for a
// found copy) is read from the job as the write reads it (settleFound). A
// written decision is counted and logged (see report).
func (p *pass) apply(ctx context.Context, read gmailrelay.Job, d decision) (written bool, err error) {
	var done decision
	_, _, err = p.s.log.Mutate(ctx, read.MessageID, func(cur *gmailrelay.Job) (gmailrelay.Change, error) {
		if cur == nil || cur.State != read.State || cur.Attempts != read.Attempts ||
			cur.Checks != read.Checks || cur.Verified != read.Verified || cur.VerifyLooks != read.VerifyLooks {
			return gmailrelay.Change{}, errChanged
		}
		n := *cur
		done = settleFound(d, &n)
		n.Checks, n.VerifyLooks, n.Verified = done.checks, done.looks, done.verified
		if !done.keepNext {
			n.NextCheckAt = done.next
		}
		lines := slices.Clone(done.lines)
		if done.to != "" {
			lines = append(lines, gmailrelay.Move(&n, done.to, done.why))
		}
		n.UpdatedAt = p.now
		return gmailrelay.Change{Job: &n, Lines: lines, EditMailbox: done.mailbox.edit(read.MessageID)}, nil
	})
	if errors.Is(err, errChanged) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("record sweep of %s: %w", read.MessageID, err)
	}
	p.report(read, done)
	return true, nil
}

// report counts and logs a written decision d about job j, and makes the
// pass's copies of j's mailbox follow what d wrote.
func (p *pass) report(j gmailrelay.Job, d decision) {
	d.count.add(&p.res)
	log := p.s.deps.Logger
	if d.to == gmailrelay.StateReview {
		p.res.Reviewed++
		log.Warn().Str("message_id", j.MessageID).Str("reason", string(d.why.Reason)).Msg("job handed to a human for review")
	}
	if d.mailbox.lag != nil {
		p.keepLag(j.Mailbox, d.mailbox.lag)
	}
	if d.mailbox.forget {
		p.s.sends[j.Mailbox] = slices.DeleteFunc(p.s.sends[j.Mailbox], func(r sendRef) bool { return r.id == j.MessageID })
		if mb, ok := p.mailboxes[j.Mailbox]; ok && mb.LastSendID == j.MessageID {
			mb.LastSendID, mb.LastSendAt = "", time.Time{}
			p.mailboxes[j.Mailbox] = mb
		}
	}
	if d.mailbox.untrusted {
		mb := p.mailboxes[j.Mailbox]
		mb.Name, mb.HandleChecked, mb.HandleUntrusted = j.Mailbox, true, true
		p.mailboxes[j.Mailbox] = mb
	}
	if d.say.msg != "" {
		e := log.WithLevel(d.say.level).Str("message_id", j.MessageID)
		for i := 0; i+1 < len(d.say.attrs); i += 2 {
			e = e.Str(d.say.attrs[i], d.say.attrs[i+1])
		}
		e.Msg(d.say.msg)
	}
}

// judge decides a searched job and writes the decision: it gathers what
// the decision for the job's state needs besides the search (the attempts
// used, a lag sample, the handle read back), decides, and applies. It
// returns false when the job is left for a later pass (the mailbox had to
// stop first).
func (p *pass) judge(ctx context.Context, b *boxPass, j gmailrelay.Job, q string, hits []hit, witness string) (bool, error) {
	l := p.look(j, q, hits, witness)
	var d decision
	switch j.State {
	case gmailrelay.StateSent:
		switch {
		case len(hits) == 1 && j.VerifyLooks == 0:
			lag, err := p.lagSample(ctx, j)
			if err != nil {
				return false, err
			}
			l.lag = lag
		case len(hits) == 0 && j.GmailID != "":
			// A suspect handle: one messages.get decides rewritten,
			// deleted or index behind.
			var done bool
			if l.handle, done = p.readHandle(ctx, b, j); !done {
				return false, nil
			}
		}
		d = decideVerify(l)
	case gmailrelay.StateFailed:
		d = decideFailed(l)
	default:
		used, err := p.attemptsUsed(ctx, j, l.ch)
		if err != nil {
			return false, err
		}
		l.used = used
		d = decideUnknown(l)
	}
	return p.settle(ctx, b, j, d)
}

// look is what the pass knows of j, for a decision on its search by query q
// that found hits (witness: the miss's, see witnesses).
func (p *pass) look(j gmailrelay.Job, q string, hits []hit, witness string) look {
	ch := p.channel(j.Channel)
	l := look{job: j, ch: ch, now: p.now, query: q, hits: hits, witness: witness, used: j.Attempts,
		untrusted: p.mailboxes[j.Mailbox].HandleUntrusted, hold: p.stepHold(j, ch), since: p.sinceAttempt(j)}
	if p99, n := p.s.lags.quantile(j.Mailbox, 0.99); n > 0 && !p.s.deps.DisableWitness {
		l.lagUntil = attemptEnd(j).Add(p99)
	}
	return l
}

// settle applies d to j and then makes what d says follows (a resend, a
// retry), with the search's cost to redo. It returns false when the
// follow-up is left for a later pass.
func (p *pass) settle(ctx context.Context, b *boxPass, j gmailrelay.Job, d decision) (bool, error) {
	written, err := p.apply(ctx, j, d)
	if err != nil || !written || d.then == followNone {
		return true, err
	}
	j.Checks = d.checks
	if d.then == followRetry {
		return p.retry(ctx, b, j, p.searchCost)
	}
	return p.resend(ctx, b, j, p.searchCost)
}
