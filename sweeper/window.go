package sweeper

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/relay"
)

// Before a resend: was the ambiguous attempt stored under a Message-ID
// Gmail made? A send whose id Gmail replaced is invisible to every search
// by the relay's id, so its misses look like a lost send — and the verify
// pass only finds a mailbox rewriting ids through sends whose gmail_id
// Gmail gave (never through an ambiguous one). So the last miss before a
// resend also lists the Sent messages dated in the attempt's window (a
// few seconds around it); one whose Message-ID Gmail made (…@mail.gmail.com,
// …@mx.google.com)
// may be this very send, and the job goes to review instead of being sent
// again. A message a person sent by hand in that window sends the job to
// review too: the safe side.

// windowPad widens the attempt's window on both sides, past what Gmail's
// clock offset is known to be (see gmailSpan): Gmail's servers need not
// agree to the second among themselves.
const windowPad = 2 * time.Second

// unknownOffset is how far Gmail's clock is taken to stand from the
// relay's, either way, while the provider has not measured it yet.
const unknownOffset = time.Minute

// skewWarn is how far Gmail's clock may stand from this host's before a
// pass warns (at most every skewWarnEvery): the relay copes (see
// gmailSpan), but leases, pauses and budgets that replicas share assume
// NTP-synced clocks.
const (
	skewWarn      = 2 * time.Second
	skewWarnEvery = 10 * time.Minute
)

// gmailSpan is where, on Gmail's clock, what happened on the relay's
// between from and to may be dated: [from+lo, to+hi], Gmail's clock offset
// lying in [lo, hi] as mailbox b's provider measured it
// (relay.GmailClock), widened to hold [from, to] itself: a relay whose
// clock is seconds off Google's would otherwise build windows and after:
// queries that Gmail's dates fall outside of, while an offset measured
// from a Date that is not Google's (a proxy's) only widens them. An interval holding zero (clocks that agree as far as
// Gmail's whole-second Date can tell) is taken as zero: within a second
// the clocks were trusted before, and windowPad covers it. A provider
// that has not measured it is taken as ±unknownOffset; one that does not
// date its answers (a test's fake) as exactly the relay's clock.
//
// A time stamped before a step of this host's clock (see clockstep.go) was
// read on a clock that stood the step away from today's, against which the
// offset was measured: the span widens by the step on that side.
func (p *pass) gmailSpan(b *boxPass, from, to time.Time) (time.Time, time.Time) {
	from, to = from.Add(-p.stepSpan(from)), to.Add(p.stepSpan(to))
	prov, _ := b.gmail()
	gc, ok := prov.(relay.GmailClock)
	if !ok {
		return from, to
	}
	lo, hi, known := gc.ClockOffset()
	switch {
	case !known:
		lo, hi = -unknownOffset, unknownOffset
	case lo <= 0 && hi >= 0:
		lo, hi = 0, 0
	case (lo > skewWarn || hi < -skewWarn) && p.now.Sub(p.s.skewWarned) >= skewWarnEvery:
		p.s.skewWarned = p.now
		p.s.deps.Logger.Warn().Str("mailbox", b.m.Name()).Dur("gmail_ahead_min", lo).Dur("gmail_ahead_max", hi).
			Msg("this host's clock is off Gmail's (measured from the Date of its answers); searches are placed on Gmail's clock, but fix the host's time sync")
	}
	// Only ever wider than the host clock's span: a Date that is not
	// Google's (a proxy's, a gateway's) must not move the span off the
	// host clock, which agreed with Google's before.
	return from.Add(min(lo, 0)), to.Add(max(hi, 0))
}

// maxWindowReads bounds the messages.get calls one window check may make;
// a window with more unread messages than that is not read, and the job
// goes to review.
const maxWindowReads = 50

// gmailMadeID reports whether a Message-ID has the shape of one Gmail
// generated, as it does when it replaces a client's: <…@mail.gmail.com>
// (what its clients and the emulator make) or <…@mx.google.com> (what
// Gmail's servers put on mail whose Message-ID was broken, keeping the
// client's in X-Google-Original-Message-ID, as public kernel-list copies
// show). Either may be this very send.
func gmailMadeID(id string) bool {
	id = strings.ToLower(strings.TrimSpace(id))
	return strings.HasSuffix(id, "@mail.gmail.com>") || strings.HasSuffix(id, "@mx.google.com>")
}

// storedUnderGmailID lists the Sent messages dated in the window of j's
// last attempt and reports whether one carries a Message-ID Gmail made
// (with a note saying which). done is false when the pass had to stop
// first (quota, rate limit).
func (p *pass) storedUnderGmailID(ctx context.Context, b *boxPass, j gmailrelay.Job) (suspect bool, note string, done bool, err error) {
	lines, err := p.s.log.JobLines(ctx, j.MessageID)
	if err != nil {
		return false, "", true, fmt.Errorf("read lines of %s: %w", j.MessageID, err)
	}
	end := attemptEnd(j)
	start := end
	for _, l := range lines {
		if l.Kind == gmailrelay.KindForwarding && l.Attempt == j.Attempts && l.Time.Before(start) {
			start = l.Time
		}
	}
	start, end = p.gmailSpan(b, start, end)
	prov, user := b.gmail()
	from, to := start.Add(-windowPad).Unix(), end.Add(windowPad).Unix()+1
	q := fmt.Sprintf("after:%d before:%d", from, to)
	var ids []string
	token, spent := "", 0
	for {
		if !b.take(relay.UnitsList, spent) {
			return false, "", false, nil
		}
		spent += relay.UnitsList
		page, err := prov.List(ctx, user, q, []string{sentLabel}, token, maxPageSize)
		if err != nil {
			if errors.Is(p.gmailErr(b, err), errStopped) {
				return false, "", false, nil
			}
			return false, "", true, err
		}
		b.answered = true
		ids = append(ids, page.IDs...)
		if page.NextPageToken == "" {
			break
		}
		token = page.NextPageToken
	}
	var unread []string
	for _, id := range ids {
		if _, ok := p.header(b, id); !ok {
			unread = append(unread, id)
		}
	}
	if len(unread) > maxWindowReads {
		return true, fmt.Sprintf("%d Sent messages of the attempt's window (%s) are unread; not read, to spare the quota", len(unread), q), true, nil
	}
	if len(unread) > 0 && !b.take(relay.UnitsGet*len(unread), spent) {
		return false, "", false, nil
	}
	p.searchCost += spent + relay.UnitsGet*len(unread)
	for _, id := range unread {
		h, err := prov.GetHeader(ctx, user, id)
		if errors.Is(err, relay.ErrMessageNotFound) {
			continue
		}
		if err != nil {
			if errors.Is(p.gmailErr(b, err), errStopped) {
				return false, "", false, nil
			}
			return false, "", true, err
		}
		p.setHeader(b, id, h.MessageID)
	}
	for _, id := range ids {
		if mid, ok := p.header(b, id); ok && gmailMadeID(mid) {
			return true, fmt.Sprintf("Sent message %s of the attempt's window (%s) carries a Message-ID Gmail made: it may be this send, stored under another id", id, q), true, nil
		}
	}
	return false, "", true, nil
}
