package api

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/outbox"
	"github.com/gmailrelay/gmailrelay/relay"
)

// The read side of several mailboxes (docs/design.md#several-mailboxes):
// ?mailbox=NAME on GET /v1/jobs, GET /v1/log and GET /v1/stats, and each
// mailbox's figures in /v1/stats and /metrics.

// maxFilterPages bounds the log pages one filtered read scans: a filtered
// page may hold fewer than limit entries and a next cursor to follow.
const maxFilterPages = 50

// MailboxStats is one mailbox's figures in /v1/stats "mailboxes".
type MailboxStats struct {
	// Address is the mailbox's address ("" for the default mailbox of a
	// relay without a mailboxes policy).
	Address string `json:"address"`
	// HandleTrusted: no rewrite of our Message-ID was seen in the mailbox
	// (a search miss proves the message is absent); HandleUntrusted is its
	// opposite, both given so neither is a missing-field default.
	HandleTrusted   bool `json:"handle_trusted"`
	HandleUntrusted bool `json:"handle_untrusted"`
	// HandleChecked: a Message-ID was read back there at least once.
	HandleChecked bool `json:"handle_checked"`
	// Rewrites counts the sends whose Message-ID Gmail replaced there.
	Rewrites        int   `json:"rewrites"`
	QuotaPerMinute  int   `json:"quota_per_minute"`
	QuotaUnitsSpent int64 `json:"quota_units_spent"`
	// PausedFor is how long the mailbox's sends and searches stay paused
	// after a Gmail rate-limit answer, in seconds (0: not paused).
	PausedFor  float64 `json:"paused_for_seconds"`
	Depth      int     `json:"queue_depth"`
	OldestAge  float64 `json:"oldest_queued_age_seconds"`
	BudgetLeft int     `json:"budget_left_today"`
	DailyLimit int     `json:"daily_send_limit"`
	// Ready: the mailbox's credentials refresh and its last readiness
	// probe (if /readyz ran one) answered.
	Ready bool `json:"ready"`
	// NotReady says why Ready is false.
	NotReady string `json:"not_ready,omitempty"`
	// MaxRecipients is the mailbox's recipients a message (max_recipients).
	MaxRecipients int `json:"max_recipients"`
	// SendAs holds the verified send-as addresses the relay last read
	// from Gmail, and SendAsChecked says a read succeeded: while it is
	// false a send's From is not checked (Gmail would replace an
	// unverified one).
	SendAs        []string `json:"send_as_verified,omitempty"`
	SendAsChecked bool     `json:"send_as_checked"`
	// History is the mailbox's history tail; absent until its cursor
	// started.
	History *HistoryStats `json:"history,omitempty"`
}

// HistoryStats is a mailbox's history tail in /v1/stats.
type HistoryStats struct {
	// Cursor is the history id read up to (a decimal string, as Gmail
	// writes history ids).
	Cursor string `json:"cursor"`
	// LagS is how long ago the newest listing that reached the mailbox's
	// current history id started, in seconds: how stale the history's
	// word is.
	LagS float64 `json:"lag_s"`
	// Fallbacks counts the cursors Gmail no longer kept (404): their
	// jobs were left to the search path.
	Fallbacks int `json:"fallbacks"`
}

// historyStats is the /v1/stats view of cursor c at now (nil before it
// started).
func historyStats(c gmailrelay.HistoryCursor, now time.Time) *HistoryStats {
	if c.ID == 0 {
		return nil
	}
	return &HistoryStats{Cursor: strconv.FormatUint(c.ID, 10), LagS: max(now.Sub(c.CompleteAt), 0).Seconds(), Fallbacks: c.Fallbacks}
}

// mailboxParam reads ?mailbox=: "" for every mailbox, or the name of one
// of the relay's mailboxes; any other name is 400 naming the known ones.
func (s *Server) mailboxParam(r *http.Request) (string, error) {
	name := r.URL.Query().Get("mailbox")
	if name == "" || s.svc == nil {
		return name, nil
	}
	names := make([]string, 0, len(s.svc.Mailboxes()))
	for _, m := range s.svc.Mailboxes() {
		if m.Name() == name {
			return name, nil
		}
		names = append(names, m.Name())
	}
	return "", relay.Invalid("mailbox", "no mailbox %q in the policy (mailboxes: %s)", clipText(name), strings.Join(names, ", "))
}

// mailboxName is the name of the mailbox a job belongs to, as the relay
// resolves it (jobs logged before mailboxes had names belong to the
// default mailbox); "" when no mailbox of the policy has it.
func (s *Server) mailboxName(j gmailrelay.Job) string {
	if s.svc == nil {
		return j.Mailbox
	}
	m, err := s.svc.MailboxOf(j.Mailbox)
	if err != nil {
		return ""
	}
	return m.Name()
}

// viewMailbox is the mailbox name a job's answers and views show: its
// mailbox's name as the relay resolves it, else what the job recorded.
func (s *Server) viewMailbox(j gmailrelay.Job) string {
	if name := s.mailboxName(j); name != "" {
		return name
	}
	return j.Mailbox
}

// listKept is List keeping the jobs keep accepts only: it reads pages
// until limit jobs match, the log ends or maxFilterPages were read; next
// is the cursor after the last job read ("" at the end).
func (s *Server) listKept(ctx context.Context, o gmailrelay.ListOptions, keep func(gmailrelay.Job) bool) ([]gmailrelay.Job, string, error) {
	limit := gmailrelay.PageLimit(o.Limit)
	var out []gmailrelay.Job
	for range maxFilterPages {
		page, next, err := s.cfg.Log.List(ctx, o)
		if err != nil {
			return nil, "", err
		}
		for i, j := range page {
			if !keep(j) {
				continue
			}
			out = append(out, j)
			if len(out) == limit {
				if i == len(page)-1 && next == "" {
					return out, "", nil
				}
				return out, j.MessageID, nil
			}
		}
		if next == "" {
			return out, "", nil
		}
		o.After = next
	}
	return out, o.After, nil
}

// mailboxLines is Lines keeping the lines of the jobs of mailbox only
// (each job's mailbox read once per request), scanning until limit lines
// match, the log ends or maxFilterPages were read; next is the cursor to
// continue from (logCursor of the lines scanned, not only those kept).
func (s *Server) mailboxLines(ctx context.Context, after uint64, limit int, mailbox string) ([]gmailrelay.Line, uint64, error) {
	limit = gmailrelay.PageLimit(limit)
	of := map[string]string{} // Message-ID → mailbox name
	var out []gmailrelay.Line
	for range maxFilterPages {
		page, next, err := s.cfg.Log.Lines(ctx, after, limit)
		if err != nil {
			return nil, 0, err
		}
		for _, l := range page {
			name, ok := of[l.MessageID]
			if !ok {
				j, err := s.cfg.Log.Get(ctx, l.MessageID)
				switch {
				case errors.Is(err, gmailrelay.ErrNotFound):
				case err != nil:
					return nil, 0, err
				default:
					name = s.mailboxName(j)
				}
				of[l.MessageID] = name
			}
			if name != mailbox {
				continue
			}
			out = append(out, l)
			if len(out) == limit {
				return out, l.Seq, nil
			}
		}
		after = logCursor(after, page)
		if next == 0 { // the log's end
			break
		}
	}
	return out, after, nil
}

// mailboxStats gathers each mailbox's figures (only mailbox's when it is
// not "") from the relay, the log's mailbox records and the outbox
// snapshot.
func (s *Server) mailboxStats(ctx context.Context, snap outbox.Snapshot, mailbox string) (map[string]MailboxStats, error) {
	out := map[string]MailboxStats{}
	if s.svc == nil {
		return out, nil
	}
	for _, m := range s.svc.Mailboxes() {
		if mailbox != "" && m.Name() != mailbox {
			continue
		}
		rec, err := s.cfg.Log.Mailbox(ctx, m.Name())
		if err != nil {
			return nil, err
		}
		q, ob := m.Quota(), snap.Mailboxes[m.Name()]
		ms := MailboxStats{HandleTrusted: !rec.HandleUntrusted, HandleUntrusted: rec.HandleUntrusted,
			HandleChecked: rec.HandleChecked, Rewrites: rec.Rewrites,
			QuotaPerMinute: q.PerMinute(), QuotaUnitsSpent: q.Spent(), PausedFor: q.PausedFor().Seconds(),
			Depth: ob.Depth, OldestAge: ob.OldestAge, BudgetLeft: ob.BudgetLeft, DailyLimit: ob.DailyLimit,
			MaxRecipients: m.MaxRecipients()}
		ms.SendAs, _, ms.SendAsChecked = m.SendAs()
		ms.History = historyStats(rec.History, s.cfg.Now())
		if addrs := m.Addresses(); len(addrs) > 0 {
			ms.Address = addrs[0]
		}
		if why := s.notReady(m); why != "" {
			ms.NotReady = why
		} else {
			ms.Ready = true
		}
		out[m.Name()] = ms
	}
	return out, nil
}

// notReady says why a mailbox cannot send now: its credentials fail to
// refresh, or the last readiness probe /readyz ran for it failed. It never
// runs a probe (stats and metrics must not call Gmail).
func (s *Server) notReady(m *relay.Mailbox) string {
	if err := m.Health(); err != nil {
		return err.Error()
	}
	i := slices.IndexFunc(s.probes, func(p *probe) bool { return p.name == m.Name() })
	if i < 0 {
		return ""
	}
	p := s.probes[i]
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return p.err.Error()
	}
	return ""
}

// narrow keeps only mailbox's figures of an outbox snapshot (its totals
// become that mailbox's).
func narrow(snap outbox.Snapshot, mailbox string) outbox.Snapshot {
	ob := snap.Mailboxes[mailbox]
	return outbox.Snapshot{Depth: ob.Depth, OldestAge: ob.OldestAge, BudgetLeft: ob.BudgetLeft, DailyLimit: ob.DailyLimit,
		Mailboxes: map[string]outbox.MailboxSnapshot{mailbox: ob}}
}
