package sweeper

import (
	"slices"
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

// maxSendRefs bounds the confirmed sends remembered per mailbox.
const maxSendRefs = 1024

// sendRef is a send Gmail confirmed: its job's Message-ID and creation
// time (a lower bound of when Gmail stored it).
type sendRef struct {
	at time.Time
	id string
}

// noteSends remembers, per mailbox, the jobs Gmail confirmed as sent that
// the pass sees (every sent job passes through the verify pass): the
// witnesses later searches carry.
func (p *pass) noteSends(jobs []acceptlog.Job) {
	for _, j := range jobs {
		if j.CreatedAt.After(p.s.activity[j.Mailbox]) {
			p.s.activity[j.Mailbox] = j.CreatedAt
		}
		if j.State != acceptlog.StateSent || j.GmailID == "" || relay.CheckMessageIDShape(j.MessageID) != nil {
			continue
		}
		refs := p.s.sends[j.Mailbox]
		if slices.ContainsFunc(refs, func(r sendRef) bool { return r.id == j.MessageID }) {
			continue
		}
		i, _ := slices.BinarySearchFunc(refs, j.CreatedAt, func(r sendRef, t time.Time) int { return r.at.Compare(t) })
		refs = slices.Insert(refs, i, sendRef{at: j.CreatedAt, id: j.MessageID})
		if len(refs) > maxSendRefs {
			refs = refs[len(refs)-maxSendRefs:]
		}
		p.s.sends[j.Mailbox] = refs
	}
}

// witnessFor picks the witness a search of jobs carries: when the batch
// holds unknown jobs and no sent job created after all their attempts
// ended, the earliest confirmed send of the mailbox created after them
// (earliest, so that it had the most time to be indexed). It returns a
// pseudo-job for it (sent, so never decided) or false when none is known
// or none is needed.
func (p *pass) witnessFor(mailbox string, jobs []acceptlog.Job) (acceptlog.Job, bool) {
	if p.s.deps.DisableWitness {
		return acceptlog.Job{}, false
	}
	var latest time.Time
	any := false
	for _, j := range jobs {
		if j.State == acceptlog.StateUnknown {
			any = true
			if e := attemptEnd(j); e.After(latest) {
				latest = e
			}
		}
	}
	if !any {
		return acceptlog.Job{}, false
	}
	for _, k := range jobs {
		if k.State == acceptlog.StateSent && k.GmailID != "" && k.CreatedAt.After(latest) {
			return acceptlog.Job{}, false
		}
	}
	for _, r := range p.s.sends[mailbox] {
		if r.at.After(latest) && !slices.ContainsFunc(jobs, func(j acceptlog.Job) bool { return j.MessageID == r.id }) {
			return acceptlog.Job{MessageID: r.id, Mailbox: mailbox, State: acceptlog.StateSent, GmailID: "witness", CreatedAt: r.at}, true
		}
	}
	return acceptlog.Job{}, false
}

// witnesses decides the witness of every unknown job of the batch whose
// search found nothing: a sent job of the same query (one of the batch, or
// the witness witnessFor added) created after the attempt ended is the
// witness when the search found it (found), and proves the search blind
// when it did not (missing: the index is behind, or Gmail silently could
// not match the query). With no such send known the witness is none and
// the time rule decides — unless a later job of the mailbox is known (any
// state): then a confirmed send after the attempt is coming, and the
// witness is missing until it is seen. (CONTRACT also names a companion after: query;
// it is not made: with no later send known, its answer — found or none —
// could not change the decision.)
func (p *pass) witnesses(jobs []acceptlog.Job, hits map[string][]hit) map[string]string {
	out := map[string]string{}
	if p.s.deps.DisableWitness {
		return out
	}
	for _, j := range jobs {
		if j.State != acceptlog.StateUnknown || len(hits[j.MessageID]) > 0 {
			continue
		}
		end := attemptEnd(j)
		w := WitnessNone
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
		if w == WitnessNone && p.s.activity[j.Mailbox].After(end) {
			// A later job exists whose send Gmail has not confirmed yet
			// (or not to a verify pass yet): wait for it rather than fall
			// back to the time rule.
			w = WitnessMissing
		}
		out[j.MessageID] = w
	}
	return out
}
