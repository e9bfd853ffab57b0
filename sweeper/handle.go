package sweeper

import (
	"context"
	"errors"
	"time"

	"github.com/gmailrelay/gmailrelay/acceptlog"
	"github.com/gmailrelay/gmailrelay/relay"
)

// ReasonHandleRewritten and ReasonHandleDeleted are the reasons of the
// handle lines the verify pass writes (see checkHandle).
const (
	ReasonHandleRewritten = acceptlog.ReasonHandleRewritten
	ReasonHandleDeleted   = acceptlog.ReasonHandleDeleted
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
func (p *pass) checkHandle(ctx context.Context, j acceptlog.Job, search acceptlog.Line) (done, settled bool, err error) {
	if !p.take(relay.UnitsGet, 0) {
		return false, false, nil
	}
	h, gerr := p.s.deps.Provider.GetHeader(ctx, j.Mailbox, j.GmailID)
	var handle acceptlog.Line
	switch {
	case errors.Is(gerr, relay.ErrMessageNotFound):
		p.answered = true
		handle = acceptlog.Line{Kind: acceptlog.KindHandle, Attempt: j.Attempts, Reason: ReasonHandleDeleted, GmailID: j.GmailID,
			Note: "the message Gmail answered with is gone (404): the send cannot be verified; this is not a rewrite"}
	case gerr != nil:
		if errors.Is(p.gmailErr(gerr), errStopped) {
			return false, false, nil
		}
		p.res.Errors++
		p.s.deps.Logger.Warn().Err(gerr).Msg("read a sent message's Message-ID back; checked again on the next verify")
		return true, false, nil
	case h.MessageID == j.MessageID:
		p.answered = true
		return true, false, nil // the index is behind
	default:
		p.answered = true
		kept := false
		handle = acceptlog.Line{Kind: acceptlog.KindHandle, Attempt: j.Attempts, Reason: ReasonHandleRewritten, GmailID: j.GmailID,
			StoredMessageID: h.MessageID, HandleKept: &kept}
	}
	search.Reason = ReasonVerifyGaveUp
	search.Note = "not found by Message-ID; the message Gmail answered with was read back (see the handle line)"
	rewritten := handle.Reason == ReasonHandleRewritten
	_, _, err = p.s.log.Mutate(ctx, j.MessageID, func(cur *acceptlog.Job) (acceptlog.Change, error) {
		if cur == nil || cur.State != j.State || cur.Attempts != j.Attempts || cur.Checks != j.Checks || cur.Verified != j.Verified {
			return acceptlog.Change{}, errChanged
		}
		n := *cur
		n.Checks, n.NextCheckAt, n.UpdatedAt = j.Checks+1, time.Time{}, p.now
		c := acceptlog.Change{Job: &n, Lines: []acceptlog.Line{search, handle}}
		if rewritten {
			c.EditMailbox = func(mb *acceptlog.Mailbox) {
				mb.HandleChecked, mb.HandleUntrusted = true, true
				mb.Rewrites++
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
	if rewritten {
		mb := p.mailboxes[j.Mailbox]
		mb.Name, mb.HandleChecked, mb.HandleUntrusted = j.Mailbox, true, true
		p.mailboxes[j.Mailbox] = mb
		p.s.deps.Logger.Error().Str("message_id", j.MessageID).Str("stored_message_id", h.MessageID).Str("mailbox", j.Mailbox).
			Msg("ALARM: Gmail replaced our Message-ID (found by the verify pass); ambiguous jobs of this mailbox now go to review (a search miss proves nothing)")
	} else {
		p.s.deps.Logger.Warn().Str("message_id", j.MessageID).Str("gmail_id", j.GmailID).
			Msg("a sent message is gone from the mailbox (404): its send cannot be verified")
	}
	return true, true, nil
}
