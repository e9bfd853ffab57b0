package sweeper

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/relay"
)

// Witness values of search lines (docs/design.md#the-witness-rule).
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
	// witnessUnasked: the companion query could not be made because the
	// mailbox had to stop (quota, rate limit). Never written: the job is
	// left due, without a search line, and searched again.
	witnessUnasked = "unasked"
)

// ReasonIndexUnverifiable is the review reason after max_unwitnessed of
// missing witnesses.
const ReasonIndexUnverifiable = gmailrelay.ReasonIndexUnverifiable

// attemptEnd is when the job's last ambiguous attempt ended.
func attemptEnd(j gmailrelay.Job) time.Time {
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
// witnesses later searches carry. The newest of them is also written to
// the mailbox's record, so that searches after a restart still carry a
// witness (see witnessFor).
func (p *pass) noteSends(ctx context.Context, jobs []gmailrelay.Job) error {
	newest := map[string]gmailrelay.Job{}
	for _, j := range jobs {
		if j.CreatedAt.After(p.s.activity[j.Mailbox]) {
			p.s.activity[j.Mailbox] = j.CreatedAt
		}
		if j.State != gmailrelay.StateSent || j.GmailID == "" || relay.CheckMessageIDShape(j.MessageID) != nil {
			continue
		}
		if n, ok := newest[j.Mailbox]; !ok || j.CreatedAt.After(n.CreatedAt) {
			newest[j.Mailbox] = j
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
	if p.s.deps.DisableWitness {
		return nil
	}
	for name, j := range newest {
		mb, err := p.mailbox(ctx, name)
		if err != nil {
			return err
		}
		if !j.CreatedAt.After(mb.LastSendAt) {
			continue
		}
		var stored gmailrelay.Mailbox
		_, _, err = p.s.log.Mutate(ctx, j.MessageID, func(cur *gmailrelay.Job) (gmailrelay.Change, error) {
			if cur == nil {
				return gmailrelay.Change{}, errChanged
			}
			return gmailrelay.Change{EditMailbox: func(m *gmailrelay.Mailbox) {
				if j.CreatedAt.After(m.LastSendAt) {
					m.LastSendID, m.LastSendAt = j.MessageID, j.CreatedAt
				}
				stored = *m
			}}, nil
		})
		if errors.Is(err, errChanged) {
			continue
		}
		if err != nil {
			return fmt.Errorf("record the newest send of mailbox %s: %w", name, err)
		}
		stored.Name = name
		p.mailboxes[name] = stored
	}
	return nil
}

// witnessFor picks the witness a search of jobs carries: when the batch
// holds unknown jobs and no sent job created after all their attempts
// ended, the earliest confirmed send of the mailbox created after them
// (earliest, so that it had the most time to be indexed). It returns a
// pseudo-job for it (sent, so never decided) or false when none is known
// or none is needed.
func (p *pass) witnessFor(mailbox string, jobs []gmailrelay.Job) (gmailrelay.Job, bool) {
	if p.s.deps.DisableWitness {
		return gmailrelay.Job{}, false
	}
	var latest time.Time
	any := false
	for _, j := range jobs {
		if j.State == gmailrelay.StateUnknown {
			any = true
			if e := attemptEnd(j); e.After(latest) {
				latest = e
			}
		}
	}
	if !any {
		return gmailrelay.Job{}, false
	}
	for _, k := range jobs {
		if k.State == gmailrelay.StateSent && k.GmailID != "" && k.CreatedAt.After(latest) {
			return gmailrelay.Job{}, false
		}
	}
	refs := p.s.sends[mailbox]
	if mb := p.mailboxes[mailbox]; mb.LastSendID != "" && relay.CheckMessageIDShape(mb.LastSendID) == nil {
		// The newest send recorded in the mailbox (the one known after a
		// restart), after those remembered since.
		refs = append(slices.Clip(refs), sendRef{at: mb.LastSendAt, id: mb.LastSendID})
	}
	for _, r := range refs {
		if r.at.After(latest) && !slices.ContainsFunc(jobs, func(j gmailrelay.Job) bool { return j.MessageID == r.id }) {
			return gmailrelay.Job{MessageID: r.id, Mailbox: mailbox, State: gmailrelay.StateSent, GmailID: "witness", CreatedAt: r.at}, true
		}
	}
	return gmailrelay.Job{}, false
}

// witnesses decides the witness of every unknown job of the batch whose
// search found nothing: a sent job of the same query (one of the batch, or
// the witness witnessFor added) created after the attempt ended is the
// witness when the search found it (found), and proves the search blind
// when it did not (missing: the index is behind, or Gmail silently could
// not match the query). With no such send known, the companion after:
// query decides (see companion): any message dated after the attempt is
// the witness (found); with none, the witness is none and the time rule
// decides — unless a later job of the mailbox is known (any state), or the
// log holds a later attempt handed to Gmail (see lastHandedToGmail): then a
// message after the attempt is coming, and the witness is missing until it
// is seen. A companion Gmail answered with an error found no witness:
// missing, never none, so that no miss is counted on a guess; one the pass
// could not make (no quota, a rate limit: the mailbox stopped) leaves the
// job undecided (witnessUnasked).
func (p *pass) witnesses(ctx context.Context, b *boxPass, jobs []gmailrelay.Job, hits map[string][]hit) map[string]string {
	out := map[string]string{}
	if p.s.deps.DisableWitness {
		return out
	}
	var unseen []gmailrelay.Job // misses with no confirmed later send in the query
	for _, j := range jobs {
		if j.State != gmailrelay.StateUnknown || len(hits[j.MessageID]) > 0 {
			continue
		}
		end := attemptEnd(j)
		w := WitnessNone
		for _, k := range jobs {
			if k.State != gmailrelay.StateSent || k.GmailID == "" || !k.CreatedAt.After(end) {
				continue
			}
			if len(hits[k.MessageID]) > 0 {
				w = WitnessFound
				break
			}
			w = WitnessMissing
		}
		out[j.MessageID] = w
		if w == WitnessNone {
			unseen = append(unseen, j)
		}
	}
	if len(unseen) == 0 {
		return out
	}
	found, answered := p.companion(ctx, b, unseen)
	var handed time.Time
	if !found && answered {
		// Gmail's index shows nothing after the attempts; the log may
		// still know a later send the index does not show yet.
		handed = p.lastHandedToGmail(ctx, b.name, unseen)
	}
	for _, j := range unseen {
		switch {
		case found:
			out[j.MessageID] = WitnessFound
		case !answered && b.halted():
			// No quota for the companion, or Gmail rate-limited it: the
			// mailbox stopped for this pass, and the job is searched
			// again, companion and all, when it may go on.
			out[j.MessageID] = witnessUnasked
		case !answered:
			// Gmail answered the companion with an error: whether a later
			// message exists is not known, so no witness was found and the
			// miss does not count.
			out[j.MessageID] = WitnessMissing
		case p.s.activity[j.Mailbox].After(attemptEnd(j)), handed.After(attemptEnd(j)):
			// A later job exists whose send Gmail has not confirmed yet
			// (or not to a verify pass yet), or the log holds a later
			// attempt handed to Gmail: wait for it rather than fall back
			// to the time rule.
			out[j.MessageID] = WitnessMissing
		}
	}
	return out
}

// lastHandedToGmail is when the mailbox's newest attempt after the
// earliest attempt end of jobs was handed to Gmail (its forwarding line,
// from the log's send index: it survives restarts and includes sends no
// pass has seen yet, such as a confirmed send whose verify is not due).
// The zero time means none. When the log cannot be read it returns the
// far future: no miss is counted on a guess.
func (p *pass) lastHandedToGmail(ctx context.Context, mailbox string, jobs []gmailrelay.Job) time.Time {
	earliest := attemptEnd(jobs[0])
	for _, j := range jobs[1:] {
		if e := attemptEnd(j); e.Before(earliest) {
			earliest = e
		}
	}
	times, err := p.s.log.SendTimes(ctx, mailbox, earliest.Add(time.Nanosecond))
	if err != nil {
		p.res.Errors++
		p.s.deps.Logger.Warn().Err(err).Msg("read the mailbox's later sends; the witness stays missing")
		return time.Date(9999, time.December, 31, 0, 0, 0, 0, time.UTC)
	}
	if len(times) == 0 {
		return time.Time{}
	}
	return times[len(times)-1]
}

// companion makes the companion query (docs/design.md#the-witness-rule):
// one messages.list with q=after:<epoch seconds>, maxResults=1,
// every label and includeSpamTrash=true, 5 units. The seconds are the
// latest attempt end of jobs, on Gmail's clock at the latest (gmailSpan),
// rounded up, so a message stored by one of
// those attempts (even one whose Message-ID Gmail rewrote) is never its own
// witness, and any message it returns — sent or received — is dated after
// every one of them. It reports whether a message came back, and whether
// Gmail answered the query (in this pass). Without quota for it, or when
// Gmail answers with an error or a rate limit, it reports found and
// answered false (never a miss counted on a guess, see witnesses); a lack
// of quota stops the mailbox as for the search itself (the wait covers the
// search, made again with it), a rate limit pauses it, as every call does.
func (p *pass) companion(ctx context.Context, b *boxPass, jobs []gmailrelay.Job) (found, answered bool) {
	mailbox := b.name
	var latest time.Time
	for _, j := range jobs {
		if e := attemptEnd(j); e.After(latest) {
			latest = e
		}
	}
	_, latest = p.gmailSpan(b, latest, latest) // the latest Gmail may date them
	secs := latest.Unix()
	if latest.After(time.Unix(secs, 0)) {
		secs++
	}
	// One answer per mailbox serves the pass's later batches: a message
	// after a later second is after this one too, and no message after an
	// earlier second means none after this one.
	if c, ok := p.companions[mailbox]; ok && (c.found && c.secs >= secs || !c.found && c.secs <= secs) {
		return c.found, true
	}
	if !b.take(relay.UnitsList, p.searchCost) {
		return false, false
	}
	p.searchCost += relay.UnitsList
	prov, user := b.gmail()
	page, err := prov.List(ctx, user, "after:"+strconv.FormatInt(secs, 10), nil, "", 1)
	if err != nil {
		if !errors.Is(p.gmailErr(b, err), errStopped) {
			p.res.Errors++
			p.s.deps.Logger.Warn().Err(err).Msg("companion after: query; the witness stays unknown")
		}
		return false, false
	}
	b.answered = true
	found = len(page.IDs) > 0
	if p.companions == nil {
		p.companions = map[string]companionAnswer{}
	}
	p.companions[mailbox] = companionAnswer{secs: secs, found: found}
	return found, true
}

// companionAnswer is a companion query's answer within one pass: whether a
// message dated at or after secs (epoch seconds) came back.
type companionAnswer struct {
	secs  int64
	found bool
}
