package sweeper

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/relay"
)

// ReasonHandleRewritten and ReasonHandleDeleted are the reasons of the
// handle lines the verify pass writes (see checkHandle).
const (
	ReasonHandleRewritten = gmailrelay.ReasonHandleRewritten
	ReasonHandleDeleted   = gmailrelay.ReasonHandleDeleted
)

// checkHandle is the verify pass's handle check (CONTRACT, "Every send's
// handle is checked, for free"): a sent job whose search found nothing but
// whose gmail_id Gmail gave is read back with one messages.get. The stored
// Message-ID differs → a handle line "rewritten", the mailbox is untrusted
// and an ALARM is logged; 404 → a handle line "deleted" (unverifiable, not
// a rewrite); equal → the index is behind, and the caller checks again.
//
// done is false when the pass had to stop first (quota, rate limit);
// settled is true when the job's verification ended here (rewritten or
// deleted), with the search line and the handle line written together.
func (p *pass) checkHandle(ctx context.Context, b *boxPass, j gmailrelay.Job, search gmailrelay.Line) (done, settled bool, err error) {
	if !b.take(relay.UnitsGet, 0) {
		return false, false, nil
	}
	prov, user := b.gmail()
	h, gerr := prov.GetHeader(ctx, user, j.GmailID)
	var handle gmailrelay.Line
	switch {
	case errors.Is(gerr, relay.ErrMessageNotFound):
		b.answered = true
		handle = gmailrelay.Line{Kind: gmailrelay.KindHandle, Attempt: j.Attempts, Reason: ReasonHandleDeleted, GmailID: j.GmailID,
			Note: "the message Gmail answered with is gone (404): the send cannot be verified; this is not a rewrite"}
	case gerr != nil:
		if errors.Is(p.gmailErr(b, gerr), errStopped) {
			return false, false, nil
		}
		p.res.Errors++
		p.s.deps.Logger.Warn().Err(gerr).Msg("read a sent message's Message-ID back; checked again on the next verify")
		return true, false, nil
	case h.MessageID == j.MessageID:
		b.answered = true
		return true, false, nil // the index is behind
	default:
		b.answered = true
		kept := false
		handle = gmailrelay.Line{Kind: gmailrelay.KindHandle, Attempt: j.Attempts, Reason: ReasonHandleRewritten, GmailID: j.GmailID,
			StoredMessageID: h.MessageID, HandleKept: &kept}
	}
	search.Reason = ReasonVerifyGaveUp
	search.Note = "not found by Message-ID; the message Gmail answered with was read back (see the handle line)"
	rewritten := handle.Reason == ReasonHandleRewritten
	var dup *gmailrelay.Line
	if rewritten {
		var done bool
		if dup, done = p.rewrittenCopies(ctx, b, j, h.MessageID, handle); !done {
			return false, false, nil
		}
	}
	_, _, err = p.s.log.Mutate(ctx, j.MessageID, func(cur *gmailrelay.Job) (gmailrelay.Change, error) {
		if cur == nil || cur.State != j.State || cur.Attempts != j.Attempts || cur.Checks != j.Checks || cur.Verified != j.Verified || cur.VerifyLooks != j.VerifyLooks {
			return gmailrelay.Change{}, errChanged
		}
		n := *cur
		n.Checks, n.NextCheckAt, n.UpdatedAt = j.Checks+1, time.Time{}, p.now
		c := gmailrelay.Change{Job: &n, Lines: []gmailrelay.Line{search, handle}}
		switch {
		case dup != nil:
			c.Lines = append(c.Lines, gmailrelay.Move(&n, gmailrelay.StateReview, *dup))
		case rewritten && j.VerifyLooks == 0:
			// One copy under Gmail's id so far: like a verify search that
			// saw one, look once more later (see lateLook) for a second
			// copy Gmail indexed late.
			n.VerifyLooks = 1
			n.NextCheckAt = p.now.Add(lateLook(p.channel(j.Channel)))
		}
		c.EditMailbox = func(mb *gmailrelay.Mailbox) {
			if rewritten && j.VerifyLooks == 0 { // the late look counts no second rewrite
				mb.HandleChecked, mb.HandleUntrusted = true, true
				mb.Rewrites++
			}
			if mb.LastSendID == j.MessageID {
				// Never found by its Message-ID again: no witness.
				mb.LastSendID, mb.LastSendAt = "", time.Time{}
			}
		}
		return c, nil
	})
	if errors.Is(err, errChanged) {
		return true, true, nil
	}
	if err != nil {
		return true, true, err
	}
	p.res.Checked++
	if dup != nil {
		p.res.Duplicates++
		p.res.Reviewed++
		p.s.deps.Logger.Warn().Str("message_id", j.MessageID).Str("reason", string(dup.Reason)).Msg("job handed to a human for review")
	}
	// Its Message-ID will never be found again: it can witness nothing.
	p.s.sends[j.Mailbox] = slices.DeleteFunc(p.s.sends[j.Mailbox], func(r sendRef) bool { return r.id == j.MessageID })
	if mb, ok := p.mailboxes[j.Mailbox]; ok && mb.LastSendID == j.MessageID {
		mb.LastSendID, mb.LastSendAt = "", time.Time{}
		p.mailboxes[j.Mailbox] = mb
	}
	if rewritten {
		mb := p.mailboxes[j.Mailbox]
		mb.Name, mb.HandleChecked, mb.HandleUntrusted = j.Mailbox, true, true
		p.mailboxes[j.Mailbox] = mb
		if j.VerifyLooks > 0 {
			return true, true, nil // the late look: alarmed already
		}
		p.s.deps.Logger.Error().Str("message_id", j.MessageID).Str("stored_message_id", h.MessageID).Str("mailbox", j.Mailbox).
			Msg("ALARM: Gmail replaced our Message-ID (found by the verify pass); ambiguous jobs of this mailbox now go to review (a search miss proves nothing)")
	} else {
		p.s.deps.Logger.Warn().Str("message_id", j.MessageID).Str("gmail_id", j.GmailID).
			Msg("a sent message is gone from the mailbox (404): its send cannot be verified")
	}
	return true, true, nil
}

// rewrittenCopies searches the Message-ID Gmail gave a job's message
// instead of the relay's (stored, read back by the handle check): the
// search by the relay's id can never show that Gmail stored the send
// twice. Two or more copies return the review line to write with the
// handle line; fewer (or an id that cannot be searched safely) return nil.
// done is false when the pass had to stop first (quota, rate limit); a
// failed search is counted and settles nothing more than before.
func (p *pass) rewrittenCopies(ctx context.Context, b *boxPass, j gmailrelay.Job, stored string, handle gmailrelay.Line) (dup *gmailrelay.Line, done bool) {
	q, err := searchQuery([]string{stored})
	if err != nil {
		return nil, true
	}
	if !b.take(relay.UnitsList, 0) {
		return nil, false
	}
	prov, user := b.gmail()
	page, err := prov.List(ctx, user, q, []string{sentLabel}, "", maxPageSize)
	if err != nil {
		if errors.Is(p.gmailErr(b, err), errStopped) {
			return nil, false
		}
		p.res.Errors++
		p.s.deps.Logger.Warn().Err(err).Msg("search the Message-ID Gmail gave; the job stays sent")
		return nil, true
	}
	b.answered = true
	if len(page.IDs) < 2 {
		return nil, true
	}
	hits := make([]hit, len(page.IDs))
	for i, id := range page.IDs {
		hits[i] = hit{id: id, labels: []string{sentLabel}}
	}
	search := gmailrelay.Line{Kind: gmailrelay.KindSearch, Attempt: j.Attempts, Query: q, Hits: len(hits), SentHits: len(hits), Check: j.Checks + 1}
	l := evidence(search, ReasonDuplicate, hits, "sent, and the mailbox holds it more than once under the Message-ID Gmail gave it ("+handle.StoredMessageID+")")
	return &l, true
}

// ReasonDuplicateDelivery is the review reason for a job with two own
// effect lines.
const ReasonDuplicateDelivery = gmailrelay.ReasonDuplicateDelivery

// deliveredTwice reports whether a job whose Effects counter says it took
// effect twice was delivered twice by the relay (CONTRACT, "Own effects
// count"): two of its effect lines are the relay's own (Gmail's responses,
// or a response and a search hit; a human's mark-sent does not count), and
// it was not already reviewed for it (then the human decided).
func (p *pass) deliveredTwice(ctx context.Context, j gmailrelay.Job) (bool, error) {
	own, err := p.ownEffects(ctx, j)
	return len(own) >= 2, err
}

// ownEffects describes the job's own effect lines since its last
// duplicate_delivery review.
func (p *pass) ownEffects(ctx context.Context, j gmailrelay.Job) ([]string, error) {
	lines, err := p.s.log.JobLines(ctx, j.MessageID)
	if err != nil {
		return nil, fmt.Errorf("read lines of %s: %w", j.MessageID, err)
	}
	var own []string
	for _, l := range lines {
		switch {
		case l.Kind == gmailrelay.KindReview && l.Reason == ReasonDuplicateDelivery:
			own = nil
		case l.Kind == gmailrelay.KindEffect && l.Source != gmailrelay.SourceHuman:
			own = append(own, fmt.Sprintf("attempt %d (%s, gmail id %s)", l.Attempt, l.Source, l.GmailID))
		}
	}
	return own, nil
}

// duplicateDelivery hands a job the relay delivered twice to a human with
// reason duplicate_delivery, even when the mailbox shows one copy (Gmail
// folds a resend with the same Message-ID into the stored one).
func (p *pass) duplicateDelivery(ctx context.Context, j gmailrelay.Job) (bool, error) {
	own, err := p.ownEffects(ctx, j)
	if err != nil {
		return false, err
	}
	line := gmailrelay.Line{Kind: gmailrelay.KindReview, Attempt: j.Attempts, Reason: ReasonDuplicateDelivery,
		GmailID: j.GmailID, Note: fmt.Sprintf("delivered %d times by the relay's own attempts: %s", len(own), strings.Join(own, "; "))}
	if _, err := p.toReview(ctx, j, line); err != nil {
		return true, err
	}
	p.res.Duplicates++
	p.s.deps.Logger.Error().Str("message_id", j.MessageID).Int("deliveries", len(own)).
		Msg("ALARM: the relay delivered a message twice (two own effects); handed to a human")
	return true, nil
}
