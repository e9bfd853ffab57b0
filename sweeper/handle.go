package sweeper

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/relay"
)

// ReasonHandleRewritten and ReasonHandleDeleted are the reasons of the
// handle lines the verify pass writes (see readHandle, decideHandle).
const (
	ReasonHandleRewritten = gmailrelay.ReasonHandleRewritten
	ReasonHandleDeleted   = gmailrelay.ReasonHandleDeleted
)

// handleKind is what the handle check found of a sent job's gmail_id.
type handleKind int

const (
	handleUnread    handleKind = iota // not read, or Gmail failed to answer
	handleSame                        // the job's Message-ID: the index is behind
	handleGone                        // 404: the message is gone
	handleRewritten                   // another Message-ID: Gmail replaced it
)

// handleAnswer is what the handle check read back.
type handleAnswer struct {
	kind handleKind
	// stored is the Message-ID Gmail stored the message under
	// (handleRewritten).
	stored string
	// copiesQuery is the search by the stored Message-ID, copies its hits
	// when there were two or more (Gmail stored the send twice).
	copiesQuery string
	copies      []hit
}

// readHandle is the verify pass's handle check
// (docs/design.md#the-handle-check): a sent job whose search found nothing but
// whose gmail_id Gmail gave is read back with one messages.get. A stored
// Message-ID that differs is searched too (see rewrittenCopies). What it
// found is for decideVerify to decide (see decideHandle).
//
// done is false when the pass had to stop first (quota, rate limit). A
// failed read is counted and logged, and answers handleUnread.
func (p *pass) readHandle(ctx context.Context, b *boxPass, j gmailrelay.Job) (a handleAnswer, done bool) {
	if !b.take(relay.UnitsGet, 0) {
		return handleAnswer{}, false
	}
	prov, user := b.gmail()
	h, err := prov.GetHeader(ctx, user, j.GmailID)
	switch {
	case errors.Is(err, relay.ErrMessageNotFound):
		b.answered = true
		return handleAnswer{kind: handleGone}, true
	case err != nil:
		if errors.Is(p.gmailErr(b, err), errStopped) {
			return handleAnswer{}, false
		}
		p.res.Errors++
		p.s.deps.Logger.Warn().Err(err).Msg("read a sent message's Message-ID back; checked again on the next verify")
		return handleAnswer{}, true
	case h.MessageID == j.MessageID:
		b.answered = true
		return handleAnswer{kind: handleSame}, true
	}
	b.answered = true
	a = handleAnswer{kind: handleRewritten, stored: h.MessageID}
	if a.copiesQuery, a.copies, done = p.rewrittenCopies(ctx, b, h.MessageID); !done {
		return handleAnswer{}, false
	}
	return a, true
}

// rewrittenCopies searches the Message-ID Gmail gave a job's message
// instead of the relay's (stored, read back by the handle check): the
// search by the relay's id can never show that Gmail stored the send
// twice. It returns the query and its hits when there are two or more
// copies; fewer (or an id that cannot be searched safely) return none.
// done is false when the pass had to stop first (quota, rate limit); a
// failed search is counted and settles nothing more than before.
func (p *pass) rewrittenCopies(ctx context.Context, b *boxPass, stored string) (q string, copies []hit, done bool) {
	q, err := searchQuery([]string{stored})
	if err != nil {
		return "", nil, true
	}
	if !b.take(relay.UnitsList, 0) {
		return "", nil, false
	}
	prov, user := b.gmail()
	page, err := prov.List(ctx, user, q, []string{sentLabel}, "", maxPageSize)
	if err != nil {
		if errors.Is(p.gmailErr(b, err), errStopped) {
			return "", nil, false
		}
		p.res.Errors++
		p.s.deps.Logger.Warn().Err(err).Msg("search the Message-ID Gmail gave; the job stays sent")
		return "", nil, true
	}
	b.answered = true
	if len(page.IDs) < 2 {
		return "", nil, true
	}
	copies = make([]hit, len(page.IDs))
	for i, id := range page.IDs {
		copies[i] = hit{id: id, labels: []string{sentLabel}}
	}
	return q, copies, true
}

// ReasonDuplicateDelivery is the review reason for a job with two own
// effect lines.
const ReasonDuplicateDelivery = gmailrelay.ReasonDuplicateDelivery

// deliveredTwice reports whether a job whose Effects counter says it took
// effect twice was delivered twice by the relay
// (docs/design.md#own-effects-count): two of its effect lines are the relay's own (Gmail's responses,
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
	d := review(j, gmailrelay.Line{Kind: gmailrelay.KindReview, Attempt: j.Attempts, Reason: ReasonDuplicateDelivery,
		GmailID: j.GmailID, Note: fmt.Sprintf("delivered %d times by the relay's own attempts: %s", len(own), strings.Join(own, "; "))})
	d.say = alarm("ALARM: the relay delivered a message twice (two own effects); handed to a human", "deliveries", strconv.Itoa(len(own)))
	_, err = p.apply(ctx, j, d.counting(tDuplicates))
	return true, err
}
