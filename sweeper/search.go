package sweeper

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/relay"
)

// hit is one search result attributed to a job.
type hit struct {
	id     string
	labels []string
	// source is how the copy was found: gmailrelay.SourceSearch when
	// empty, gmailrelay.SourceHistory for the history tail's.
	source string
}

// search runs the searches for jobs of one mailbox, BatchSize ids per query
// (the caller hands over at most that many), and decides each job. It
// returns how many jobs it dealt with.
func (p *pass) search(ctx context.Context, b *boxPass, jobs []gmailrelay.Job) (int, error) {
	if len(jobs) == 0 {
		return 0, nil
	}
	if _, err := jobsQuery(jobs); err != nil {
		// Only searchBatch's callers pass unchecked jobs; be safe anyway.
		return p.searchBatch(ctx, b, jobs)
	}
	// The witness rides in the same OR query.
	searched := jobs
	if w, ok := p.witnessFor(b.name, jobs); ok {
		searched = append(slices.Clip(jobs), w)
	}
	q, err := jobsQuery(searched)
	if err != nil {
		return 0, err
	}
	hits, err := p.find(ctx, b, q, searched)
	if errors.Is(err, errStopped) {
		return 0, nil
	}
	if err != nil && queryRefused(err) {
		return p.refused(ctx, b, jobs, q, err)
	}
	if err != nil {
		p.res.Errors++
		p.s.deps.Logger.Warn().Err(err).Int("jobs", len(jobs)).Msg("mailbox search; the jobs are checked again shortly")
		for _, j := range jobs {
			grace := p.channel(j.Channel).Grace
			if _, err := p.apply(ctx, j, recheck(j, p.now.Add(min(errorDelay, grace)))); err != nil {
				return 0, err
			}
		}
		return len(jobs), nil
	}
	witness := p.witnesses(ctx, b, searched, hits)
	// Sent jobs first: their handle checks may find that Gmail rewrites
	// ids in this mailbox, and then a miss of an unknown job of the same
	// batch proves nothing.
	done := 0
	for _, sent := range []bool{true, false} {
		for _, j := range jobs {
			if (j.State == gmailrelay.StateSent) != sent || witness[j.MessageID] == witnessUnasked {
				continue
			}
			ok, err := p.judge(ctx, b, j, q, hits[j.MessageID], witness[j.MessageID])
			if err != nil {
				return done, err
			}
			if ok {
				done++
			}
		}
	}
	return done, nil
}

// find lists the SENT messages matching q (every page) and attributes each
// hit to a job: directly for a one-id query, by reading the hit's
// Message-ID otherwise. It returns errStopped when the pass must stop.
func (p *pass) find(ctx context.Context, b *boxPass, q string, jobs []gmailrelay.Job) (map[string][]hit, error) {
	prov, user := b.gmail()
	spent := 0
	var ids []string
	token := ""
	for {
		if !b.take(relay.UnitsList, spent) {
			return nil, errStopped
		}
		spent += relay.UnitsList
		page, err := prov.List(ctx, user, q, []string{sentLabel}, token, maxPageSize)
		if err != nil {
			return nil, p.gmailErr(b, err)
		}
		b.answered = true
		ids = append(ids, page.IDs...)
		if page.NextPageToken == "" {
			break
		}
		token = page.NextPageToken
	}
	p.searchCost = spent
	hits := map[string][]hit{}
	if len(jobs) == 1 {
		for _, id := range ids {
			hits[jobs[0].MessageID] = append(hits[jobs[0].MessageID], hit{id: id, labels: []string{sentLabel}})
		}
		return hits, nil
	}
	if len(ids) == 0 {
		return hits, nil
	}
	want := make(map[string]bool, len(jobs))
	for _, j := range jobs {
		want[j.MessageID] = true
	}
	var unread []string
	for _, id := range ids {
		if _, ok := p.header(b, id); !ok {
			unread = append(unread, id)
		}
	}
	// Reserve every read at once: a pass that runs out half-way would have
	// spent its list for nothing.
	if len(unread) > 0 && !b.take(relay.UnitsGet*len(unread), spent) {
		return nil, errStopped
	}
	p.searchCost += relay.UnitsGet * len(unread)
	for _, id := range unread {
		h, err := prov.GetHeader(ctx, user, id)
		if errors.Is(err, relay.ErrMessageNotFound) {
			continue // deleted between list and get
		}
		if err != nil {
			return nil, p.gmailErr(b, err)
		}
		p.setHeader(b, id, h.MessageID)
	}
	for _, id := range ids {
		if mid, ok := p.header(b, id); ok && want[mid] {
			hits[mid] = append(hits[mid], hit{id: id, labels: []string{sentLabel}})
		}
	}
	return hits, nil
}

// take takes units from the mailbox's budget (shared with the send path)
// as background work. When the budget says wait, the mailbox stops for
// this pass; the wait it reports covers the units this search already
// spent too, since the next pass starts the search again.
func (b *boxPass) take(units, spent int) bool {
	quota := b.m.Quota()
	ok, wait := quota.TakeBackground(units)
	if ok {
		return true
	}
	if spent > 0 {
		// Only a question (a peek that takes nothing): how long until the
		// whole search fits.
		if ok2, w := quota.Available(units+spent, true); !ok2 {
			wait = max(wait, w)
		}
	}
	b.stop(wait)
	return false
}

// gmailErr turns a failed Gmail call into errStopped (rate limited: back
// off) or the error itself.
func (p *pass) gmailErr(b *boxPass, err error) error {
	if o := relay.Classify(err); o.Reason == gmailrelay.ReasonRateLimited {
		p.rateLimited(b, o.RetryIn)
		return errStopped
	}
	return err
}

// rateLimited pauses the mailbox after Gmail answered 429 (or 403 with a
// rate reason) until Gmail's retry time, or else for the next step of the
// mailbox's backoff (relay.Quota.RateLimited). The pass stops.
func (p *pass) rateLimited(b *boxPass, retryIn time.Duration) {
	b.limited = true
	// Gmail's retry time when it gave one, else the mailbox's backoff
	// (1 s doubling to 15 min, with jitter), shared with the send path.
	d := b.m.Quota().RateLimited(retryIn)
	p.s.deps.Logger.Warn().Str("mailbox", b.m.Name()).Dur("pause", d).Msg("Gmail rate limit: the sweeper backs off this mailbox")
	b.stop(d)
}

// stop ends the mailbox's work in this pass.
func (b *boxPass) stop(wait time.Duration) {
	b.stopped = true
	b.wait = max(b.wait, wait)
}

// header returns the Message-ID read back for a Gmail id of mailbox b
// (Gmail's ids are the mailbox's own, so the cache is per mailbox).
func (p *pass) header(b *boxPass, id string) (string, bool) {
	mid, ok := p.s.headers[b.m.Name()+"\x00"+id]
	return mid, ok
}

func (p *pass) setHeader(b *boxPass, id, messageID string) {
	p.s.headers[b.m.Name()+"\x00"+id] = messageID
}
