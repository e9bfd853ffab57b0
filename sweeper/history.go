package sweeper

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/policy"
	"github.com/gmailrelay/gmailrelay/relay"
)

// The history tail: each pass reads, per mailbox, the records of its SENT
// history (users.history.list, 2 units a page) after the mailbox's cursor,
// a second witness beside the search index. Gmail lists a stored message
// there within seconds, in order, where the index may take minutes. A new
// SENT message the relay recorded itself (its Gmail id came back from the
// send) needs nothing more; any other has its Message-ID and job header
// read (messages.get, format metadata: 5 units), and a copy of an unknown
// job's message resolves it: sent, effect line with source history.
// When the history is known complete to the channel's history_settle past
// the attempt and holds no copy, a channel with witness: history resends.
// See docs/design.md#the-history-tail.

const (
	// historyQuick is how often the history of a mailbox with unknown
	// jobs is read: at most 24 units a minute, and never in every pass of
	// a sweeper that waits for quota (a read each pass would take the
	// units a search waited for, every time).
	historyQuick = 5 * time.Second
	// historyIdle is how often the history of an idle mailbox (no
	// unknown jobs, no send for reportWatch) is read: 2 units a minute,
	// 120 an hour, keep its cursor fresh.
	historyIdle = time.Minute
	// reportWatch is how long after a send the history is read quickly
	// for the delivery reports that follow it (most come within
	// minutes).
	reportWatch = 15 * time.Minute
	// historyPages bounds the pages of one mailbox's history one pass
	// reads; the rest waits for the next pass (the cursor keeps the place).
	historyPages = 10
	// historyJobs bounds the unknown jobs one pass matches against the
	// history.
	historyJobs = 1000
)

// histories runs the history tail of every mailbox, before the pass looks at its due jobs: a quick one while
// the mailbox has unknown jobs, every historyIdle otherwise. A mailbox
// whose tail fails is left to the search path for this pass.
func (p *pass) histories(ctx context.Context) error {
	ed, ok := p.s.log.(gmailrelay.MailboxEditor)
	if !ok || !p.s.deps.History {
		return nil
	}
	unknown, err := p.s.log.ByState(ctx, gmailrelay.StateUnknown, historyJobs)
	if err != nil {
		return fmt.Errorf("read unknown jobs: %w", err)
	}
	byBox := map[string][]gmailrelay.Job{}
	for _, j := range unknown {
		if m, err := p.s.deps.Mailboxes.MailboxOf(j.Mailbox); err == nil {
			byBox[m.Name()] = append(byBox[m.Name()], j)
		}
	}
	for _, m := range p.s.deps.Mailboxes.Mailboxes() {
		hr := m.Provider()
		jobs := byBox[m.Name()]
		every := historyIdle
		if len(jobs) > 0 || p.now.Sub(m.LastSend()) < reportWatch {
			every = historyQuick
		}
		if last, ok := p.s.historyRead[m.Name()]; ok && p.now.Sub(last) < every {
			continue
		}
		b := p.box(m.Name())
		if b.halted() {
			continue
		}
		p.s.historyRead[m.Name()] = p.now
		t := &tail{p: p, b: b, hr: hr, ed: ed, want: map[string]gmailrelay.Job{}}
		for _, j := range jobs {
			t.want[j.MessageID] = j
		}
		if err := t.run(ctx); err != nil && !errors.Is(err, errStopped) {
			p.res.Errors++
			p.s.deps.Logger.Warn().Err(err).Str("mailbox", m.Name()).Msg("history tail: left to the search path for this pass")
		}
	}
	return nil
}

// tail is one mailbox's history tail in one pass.
type tail struct {
	p  *pass
	b  *boxPass
	hr relay.HistoryReader
	ed gmailrelay.MailboxEditor
	// want are the mailbox's unknown jobs by Message-ID, less those the
	// tail resolved.
	want map[string]gmailrelay.Job
}

// run reads the history after the cursor, resolves the jobs it finds,
// moves the cursor and then settles the misses it proves.
func (t *tail) run(ctx context.Context) error {
	mb, err := t.p.mailbox(ctx, t.b.m.Name())
	if err != nil {
		return err
	}
	cur := mb.History
	if cur.ID == 0 {
		return t.restart(ctx, false)
	}
	started := t.p.now
	next, complete, err := t.read(ctx, cur.ID)
	if errors.Is(err, relay.ErrHistoryExpired) {
		return t.restart(ctx, true)
	}
	if next != cur.ID || complete {
		saved, serr := t.ed.EditMailbox(ctx, t.b.m.Name(), func(m *gmailrelay.Mailbox) {
			if m.History.Since.Equal(cur.Since) { // not restarted meanwhile (another replica)
				m.History.ID = max(m.History.ID, next)
				if complete && started.After(m.History.CompleteAt) {
					m.History.CompleteAt = started
				}
			}
		})
		if serr != nil {
			return fmt.Errorf("save the history cursor: %w", serr)
		}
		t.p.mailboxes[t.b.m.Name()] = saved
		cur = saved.History
	}
	if err != nil {
		return err
	}
	if err := t.verify(ctx, cur); err != nil {
		return err
	}
	return t.misses(ctx, cur)
}

// read lists the records after start, page by page, and looks at each
// message they added. next is the id up to which every record was dealt
// with; complete says the listing reached the mailbox's current history
// id. A record holding a copy of a job still in flight ends the reading
// before it: the next pass reads it again, once the attempt's outcome is
// logged.
func (t *tail) read(ctx context.Context, start uint64) (next uint64, complete bool, err error) {
	next = start
	token := ""
	for range historyPages {
		if !t.b.take(relay.UnitsHistory, 0) {
			return next, false, errStopped
		}
		// Every label: SENT for the copies, INBOX for delivery reports.
		page, err := t.hr.History(ctx, t.b.m.UserID(), start, "", token)
		if err != nil {
			if errors.Is(err, relay.ErrHistoryExpired) {
				return next, false, err
			}
			return next, false, t.p.gmailErr(t.b, err)
		}
		t.b.answered = true
		for _, rec := range page.Records {
			held, err := t.record(ctx, rec)
			if err != nil || held {
				return next, false, err
			}
			next = max(next, rec.ID)
		}
		if page.NextPageToken == "" {
			return max(next, page.HistoryID), true, nil
		}
		token = page.NextPageToken
	}
	return next, false, nil
}

// record looks at the SENT messages one history record added. held says
// one is a copy of a job whose attempt is in flight.
func (t *tail) record(ctx context.Context, rec relay.HistoryRecord) (held bool, err error) {
	for _, a := range rec.Added {
		if !slices.Contains(a.LabelIDs, sentLabel) {
			if slices.Contains(a.LabelIDs, inboxLabel) {
				if err := t.report(ctx, a.ID); err != nil {
					return false, err
				}
			}
			continue
		}
		mid, rewritten, ok, err := t.messageID(ctx, a.ID)
		if err != nil || !ok {
			return false, err
		}
		if rewritten {
			if err := t.noteRewrite(ctx); err != nil {
				return false, err
			}
		}
		j, wanted := t.want[mid]
		if !wanted {
			held, err := t.known(ctx, mid, a)
			if err != nil || held {
				return held, err
			}
			continue
		}
		d := historyFound(j, t.p.channel(j.Channel), hit{id: a.ID, labels: a.LabelIDs, source: gmailrelay.SourceHistory}, t.p.now)
		if _, err := t.p.apply(ctx, j, d); err != nil {
			return false, err
		}
		delete(t.want, mid)
	}
	return false, nil
}

// messageID is the Message-ID of the job the mailbox's message gmailID
// is a copy of: one the relay recorded itself, read before, or read now
// (5 units). A copy whose Message-ID Gmail replaced is named by its job
// header (rewritten is true then, on the read that finds it). ok is false
// for a message deleted since.
func (t *tail) messageID(ctx context.Context, gmailID string) (mid string, rewritten, ok bool, err error) {
	if mid, ok := t.b.m.RecentSend(gmailID); ok {
		return mid, false, true, nil
	}
	if mid, ok := t.p.header(t.b, gmailID); ok {
		return mid, false, true, nil
	}
	if !t.b.take(relay.UnitsGet, 0) {
		return "", false, false, errStopped
	}
	prov, user := t.b.gmail()
	h, err := prov.GetHeader(ctx, user, gmailID)
	if errors.Is(err, relay.ErrMessageNotFound) {
		return "", false, false, nil
	}
	if err != nil {
		return "", false, false, t.p.gmailErr(t.b, err)
	}
	mid = h.MessageID
	if h.Job != "" && relay.JobHash(h.MessageID) != h.Job {
		// The job header names another Message-ID than the copy's: Gmail
		// replaced ours.
		if byJob := t.jobNamed(h.Job); byJob != "" {
			mid, rewritten = byJob, true
		}
	}
	t.p.setHeader(t.b, gmailID, mid)
	return mid, rewritten, true, nil
}

// jobNamed is the Message-ID of the job whose job hash is job: an unknown
// job the tail is looking for, else the one the relay's Message-ID domain
// gives; "" when the value cannot name one.
func (t *tail) jobNamed(job string) string {
	for id := range t.want {
		if relay.JobHash(id) == job {
			return id
		}
	}
	return jobMessageID(job, t.p.s.deps.Policy.MsgIDDomain)
}

// noteRewrite records in the mailbox's record that Gmail replaced one of
// the relay's Message-IDs there: the handle is untrusted, so a search miss
// proves nothing in this mailbox (the search path then hands ambiguous
// jobs to a human instead of resending).
func (t *tail) noteRewrite(ctx context.Context) error {
	saved, err := t.ed.EditMailbox(ctx, t.b.m.Name(), func(m *gmailrelay.Mailbox) {
		m.HandleChecked, m.HandleUntrusted = true, true
		m.Rewrites++
	})
	if err != nil {
		return fmt.Errorf("record a rewritten Message-ID: %w", err)
	}
	t.p.mailboxes[t.b.m.Name()] = saved
	return nil
}

// jobMessageID is the Message-ID a job header names: its job hash (the
// Message-ID's local part) at the relay's Message-ID domain; "" for a
// value that cannot be one.
func jobMessageID(job, domain string) string {
	if job == "" || strings.ContainsAny(job, "<>@ \t\r\n") {
		return ""
	}
	id := "<" + job + "@" + domain + ">"
	if gmailrelay.CheckMessageID(id) != nil {
		return ""
	}
	return id
}

// known deals with a SENT copy a of the job mid, which is not unknown:
// held (the reading stops before it) while the job's attempt is in
// flight; for a sent job, its own copy waits to verify it (see verify),
// and a copy besides the one its effect counts is a second delivery
// (historySecondCopy). Another client's mail (no such job) is left alone.
func (t *tail) known(ctx context.Context, mid string, a relay.HistoryAdded) (held bool, err error) {
	if mid == "" || gmailrelay.CheckMessageID(mid) != nil {
		return false, nil
	}
	j, err := t.p.s.log.Get(ctx, mid)
	if errors.Is(err, gmailrelay.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read job %s: %w", mid, err)
	}
	switch {
	case j.State == gmailrelay.StateForwarding:
		return true, nil
	case j.State != gmailrelay.StateSent || j.GmailID == "":
	case j.GmailID == a.ID:
		if !j.Verified {
			t.p.s.verifying.add(t.b.m.Name(), mid, t.p.now)
		}
	default:
		d := historySecondCopy(j, hit{id: a.ID, labels: a.LabelIDs, source: gmailrelay.SourceHistory})
		if _, err := t.p.apply(ctx, j, d); err != nil {
			return false, err
		}
	}
	return false, nil
}

// restart starts a new cursor at the mailbox's current history id
// (users.getProfile, 1 unit). After a cursor Gmail no longer kept
// (expired), the jobs it covered are left to the search path, which
// looks for them as for any ambiguous send; the fallback is counted.
func (t *tail) restart(ctx context.Context, expired bool) error {
	if !t.b.take(relay.UnitsProfile, 0) {
		return errStopped
	}
	id, err := t.hr.Profile(ctx, t.b.m.UserID())
	if err != nil {
		return t.p.gmailErr(t.b, err)
	}
	now := t.p.now
	saved, err := t.ed.EditMailbox(ctx, t.b.m.Name(), newCursor(id, now, expired))
	if err != nil {
		return fmt.Errorf("start the history cursor: %w", err)
	}
	t.p.mailboxes[t.b.m.Name()] = saved
	if expired {
		t.p.s.deps.Logger.Warn().Str("mailbox", t.b.m.Name()).Int("unknown_jobs", len(t.want)).
			Msg("Gmail no longer keeps the mailbox's history from the cursor: its unknown jobs are left to the search path; a new cursor starts now")
	}
	return nil
}

// newCursor is the edit of a mailbox's record that starts its history
// cursor at history id id, now: after an expired cursor (a fallback,
// counted), or where none was started yet (one another replica started
// meanwhile stands).
func newCursor(id uint64, now time.Time, expired bool) func(*gmailrelay.Mailbox) {
	return func(m *gmailrelay.Mailbox) {
		if !expired && m.History.ID != 0 {
			return
		}
		fallbacks := m.History.Fallbacks
		if expired {
			fallbacks++
		}
		m.History = gmailrelay.HistoryCursor{ID: id, Since: now, CompleteAt: now, Fallbacks: fallbacks}
	}
}

// misses resends the jobs of witness: history channels whose attempt the
// history speaks for and shows no copy of.
func (t *tail) misses(ctx context.Context, cur gmailrelay.HistoryCursor) error {
	for _, j := range t.want {
		ch := t.p.channel(j.Channel)
		if ch.OnUnknown != policy.Retry || !ch.ResendOnHistory() {
			continue
		}
		start, err := t.p.attemptStart(ctx, j)
		if err != nil {
			return err
		}
		d, ok := historyMiss(j, ch, cur, start)
		if !ok {
			continue
		}
		written, err := t.p.apply(ctx, j, d)
		if err != nil {
			return err
		}
		if written {
			j.Checks = d.checks
			if _, err := t.p.resendUnchecked(ctx, t.b, j); err != nil {
				return err
			}
		}
	}
	return nil
}

// attemptStart is when the job's last attempt was handed to the send path
// (its forwarding line; zero when it has none).
func (p *pass) attemptStart(ctx context.Context, j gmailrelay.Job) (time.Time, error) {
	lines, err := p.s.log.JobLines(ctx, j.MessageID)
	if err != nil {
		return time.Time{}, fmt.Errorf("read lines of %s: %w", j.MessageID, err)
	}
	for _, l := range slices.Backward(lines) {
		if l.Kind == gmailrelay.KindForwarding && l.Attempt == j.Attempts {
			return l.Time, nil
		}
	}
	return time.Time{}, nil
}

// historyFound decides a job a copy of which the mailbox's history listed:
// as a search that found exactly one copy, with source history. The
// ambiguous attempt was delivered: on a retry channel the job is sent
// (foundOnce); a review channel records the effect and hands the job to a
// human, who never finds it resolved behind their back.
func historyFound(j gmailrelay.Job, ch policy.Channel, h hit, now time.Time) decision {
	if ch.OnUnknown != policy.Retry {
		why := gmailrelay.Line{Kind: gmailrelay.KindReview, Attempt: j.Attempts, Reason: ReasonReviewChannel, GmailID: h.id,
			Note: "found once in the mailbox's history; this channel never resolves ambiguous sends by itself"}
		d := review(j, why)
		d.found = &h
		return d.counting(tFound)
	}
	d := keep(j)
	d.found, d.to = &h, gmailrelay.StateSent
	d.oneCopy(j, ch, now)
	d.say = logLine{level: zerolog.InfoLevel, msg: "ambiguous send found in the mailbox's history: sent", attrs: []string{"gmail_id", h.id}}
	return d.counting(tChecked | tFound)
}

// historyMiss decides a job of a witness: history channel whose last
// attempt started at start, given the mailbox's cursor: a miss when the
// history covers the attempt (the cursor began before it) and is known
// complete to history_settle past its end without a copy. The miss is a
// search line (query "history", witness "history") and the resend follows.
func historyMiss(j gmailrelay.Job, ch policy.Channel, cur gmailrelay.HistoryCursor, start time.Time) (decision, bool) {
	if start.IsZero() || !cur.Covers(start) || cur.CompleteAt.Before(attemptEnd(j).Add(ch.Settle())) {
		return decision{}, false
	}
	line := gmailrelay.Line{Kind: gmailrelay.KindSearch, Attempt: j.Attempts, Query: historyQuery, Hits: 0,
		Check: j.Checks + 1, Witness: witnessHistory,
		Note: fmt.Sprintf("the mailbox's SENT history, complete to %s, holds no copy", cur.CompleteAt.UTC().Format(time.RFC3339))}
	return missThen(j, line, followResend), true
}

// The query and witness of a history miss's search line.
const (
	historyQuery   = "history:SENT"
	witnessHistory = "history"
)

// StartCursors starts the history cursor of every mailbox that has none
// (users.getProfile, 1 unit each), so that the history covers every
// attempt made from then on; serve calls it before it serves (the first
// pass would start them too, after the first sends). A mailbox whose
// profile cannot be read now is left to the first pass.
func (s *Sweeper) StartCursors(ctx context.Context) error {
	ed, ok := s.log.(gmailrelay.MailboxEditor)
	if !ok || !s.deps.History {
		return nil
	}
	s.passMu.Lock()
	defer s.passMu.Unlock()
	now := s.now()
	var errs []error
	for _, m := range s.deps.Mailboxes.Mailboxes() {
		rec, err := s.log.Mailbox(ctx, m.Name())
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if rec.History.ID != 0 {
			continue
		}
		if ok, _ := m.Quota().TakeBackground(relay.UnitsProfile); !ok {
			continue
		}
		id, err := m.Provider().Profile(ctx, m.UserID())
		if err != nil {
			errs = append(errs, fmt.Errorf("mailbox %s: %w", m.Name(), err))
			continue
		}
		if _, err := ed.EditMailbox(ctx, m.Name(), newCursor(id, now, false)); err != nil {
			errs = append(errs, fmt.Errorf("mailbox %s: %w", m.Name(), err))
		}
	}
	return errors.Join(errs...)
}

// historyAgrees reports whether the history lets the search path resend
// unknown job j: with the tail off, or for an attempt its cursor does not
// cover, the search path decides alone; for a covered attempt the history
// must be complete history_settle past it (a copy it listed would have
// resolved the job). While it is not, the resend waits: the job stays due.
func (p *pass) historyAgrees(ctx context.Context, j gmailrelay.Job) (bool, error) {
	if !p.s.deps.History {
		return true, nil
	}
	mb, err := p.mailbox(ctx, j.Mailbox)
	if err != nil {
		return false, err
	}
	start, err := p.attemptStart(ctx, j)
	if err != nil {
		return false, err
	}
	cur := mb.History
	if start.IsZero() || !cur.Covers(start) {
		return true, nil
	}
	return !cur.CompleteAt.Before(attemptEnd(j).Add(p.channel(j.Channel).Settle())), nil
}
