package sweeper

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/policy"
)

// The decide functions of this file are pure: each computes a decision (see
// decision, apply.go) from a look — the job as the pass read it, its
// channel's rules, the pass's clock and the evidence the pass gathered — and
// does no I/O. pass.judge gathers the evidence and pass.apply writes the
// decision.

// look is what a decision about one searched job is made from.
type look struct {
	job gmailrelay.Job // as the pass read it
	ch  policy.Channel // the job's channel's rules
	now time.Time      // the pass's clock
	// query is the search that was made, hits what it found of the job's
	// message.
	query string
	hits  []hit
	// witness is the witness of a miss of an unknown job (see witnesses).
	witness string
	// untrusted: Gmail replaces Message-IDs in the job's mailbox, so a
	// miss by Message-ID proves nothing.
	untrusted bool
	// used is how many of the job's attempts count against the channel's
	// MaxAttempts (see attemptsUsed).
	used int
	// hold is how much longer a miss does not count because the wall clock
	// stepped forward after the attempt (see stepHold).
	hold time.Duration
	// since is how long ago, in real time, the attempt ended (see
	// sinceAttempt).
	since time.Duration
	// lagUntil is when the attempt is as old as the mailbox's observed p99
	// index lag: no miss counts before (zero: no floor).
	lagUntil time.Time
	// lag is the lag sample of a verify search's first hit (see
	// lagSample); nil: none.
	lag *lagEdit
	// handle is what the handle check read back (see readHandle).
	handle handleAnswer
}

// decideUnknown decides an unknown job after its search.
func decideUnknown(l look) decision {
	j, ch := l.job, l.ch
	check := j.Checks + 1
	search := searchLine(j, l.query, l.hits, check)
	miss := len(l.hits) == 0
	if miss {
		search.Witness = l.witness
	}
	switch {
	case miss && l.untrusted:
		// Gmail rewrites ids in the mailbox (this pass may have just found
		// it): the miss proves nothing.
		return review(j, evidence(search, ReasonHandleUntrusted, nil,
			"not found, but Gmail replaces Message-IDs in this mailbox, so a miss proves nothing"), search).counting(tChecked)
	case miss && l.hold > 0:
		// The wall clock stepped forward after the attempt, which may be
		// younger than it looks: the miss does not count until real time
		// has caught up (see stepHold); look again then.
		search.Note = fmt.Sprintf("the relay's clock stepped forward since the attempt: no miss counts for %s more", l.hold.Round(time.Second))
		return recheck(j, l.now.Add(l.hold), search).counting(tChecked | tUnwitnessed)
	case miss && l.witness == WitnessMissing && l.since >= ch.Unwitnessed():
		d := review(j, evidence(search, ReasonIndexUnverifiable, nil,
			fmt.Sprintf("no witness that the mailbox's index caught up for %s after the attempt (max_unwitnessed %s): a miss proves nothing",
				l.since.Round(time.Second), ch.Unwitnessed())), search)
		d.say = alarm("ALARM: the mailbox's search shows no witness for max_unwitnessed; the ambiguous job is handed to a human", "mailbox", j.Mailbox)
		return d.counting(tChecked | tUnwitnessed)
	case miss && l.now.Before(l.lagUntil):
		// Younger than the mailbox's observed p99 lag: the miss does not
		// count yet; look again when it is that old.
		return recheck(j, l.lagUntil, search).counting(tChecked | tUnwitnessed)
	case miss && l.witness == WitnessMissing:
		// No witness: the index is behind, or Gmail could not match the
		// query. The miss does not count; look again after grace.
		return recheck(j, l.now.Add(ch.Grace), search).counting(tChecked | tUnwitnessed)
	case len(l.hits) == 1 && ch.OnUnknown == policy.Retry:
		return foundOnce(l, search)
	case len(l.hits) == 1:
		// Gmail accepted the send (its effect line, from the search), but
		// this channel leaves the decision to a human: a retry they ask
		// for then makes a second effect, a duplicate_delivery.
		d := review(j, evidence(search, ReasonReviewChannel, l.hits,
			"found once in the mailbox; this channel never resolves ambiguous sends by itself"), search)
		d.found = &l.hits[0]
		return d.counting(tChecked | tFound)
	case len(l.hits) >= 2:
		return review(j, evidence(search, ReasonDuplicate, l.hits, "the mailbox holds this message more than once"), search).
			counting(tChecked | tDuplicates)
	case check < ch.Checks:
		d := recheck(j, l.now.Add(ch.Grace), search)
		d.checks = check
		return d.counting(tChecked | tMissed)
	case ch.OnUnknown != policy.Retry:
		return review(j, evidence(search, ReasonMissingAfterChecks, nil,
			fmt.Sprintf("not in the mailbox after %d checks", check)), search).counting(tChecked)
	case l.used >= ch.MaxAttempts:
		return review(j, evidence(search, ReasonMaxAttempts, nil,
			fmt.Sprintf("not in the mailbox after %d checks and %d attempts; the channel allows %d", check, l.used, ch.MaxAttempts)), search).
			counting(tChecked)
	}
	return missThen(j, search, followResend)
}

// decideFailed decides a retryable failed job with an ambiguous attempt in
// its past, searched because the miss that decided its resend is no longer
// fresh (see classify): one copy means the ambiguous attempt was delivered
// after all (failed → sent), two or more go to review, and a miss confirms
// the resend decision: the job is retried (or goes to review when it has no
// attempt left, see retry). The miss needs no witness: it repeats a miss
// that counted, later, when the index can only have caught up further. In a
// mailbox whose handle is untrusted a miss proves nothing: review.
func decideFailed(l look) decision {
	j := l.job
	search := searchLine(j, l.query, l.hits, j.Checks+1)
	switch {
	case len(l.hits) == 1:
		return foundOnce(l, search)
	case len(l.hits) >= 2:
		return review(j, evidence(search, ReasonDuplicate, l.hits, "the mailbox holds this message more than once"), search).
			counting(tChecked | tDuplicates)
	case l.untrusted:
		return review(j, evidence(search, ReasonHandleUntrusted, nil,
			"not found, but Gmail replaces Message-IDs in this mailbox, so a miss proves nothing"), search).counting(tChecked)
	}
	return missThen(j, search, followRetry)
}

// decideVerify decides a sent job after its verify search (and, for a miss
// of a job whose gmail_id Gmail gave, the handle check).
func decideVerify(l look) decision {
	j, ch := l.job, l.ch
	check := j.Checks + 1
	search := searchLine(j, l.query, l.hits, check)
	looks := 2 // verify searches before giving up on a miss
	switch {
	case len(l.hits) == 1:
		search.Reason = ReasonVerified
		d := keep(j)
		d.lines = []gmailrelay.Line{search}
		d.oneCopy(j, ch, l.now)
		if j.VerifyLooks > 0 {
			// The late look: one copy still, so Gmail stored the send once.
			return d.counting(tChecked)
		}
		d.mailbox.lag = l.lag
		return d.counting(tChecked | tVerified)
	case len(l.hits) >= 2:
		return review(j, evidence(search, ReasonDuplicate, l.hits,
			"sent, but the mailbox holds this message more than once"), search).counting(tChecked | tDuplicates)
	case j.GmailID != "":
		if l.handle.kind == handleGone || l.handle.kind == handleRewritten {
			return decideHandle(l, search)
		}
		// Gmail holds the message under our Message-ID and its index does
		// not show it yet (or the handle could not be read this time): keep
		// looking, up to the late look's graces, so that a send Gmail
		// stored twice is seen once the index catches up (two looks were
		// shorter than a lag tail).
		looks = lateLookGraces
	}
	if check < looks {
		// The index is behind: look once more.
		search.Reason = ReasonVerifyMiss
		d := recheck(j, l.now.Add(ch.Grace), search)
		d.checks = check
		return d.counting(tChecked | tMissed)
	}
	search.Reason = ReasonVerifyGaveUp
	search.Note = "still not found by Message-ID; Gmail's answer said sent, so the job stays sent"
	d := recheck(j, time.Time{}, search)
	d.checks = check
	return d.counting(tChecked)
}

// decideHandle decides a sent job whose verify search missed and whose
// gmail_id the handle check read back as gone (404: unverifiable, not a
// rewrite) or under another Message-ID (Gmail replaced it: the mailbox is
// untrusted, alarm). Either way the job's verification ends with the search
// and the handle line written together, and its Message-ID witnesses
// nothing any more. A rewritten job whose message Gmail stored twice under
// its id goes to review; one stored once gets the late look, like a verify
// search that saw one copy (see lateLook).
func decideHandle(l look, search gmailrelay.Line) decision {
	j, a := l.job, l.handle
	search.Reason = ReasonVerifyGaveUp
	search.Note = "not found by Message-ID; the message Gmail answered with was read back (see the handle line)"
	d := recheck(j, time.Time{})
	d.checks = j.Checks + 1
	d.mailbox.forget = true
	handle := gmailrelay.Line{Kind: gmailrelay.KindHandle, Attempt: j.Attempts, GmailID: j.GmailID}
	if a.kind == handleGone {
		handle.Reason = ReasonHandleDeleted
		handle.Note = "the message Gmail answered with is gone (404): the send cannot be verified; this is not a rewrite"
		d.say = logLine{level: zerolog.WarnLevel, msg: "a sent message is gone from the mailbox (404): its send cannot be verified",
			attrs: []string{"gmail_id", j.GmailID}}
	} else {
		kept := false
		handle.Reason, handle.StoredMessageID, handle.HandleKept = ReasonHandleRewritten, a.stored, &kept
		d.mailbox.untrusted = true
		if j.VerifyLooks == 0 { // the late look counts no second rewrite, and has alarmed already
			d.mailbox.rewrites = 1
			d.say = alarm("ALARM: Gmail replaced our Message-ID (found by the verify pass); ambiguous jobs of this mailbox now go to review (a search miss proves nothing)",
				"stored_message_id", a.stored, "mailbox", j.Mailbox)
		}
	}
	d.lines = []gmailrelay.Line{search, handle}
	switch {
	case len(a.copies) >= 2:
		copies := gmailrelay.Line{Kind: gmailrelay.KindSearch, Attempt: j.Attempts, Query: a.copiesQuery,
			Hits: len(a.copies), SentHits: len(a.copies), Check: j.Checks + 1}
		d.to, d.why = gmailrelay.StateReview, evidence(copies, ReasonDuplicate, a.copies,
			"sent, and the mailbox holds it more than once under the Message-ID Gmail gave it ("+a.stored+")")
		return d.counting(tChecked | tDuplicates)
	case a.kind == handleRewritten && j.VerifyLooks == 0:
		// One copy under Gmail's id so far: like a verify search that saw
		// one, look once more later (see lateLook) for a second copy Gmail
		// indexed late.
		d.looks, d.next = 1, l.now.Add(lateLook(l.ch))
	}
	return d.counting(tChecked)
}

// foundOnce decides an ambiguous job on a retry channel whose search found
// exactly one copy of its message: the ambiguous attempt was delivered, and
// the job is sent (effect line, source search) with its late look scheduled
// — unless the job's effects say another copy was delivered before (see
// settleFound).
func foundOnce(l look, search gmailrelay.Line) decision {
	d := keep(l.job)
	d.lines, d.found, d.to = []gmailrelay.Line{search}, &l.hits[0], gmailrelay.StateSent
	d.oneCopy(l.job, l.ch, l.now) // this search, after grace, already counted exactly one
	d.say = logLine{level: zerolog.InfoLevel, msg: "ambiguous send found in the mailbox: sent", attrs: []string{"gmail_id", l.hits[0].id}}
	return d.counting(tChecked | tFound)
}

// missThen is the decision to record a miss search (its check becomes the
// job's Checks) and then make the attempt decided on it (resend or retry),
// with the search's cost to redo. The miss is written first: if the attempt
// cannot go now, the job stays due with its checks done, and a later pass
// makes it without searching while the miss is fresh (see missFresh), after
// a new search otherwise.
func missThen(j gmailrelay.Job, search gmailrelay.Line, then follow) decision {
	d := keep(j)
	d.lines, d.checks, d.then = []gmailrelay.Line{search}, search.Check, then
	return d.counting(tChecked)
}

// settleFound completes a decision that found one copy of the job's
// message (d.found) against n, the job as the write reads it: its effect
// line (see foundEffect) and, on a move to sent, what the job's effects say.
// A copy an effect line counts already is still one delivery (a state
// line); a copy besides the one an effect line counts means the relay
// delivered the message twice: review (duplicate_delivery) instead of sent.
// On a move to review (a review channel) the effect line, if any, is
// written before the review. n is edited (its Gmail id, labels, effects).
func settleFound(d decision, n *gmailrelay.Job) decision {
	if d.found == nil {
		return d
	}
	h := *d.found
	found, effect := foundEffect(n, h)
	switch {
	case d.to != gmailrelay.StateSent:
		if effect {
			d.lines = append(slices.Clip(d.lines), found)
		}
	case !effect:
		found.Kind = gmailrelay.KindState // the copy counted before: still one delivery
		d.why = found
	case n.Effects > 1:
		d.lines = append(slices.Clip(d.lines), found)
		d.to, d.why = gmailrelay.StateReview, gmailrelay.Line{Kind: gmailrelay.KindReview,
			Attempt: n.Attempts, Reason: ReasonDuplicateDelivery, GmailID: h.id,
			Note: fmt.Sprintf("found a copy (gmail id %s) besides the one %d effect line(s) count already", h.id, n.Effects-1)}
		d.checks, d.looks, d.verified, d.next, d.keepNext = n.Checks, n.VerifyLooks, n.Verified, time.Time{}, false
		d.count |= tDuplicates
		d.say = alarm("ALARM: the relay delivered a message twice (two own effects); handed to a human", "gmail_id", h.id)
	default:
		d.why = found
	}
	return d
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
	line = gmailrelay.Line{Kind: gmailrelay.KindEffect, Attempt: n.Attempts, Reason: ReasonFound, Source: cmp.Or(h.source, gmailrelay.SourceSearch),
		GmailID: h.id, LabelIDs: n.LabelIDs}
	if effect {
		n.Effects++
	}
	return line, effect
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

// oneCopy makes d record a search that found exactly one copy of j's
// message: the first such search schedules the late look (see lateLook),
// the late look makes the job Verified, for good.
func (d *decision) oneCopy(j gmailrelay.Job, ch policy.Channel, now time.Time) {
	d.checks, d.looks, d.keepNext = 0, j.VerifyLooks+1, false
	if d.looks >= 2 {
		d.verified, d.next = true, time.Time{}
		return
	}
	d.verified, d.next = false, now.Add(lateLook(ch))
}

// searchLine is the search line of a search of j by query q that found
// hits; check is the search's check number.
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
