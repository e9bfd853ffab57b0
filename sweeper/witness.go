package sweeper

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/gmailrelay/gmailrelay/acceptlog"
	"github.com/gmailrelay/gmailrelay/relay"
)

// Witness values of search lines (CONTRACT, "Witness before a miss").
const (
	// WitnessFound: a message dated after the ambiguous attempt was found
	// (a later confirmed send in the same OR query, or the companion
	// after: query's answer), so the index had caught up and the miss
	// counts.
	WitnessFound = "found"
	// WitnessMissing: a later message exists (the relay confirmed a later
	// send in this mailbox) but the search did not show it: the index is
	// behind or Gmail silently could not match the query. No miss counted.
	WitnessMissing = "missing"
	// WitnessNone: no message at all is known dated after the attempt;
	// the time rule (checks × grace) applies.
	WitnessNone = "none"
)

// ReasonIndexUnverifiable is the review reason after max_unwitnessed of
// missing witnesses.
const ReasonIndexUnverifiable = acceptlog.ReasonIndexUnverifiable

// attemptEnd is when the job's last ambiguous attempt ended.
func attemptEnd(j acceptlog.Job) time.Time {
	if !j.AmbiguousAt.IsZero() {
		return j.AmbiguousAt
	}
	return j.UpdatedAt
}

// noteSends remembers, per mailbox, the latest creation time of a job Gmail
// confirmed as sent that the sweeper has seen (a lower bound of when that
// send was stored): the proof that a message dated after an older
// ambiguous attempt exists.
func (p *pass) noteSends(jobs []acceptlog.Job) {
	for _, j := range jobs {
		if j.State == acceptlog.StateSent && j.GmailID != "" && j.CreatedAt.After(p.s.lastSend[j.Mailbox]) {
			p.s.lastSend[j.Mailbox] = j.CreatedAt
		}
	}
}

// witnesses decides the witness of every unknown job of the batch whose
// search found nothing. A sent job of the same query created after the
// attempt ended is the witness when it was found, and proves the search
// blind (missing) when it was not. Otherwise, when the sweeper knows of no
// send Gmail confirmed after the attempt, the witness is none (the time
// rule; a companion query could not change the decision, so none is
// made). When it knows of one, one companion query after:<epoch seconds>
// (maxResults 1, 5 units) at the latest attempt end of those jobs looks
// for any later message: found, or missing when the index does not show
// it (or no budget was left for the question). It returns errStopped when
// Gmail rate-limited the pass.
func (p *pass) witnesses(ctx context.Context, mailbox string, jobs []acceptlog.Job, hits map[string][]hit) (map[string]string, error) {
	out := map[string]string{}
	if p.s.deps.DisableWitness {
		return out, nil
	}
	var undecided []acceptlog.Job
	var latest time.Time
	for _, j := range jobs {
		if j.State != acceptlog.StateUnknown || len(hits[j.MessageID]) > 0 {
			continue
		}
		end := attemptEnd(j)
		w := ""
		for _, k := range jobs {
			if k.State != acceptlog.StateSent || k.GmailID == "" || !k.CreatedAt.After(end) {
				continue
			}
			if len(hits[k.MessageID]) > 0 {
				w = WitnessFound
				break
			}
			w = WitnessMissing
		}
		if w != "" {
			out[j.MessageID] = w
			continue
		}
		if !p.s.lastSend[mailbox].After(end) {
			// No later send known: whatever the companion query said, the
			// time rule would decide, so it is not asked.
			out[j.MessageID] = WitnessNone
			continue
		}
		undecided = append(undecided, j)
		if end.After(latest) {
			latest = end
		}
	}
	if len(undecided) == 0 {
		return out, nil
	}
	found, err := p.companion(ctx, mailbox, latest)
	if err != nil {
		return nil, err
	}
	for _, j := range undecided {
		if found {
			out[j.MessageID] = WitnessFound
		} else {
			out[j.MessageID] = WitnessMissing
		}
	}
	return out, nil
}

// companion runs the companion query: is any message (sent or received,
// trashed included) of the mailbox dated after t? A Gmail error other than
// a rate limit answers false (the caller then relies on what the log
// knows).
func (p *pass) companion(ctx context.Context, mailbox string, t time.Time) (bool, error) {
	if ok, _ := p.s.deps.Quota.TakeBackground(relay.UnitsList); !ok {
		// No budget for it now: the search's answers are still recorded,
		// and without a witness the misses wait for the next check.
		return false, nil
	}
	p.searchCost += relay.UnitsList
	q := "after:" + strconv.FormatInt(t.Unix()+1, 10)
	page, err := p.s.deps.Provider.List(ctx, mailbox, q, nil, "", 1)
	if err != nil {
		if err := p.gmailErr(err); errors.Is(err, errStopped) {
			return false, err
		}
		p.res.Errors++
		p.s.deps.Logger.Warn().Err(err).Msg("companion after: query for a witness")
		return false, nil
	}
	p.answered = true
	return len(page.IDs) > 0, nil
}
