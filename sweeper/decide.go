package sweeper

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/policy"
)

// decideUnknown records the search of an unknown job and acts on it. It
// returns false when the job is left for a later pass (its resend waits for
// quota).
func (p *pass) decideUnknown(ctx context.Context, b *boxPass, j gmailrelay.Job, q string, hits []hit, witness string) (bool, error) {
	ch := p.channel(j.Channel)
	check := j.Checks + 1
	search := searchLine(j, q, hits, check)
	if len(hits) == 0 {
		search.Witness = witness
	}
	hold := p.stepHold(j, ch)
	switch {
	case len(hits) == 0 && p.mailboxes[j.Mailbox].HandleUntrusted:
		// This pass found Gmail rewriting ids in the mailbox: the miss
		// proves nothing.
		written, err := p.toReview(ctx, j, evidence(search, ReasonHandleUntrusted, nil,
			"not found, but Gmail replaces Message-IDs in this mailbox, so a miss proves nothing"), search)
		p.count(written, &p.res.Checked)
		return true, err
	case len(hits) == 0 && hold > 0:
		// The wall clock stepped forward after the attempt, which may be
		// younger than it looks: the miss does not count until real time
		// has caught up (see stepHold); look again then.
		search.Note = fmt.Sprintf("the relay's clock stepped forward since the attempt: no miss counts for %s more", hold.Round(time.Second))
		written, err := p.mutate(ctx, j, func(n *gmailrelay.Job) []gmailrelay.Line {
			n.NextCheckAt = p.now.Add(hold)
			return []gmailrelay.Line{search}
		})
		p.count(written, &p.res.Checked, &p.res.Unwitnessed)
		return true, err
	case len(hits) == 0 && witness == WitnessMissing && p.sinceAttempt(j) >= ch.Unwitnessed():
		written, err := p.toReview(ctx, j, evidence(search, ReasonIndexUnverifiable, nil,
			fmt.Sprintf("no witness that the mailbox's index caught up for %s after the attempt (max_unwitnessed %s): a miss proves nothing",
				p.sinceAttempt(j).Round(time.Second), ch.Unwitnessed())), search)
		if written {
			p.s.deps.Logger.Error().Str("message_id", j.MessageID).Str("mailbox", j.Mailbox).
				Msg("ALARM: the mailbox's search shows no witness for max_unwitnessed; the ambiguous job is handed to a human")
		}
		p.count(written, &p.res.Checked, &p.res.Unwitnessed)
		return true, err
	case len(hits) == 0 && p.beforeLagP99(j):
		// Younger than the mailbox's observed p99 lag: the miss does not
		// count yet; look again when it is that old.
		p99, _ := p.s.lags.quantile(j.Mailbox, 0.99)
		written, err := p.mutate(ctx, j, func(n *gmailrelay.Job) []gmailrelay.Line {
			n.NextCheckAt = attemptEnd(j).Add(p99)
			return []gmailrelay.Line{search}
		})
		p.count(written, &p.res.Checked, &p.res.Unwitnessed)
		return true, err
	case len(hits) == 0 && witness == WitnessMissing:
		// No witness: the index is behind, or Gmail could not match the
		// query. The miss does not count; look again after grace.
		written, err := p.mutate(ctx, j, func(n *gmailrelay.Job) []gmailrelay.Line {
			n.NextCheckAt = p.now.Add(ch.Grace)
			return []gmailrelay.Line{search}
		})
		p.count(written, &p.res.Checked, &p.res.Unwitnessed)
		return true, err
	case len(hits) == 1 && ch.OnUnknown == policy.Retry:
		return p.foundOnce(ctx, j, search, hits[0], ch)
	case len(hits) == 1:
		// Gmail accepted the send (its effect line, from the search), but
		// this channel leaves the decision to a human: a retry they ask
		// for then makes a second effect, a duplicate_delivery.
		h := hits[0]
		written, err := p.mutate(ctx, j, func(n *gmailrelay.Job) []gmailrelay.Line {
			lines := []gmailrelay.Line{search}
			if found, ok := foundEffect(n, h); ok {
				lines = append(lines, found)
			}
			n.NextCheckAt = time.Time{}
			return append(lines, gmailrelay.Move(n, gmailrelay.StateReview, evidence(search, ReasonReviewChannel, hits,
				"found once in the mailbox; this channel never resolves ambiguous sends by itself")))
		})
		if written {
			p.res.Reviewed++
			p.s.deps.Logger.Warn().Str("message_id", j.MessageID).Str("reason", string(ReasonReviewChannel)).Msg("job handed to a human for review")
		}
		p.count(written, &p.res.Checked, &p.res.Found)
		return true, err
	case len(hits) >= 2:
		written, err := p.toReview(ctx, j, evidence(search, ReasonDuplicate, hits, "the mailbox holds this message more than once"), search)
		p.count(written, &p.res.Checked, &p.res.Duplicates)
		return true, err
	case check < ch.Checks:
		written, err := p.mutate(ctx, j, func(n *gmailrelay.Job) []gmailrelay.Line {
			n.Checks = check
			n.NextCheckAt = p.now.Add(ch.Grace)
			return []gmailrelay.Line{search}
		})
		p.count(written, &p.res.Checked, &p.res.Missed)
		return true, err
	case ch.OnUnknown != policy.Retry:
		written, err := p.toReview(ctx, j, evidence(search, ReasonMissingAfterChecks, nil,
			fmt.Sprintf("not in the mailbox after %d checks", check)), search)
		p.count(written, &p.res.Checked)
		return true, err
	}
	used, err := p.attemptsUsed(ctx, j, ch)
	if err != nil {
		return false, err
	}
	if used >= ch.MaxAttempts {
		written, err := p.toReview(ctx, j, evidence(search, ReasonMaxAttempts, nil,
			fmt.Sprintf("not in the mailbox after %d checks and %d attempts; the channel allows %d", check, used, ch.MaxAttempts)), search)
		p.count(written, &p.res.Checked)
		return true, err
	}
	return p.missThen(ctx, b, j, search, p.resend)
}

// missThen records the miss search (its check becomes the job's Checks)
// and then makes the attempt it decided (resend or retry), with the
// search's cost to redo. The miss is written first: if the attempt cannot
// go now, the job stays due with its checks done, and a later pass makes
// it without searching while the miss is fresh (see missFresh), after a
// new search otherwise.
func (p *pass) missThen(ctx context.Context, b *boxPass, j gmailrelay.Job, search gmailrelay.Line,
	act func(ctx context.Context, b *boxPass, j gmailrelay.Job, redo int) (bool, error)) (bool, error) {
	written, err := p.mutate(ctx, j, func(n *gmailrelay.Job) []gmailrelay.Line {
		n.Checks = search.Check
		return []gmailrelay.Line{search}
	})
	p.count(written, &p.res.Checked)
	if err != nil || !written {
		return true, err
	}
	j.Checks = search.Check
	return act(ctx, b, j, p.searchCost)
}

// resend gives an unknown job whose checks all missed a new attempt with
// the same Message-ID, or hands it to a human when it has none left.
func (p *pass) resend(ctx context.Context, b *boxPass, j gmailrelay.Job, redo int) (bool, error) {
	spent, err := p.attemptsSpent(ctx, j, func(used, allowed int) string {
		return fmt.Sprintf("not in the mailbox after %d checks and %d attempts; the channel allows %d", j.Checks, used, allowed)
	})
	if spent || err != nil {
		return spent, err
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
			_, err := p.toReview(ctx, j, line)
			return true, err
		}
	}
	return p.attempt(ctx, b, j, gmailrelay.StateUnknown, ReasonResend, redo, &p.res.Resent)
}

// foundOnce records a search that found exactly one copy of an ambiguous
// job's message on a retry channel: the ambiguous attempt was delivered,
// and the job is sent (effect line, source search) with its late look
// scheduled.
func (p *pass) foundOnce(ctx context.Context, j gmailrelay.Job, search gmailrelay.Line, h hit, ch policy.Channel) (bool, error) {
	twice := false
	written, err := p.mutate(ctx, j, func(n *gmailrelay.Job) []gmailrelay.Line {
		found, effect := foundEffect(n, h)
		switch {
		case !effect:
			found.Kind = gmailrelay.KindState // the copy counted before: still one delivery
		case n.Effects > 1:
			// A copy other than the one an effect line counts already:
			// delivered twice.
			twice = true
			n.NextCheckAt = time.Time{}
			return []gmailrelay.Line{search, found, gmailrelay.Move(n, gmailrelay.StateReview, gmailrelay.Line{Kind: gmailrelay.KindReview,
				Attempt: n.Attempts, Reason: ReasonDuplicateDelivery, GmailID: h.id,
				Note: fmt.Sprintf("found a copy (gmail id %s) besides the one %d effect line(s) count already", h.id, n.Effects-1)})}
		}
		p.oneCopy(n, ch) // this search, after grace, already counted exactly one
		return []gmailrelay.Line{search, gmailrelay.Move(n, gmailrelay.StateSent, found)}
	})
	switch {
	case written && twice:
		p.res.Duplicates++
		p.res.Reviewed++
		p.s.deps.Logger.Error().Str("message_id", j.MessageID).Str("gmail_id", h.id).
			Msg("ALARM: the relay delivered a message twice (two own effects); handed to a human")
	case written:
		p.s.deps.Logger.Info().Str("message_id", j.MessageID).Str("gmail_id", h.id).Msg("ambiguous send found in the mailbox: sent")
	}
	p.count(written, &p.res.Checked, &p.res.Found)
	return true, err
}

// foundEffect is the line that records copy h of job n found by a search,
// with n's Gmail id and labels set: an effect line (source search, and
// n's Effects counts it) unless an effect line already counts that very
// copy (a found copy, then a retry whose outcome was unknown: the search
// finds the same copy again, which is still one delivery); then effect is
// false and the line is the caller's to give a kind.
func foundEffect(n *gmailrelay.Job, h hit) (line gmailrelay.Line, effect bool) {
	effect = n.Effects == 0 || n.GmailID != h.id
	n.GmailID, n.LabelIDs = h.id, append([]string(nil), h.labels...)
	line = gmailrelay.Line{Kind: gmailrelay.KindEffect, Attempt: n.Attempts, Reason: ReasonFound, Source: gmailrelay.SourceSearch,
		GmailID: h.id, LabelIDs: n.LabelIDs}
	if effect {
		n.Effects++
	}
	return line, effect
}

// decideFailed records the search of a retryable failed job with an
// ambiguous attempt in its past, searched because the miss that decided
// its resend is no longer fresh (see classify), and acts on it: one copy
// means the ambiguous attempt was delivered after all (failed → sent), two
// or more go to review, and a miss confirms the resend decision: the job
// is retried (or goes to review when it has no attempt left). The miss
// needs no witness: it repeats a miss that counted, later, when the index
// can only have caught up further. In a mailbox whose handle is untrusted
// a miss proves nothing: review.
func (p *pass) decideFailed(ctx context.Context, b *boxPass, j gmailrelay.Job, q string, hits []hit) (bool, error) {
	ch := p.channel(j.Channel)
	check := j.Checks + 1
	search := searchLine(j, q, hits, check)
	switch {
	case len(hits) == 1:
		return p.foundOnce(ctx, j, search, hits[0], ch)
	case len(hits) >= 2:
		written, err := p.toReview(ctx, j, evidence(search, ReasonDuplicate, hits, "the mailbox holds this message more than once"), search)
		p.count(written, &p.res.Checked, &p.res.Duplicates)
		return true, err
	case p.mailboxes[j.Mailbox].HandleUntrusted:
		written, err := p.toReview(ctx, j, evidence(search, ReasonHandleUntrusted, nil,
			"not found, but Gmail replaces Message-IDs in this mailbox, so a miss proves nothing"), search)
		p.count(written, &p.res.Checked)
		return true, err
	}
	return p.missThen(ctx, b, j, search, p.retry)
}

// decideVerify records the verify search of a sent job and acts on it.
func (p *pass) decideVerify(ctx context.Context, b *boxPass, j gmailrelay.Job, q string, hits []hit) (bool, error) {
	ch := p.channel(j.Channel)
	check := j.Checks + 1
	search := searchLine(j, q, hits, check)
	looks := 2 // verify searches before giving up on a miss
	switch {
	case len(hits) == 1:
		search.Reason = ReasonVerified
		if j.VerifyLooks > 0 {
			// The late look: one copy still, so Gmail stored the send once.
			written, err := p.mutate(ctx, j, func(n *gmailrelay.Job) []gmailrelay.Line {
				p.oneCopy(n, ch)
				return []gmailrelay.Line{search}
			})
			p.count(written, &p.res.Checked)
			return true, err
		}
		lag, err := p.lagSample(ctx, j)
		if err != nil {
			return false, err
		}
		written, err := p.mutateWith(ctx, j, func(n *gmailrelay.Job) []gmailrelay.Line {
			p.oneCopy(n, ch)
			return []gmailrelay.Line{search}
		}, lag.edit())
		if written {
			p.keepLag(j.Mailbox, lag)
		}
		p.count(written, &p.res.Checked, &p.res.Verified)
		return true, err
	case len(hits) >= 2:
		written, err := p.toReview(ctx, j, evidence(search, ReasonDuplicate, hits,
			"sent, but the mailbox holds this message more than once"), search)
		p.count(written, &p.res.Checked, &p.res.Duplicates)
		return true, err
	case j.GmailID != "":
		// A suspect handle: one messages.get decides rewritten, deleted or
		// index behind.
		done, settled, err := p.checkHandle(ctx, b, j, search)
		if err != nil || settled || !done {
			return done, err
		}
		// Gmail holds the message under our Message-ID and its index does
		// not show it yet: keep looking, up to the late look's graces, so
		// that a send Gmail stored twice is seen once the index catches
		// up (two looks were shorter than a lag tail).
		looks = lateLookGraces
	}
	switch {
	case check < looks:
		// The index is behind: look once more.
		search.Reason = ReasonVerifyMiss
		written, err := p.mutate(ctx, j, func(n *gmailrelay.Job) []gmailrelay.Line {
			n.Checks, n.NextCheckAt = check, p.now.Add(ch.Grace)
			return []gmailrelay.Line{search}
		})
		p.count(written, &p.res.Checked, &p.res.Missed)
		return true, err
	}
	search.Reason = ReasonVerifyGaveUp
	search.Note = "still not found by Message-ID; Gmail's answer said sent, so the job stays sent"
	written, err := p.mutate(ctx, j, func(n *gmailrelay.Job) []gmailrelay.Line {
		n.Checks, n.NextCheckAt = check, time.Time{}
		return []gmailrelay.Line{search}
	})
	p.count(written, &p.res.Checked)
	return true, err
}

// count adds one to each counter when a decision was written.
func (p *pass) count(written bool, counters ...*int) {
	if !written {
		return
	}
	for _, c := range counters {
		*c++
	}
}

func searchLine(j gmailrelay.Job, q string, hits []hit, check int) gmailrelay.Line {
	sent := 0
	for _, h := range hits {
		for _, l := range h.labels {
			if strings.EqualFold(l, sentLabel) {
				sent++
				break
			}
		}
	}
	return gmailrelay.Line{Kind: gmailrelay.KindSearch, Attempt: j.Attempts, Query: q, Hits: len(hits), SentHits: sent, Check: check}
}

// evidence is a review line carrying the search that led to it.
func evidence(search gmailrelay.Line, reason gmailrelay.Reason, hits []hit, note string) gmailrelay.Line {
	l := gmailrelay.Line{Kind: gmailrelay.KindReview, Attempt: search.Attempt, Reason: reason,
		Query: search.Query, Hits: search.Hits, SentHits: search.SentHits, Check: search.Check, Note: note}
	if len(hits) > 0 {
		l.GmailID = hits[0].id
		ids := make([]string, len(hits))
		for i, h := range hits {
			ids[i] = h.id
		}
		sort.Strings(ids)
		l.Note += "; gmail ids: " + strings.Join(ids, ", ")
	}
	return l
}

// toReview moves the job to review, writing the lines before (the search
// that led there) and the review line in one transaction.
func (p *pass) toReview(ctx context.Context, j gmailrelay.Job, review gmailrelay.Line, before ...gmailrelay.Line) (bool, error) {
	written, err := p.mutate(ctx, j, func(n *gmailrelay.Job) []gmailrelay.Line {
		n.NextCheckAt = time.Time{}
		return append(append([]gmailrelay.Line(nil), before...), gmailrelay.Move(n, gmailrelay.StateReview, review))
	})
	if written {
		p.res.Reviewed++
		p.s.deps.Logger.Warn().Str("message_id", j.MessageID).Str("reason", string(review.Reason)).Msg("job handed to a human for review")
	}
	return written, err
}

// mutate applies edit to the job as read at the start of the pass, in one
// transaction with the lines edit returns, and says whether it wrote. When
// the job moved on since (another state, attempt, check count or
// verification), nothing is written and the error is nil: whoever moved it
// decided.
func (p *pass) mutate(ctx context.Context, read gmailrelay.Job, edit func(n *gmailrelay.Job) []gmailrelay.Line) (written bool, err error) {
	return p.mutateWith(ctx, read, edit, nil)
}

// mutateWith is mutate that also edits the job's mailbox record in the same
// transaction (mailbox nil: none).
func (p *pass) mutateWith(ctx context.Context, read gmailrelay.Job, edit func(n *gmailrelay.Job) []gmailrelay.Line,
	mailbox func(m *gmailrelay.Mailbox)) (written bool, err error) {
	_, _, err = p.s.log.Mutate(ctx, read.MessageID, func(cur *gmailrelay.Job) (gmailrelay.Change, error) {
		if cur == nil || cur.State != read.State || cur.Attempts != read.Attempts ||
			cur.Checks != read.Checks || cur.Verified != read.Verified || cur.VerifyLooks != read.VerifyLooks {
			return gmailrelay.Change{}, errChanged
		}
		n := *cur
		lines := edit(&n)
		n.UpdatedAt = p.now
		return gmailrelay.Change{Job: &n, Lines: lines, EditMailbox: mailbox}, nil
	})
	if errors.Is(err, errChanged) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("record sweep of %s: %w", read.MessageID, err)
	}
	return true, nil
}

// beforeLagP99 reports whether the job's attempt ended less than the
// mailbox's observed p99 index lag ago: no miss counts before that.
func (p *pass) beforeLagP99(j gmailrelay.Job) bool {
	if p.s.deps.DisableWitness {
		return false
	}
	p99, n := p.s.lags.quantile(j.Mailbox, 0.99)
	return n > 0 && p.now.Sub(attemptEnd(j)) < p99
}

// lateLookGraces is how many graces after a verify search that found one
// copy the late look comes (see lateLook).
const lateLookGraces = 10

// lateLook is how long after a search that found exactly one copy of a
// sent job's message the sweeper looks once more: Gmail may have stored
// the send twice (or the relay sent it twice) with the second copy indexed
// later than the first. Ten graces, but never more than max_unwitnessed
// (past which the relay trusts no index anyway). Not the measured lag:
// its samples are upper bounds set by the verify schedule (a look delayed
// by a backlog counts as lag), and one long one would push every late look
// to max_unwitnessed.
func lateLook(ch policy.Channel) time.Duration {
	return min(lateLookGraces*ch.Grace, ch.Unwitnessed())
}

// oneCopy records, on n, a search that found exactly one copy of the
// job's message: the first such search schedules the late look (see
// lateLook), the late look makes the job Verified, for good.
func (p *pass) oneCopy(n *gmailrelay.Job, ch policy.Channel) {
	n.Checks = 0
	n.VerifyLooks++
	if n.VerifyLooks >= 2 {
		n.Verified, n.NextCheckAt = true, time.Time{}
		return
	}
	n.Verified, n.NextCheckAt = false, p.now.Add(lateLook(ch))
}
