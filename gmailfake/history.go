package gmailfake

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The mailbox's history, as Gmail's users.history.list serves it (Google's
// reference: developers.google.com/gmail/api/reference/rest/v1/users.history/list,
// and the sync guide, developers.google.com/gmail/api/guides/sync):
//
//   - every change to a mailbox is a record with a history id; ids increase
//     with time but are not contiguous (the emulator's ids share one counter
//     with message ids, generated Message-IDs and the other accounts);
//   - a send adds a messagesAdded record carrying the message's labels;
//     trash and untrash add labelsAdded / labelsRemoved of TRASH; delete adds
//     messagesDeleted;
//   - a record becomes listable only after the history lag (Options.HistoryLag
//     or HistoryLagDistribution), and records turn listable in id order: the
//     listable history is always a prefix of the mailbox's records;
//   - the historyId a listing (or users.getProfile) answers is the id of the
//     last listable record, never past a record still lagging: a client that
//     stores it as its next startHistoryId cannot skip a record that turns
//     listable later (the guide: "store the returned historyId for a future
//     request");
//   - records older than the retention (Options.HistoryRetention, a week by
//     default: "typically valid for at least a week") are dropped, and a
//     startHistoryId some dropped record followed answers 404 notFound, as
//     Gmail answers an out-of-date cursor.

// Methods and quota costs of the history calls (Google's quota table:
// getProfile 1 unit, history.list 2).
const (
	// MethodHistory is users.history.list, in faults, costs and Stats.Calls.
	MethodHistory = "history"
	// MethodProfile is users.getProfile, in faults, costs and Stats.Calls.
	MethodProfile = "profile"
	CostHistory   = 2
	CostProfile   = 1
)

// DefaultHistoryRetention is how long the emulator keeps history records
// when Options.HistoryRetention is 0: a week, the "at least a week" of
// Google's reference.
const DefaultHistoryRetention = 168 * time.Hour

// History types, as history.list's historyTypes parameter names them.
const (
	HistoryMessageAdded   = "messageAdded"
	HistoryMessageDeleted = "messageDeleted"
	HistoryLabelAdded     = "labelAdded"
	HistoryLabelRemoved   = "labelRemoved"
)

var historyTypeNames = []string{HistoryMessageAdded, HistoryMessageDeleted, HistoryLabelAdded, HistoryLabelRemoved}

// historyRecord is one change to one message.
type historyRecord struct {
	id        uint64
	kind      string // one of historyTypeNames
	at        time.Time
	visibleAt time.Time // when history.list starts to list it; never before the previous record's
	msgID     string
	threadID  string
	msgLabels []string // the message's labels after the change (before it, for a deletion)
	changed   []string // the labels added or removed
}

// mailboxHistory is one account's history.
type mailboxHistory struct {
	records []historyRecord // oldest first
	// floor is the newest history id whose following records are not all
	// kept: the last record dropped by retention, or the counter when the
	// mailbox was created or reset. A startHistoryId below it answers 404.
	floor uint64
}

// historySettings are the history behaviours.
type historySettings struct {
	lag       time.Duration
	lagDist   LagDistribution
	retention time.Duration
}

func newHistorySettings(opts Options) historySettings {
	h := historySettings{lag: max(opts.HistoryLag, 0), lagDist: opts.HistoryLagDistribution, retention: opts.HistoryRetention}
	if h.retention <= 0 {
		h.retention = DefaultHistoryRetention
	}
	return h
}

// recordLocked appends a record of kind with id for m, dated now.
func (s *Server) recordLocked(m *stored, kind string, id uint64, msgLabels, changed []string) {
	now := s.now()
	h := &m.acct.history
	vis := now.Add(s.hist.lag)
	if !s.hist.lagDist.IsZero() {
		vis = now.Add(s.hist.lagDist.draw(s.rng))
	}
	if n := len(h.records); n > 0 && vis.Before(h.records[n-1].visibleAt) {
		vis = h.records[n-1].visibleAt
	}
	h.records = append(h.records, historyRecord{id: id, kind: kind, at: now, visibleAt: vis,
		msgID: m.ID, threadID: m.ThreadID, msgLabels: slices.Clone(msgLabels), changed: changed})
}

// historyAddedLocked records m's arrival under its historyId.
func (s *Server) historyAddedLocked(m *stored) {
	s.recordLocked(m, HistoryMessageAdded, m.historyID, m.LabelIDs, nil)
}

// historyChangedLocked records what a trash, untrash or delete changed in
// m (before: its labels before; wasDeleted: whether it was deleted before)
// and gives m the new historyId. Nothing changed, nothing is recorded.
func (s *Server) historyChangedLocked(m *stored, before []string, wasDeleted bool) {
	if m.Deleted && !wasDeleted {
		m.historyID = s.nextCounterLocked()
		s.recordLocked(m, HistoryMessageDeleted, m.historyID, before, nil)
		return
	}
	var added, removed []string
	for _, l := range m.LabelIDs {
		if !slices.Contains(before, l) {
			added = append(added, l)
		}
	}
	for _, l := range before {
		if !slices.Contains(m.LabelIDs, l) {
			removed = append(removed, l)
		}
	}
	if len(added) > 0 {
		m.historyID = s.nextCounterLocked()
		s.recordLocked(m, HistoryLabelAdded, m.historyID, m.LabelIDs, added)
	}
	if len(removed) > 0 {
		m.historyID = s.nextCounterLocked()
		s.recordLocked(m, HistoryLabelRemoved, m.historyID, m.LabelIDs, removed)
	}
}

// pruneHistoryLocked drops a's listable records older than the retention.
func (s *Server) pruneHistoryLocked(a *account, now time.Time) {
	h := &a.history
	cut := now.Add(-s.hist.retention)
	i := 0
	for i < len(h.records) && h.records[i].at.Before(cut) && !h.records[i].visibleAt.After(now) {
		h.floor = h.records[i].id
		i++
	}
	if i > 0 {
		h.records = slices.Delete(h.records, 0, i)
	}
}

// horizonLocked is the historyId a's history answers at now: the id of the
// last listable record (or the floor), never past a lagging one.
func (s *Server) horizonLocked(a *account, now time.Time) uint64 {
	h := a.history.floor
	for _, r := range a.history.records {
		if r.visibleAt.After(now) {
			break
		}
		h = r.id
	}
	return h
}

// HistoryID returns the current historyId of account ("" = the primary):
// the id of its latest history record, lagging or not (ground truth; what
// history.list and users.getProfile answer may be earlier while records
// lag). An address the emulator does not serve has 0.
func (s *Server) HistoryID(account string) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deliverDueLocked(s.now())
	a := s.accounts[0]
	if account != "" {
		var ok bool
		if a, ok = s.byAddr[strings.ToLower(account)]; !ok {
			return 0
		}
	}
	if n := len(a.history.records); n > 0 {
		return a.history.records[n-1].id
	}
	return a.history.floor
}

// SetHistoryLag switches to a fixed history lag for later records.
func (s *Server) SetHistoryLag(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hist.lag = max(d, 0)
	s.hist.lagDist = LagDistribution{}
}

// SetHistoryLagDistribution draws the history lag of later records from d
// (a zero d returns to the fixed lag).
func (s *Server) SetHistoryLagDistribution(d LagDistribution) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hist.lagDist = d
}

// SetHistoryRetention changes how long records are kept (0 means
// DefaultHistoryRetention); it applies at the next history call.
func (s *Server) SetHistoryRetention(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d <= 0 {
		d = DefaultHistoryRetention
	}
	s.hist.retention = d
}

// profileJSON is Gmail's Profile resource.
type profileJSON struct {
	EmailAddress  string `json:"emailAddress"`
	MessagesTotal int    `json:"messagesTotal"`
	ThreadsTotal  int    `json:"threadsTotal"`
	HistoryID     string `json:"historyId"`
}

// profile serves users.getProfile: the address, the messages and threads
// the mailbox holds (trashed ones included, deleted ones not) and the
// historyId a history listing would answer now.
func (s *Server) profile(_ *http.Request, a *account, _ appliedFault) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.pruneHistoryLocked(a, now)
	threads := map[string]bool{}
	n := 0
	for _, m := range a.msgs {
		if !m.Deleted {
			n++
			threads[m.ThreadID] = true
		}
	}
	return profileJSON{EmailAddress: a.addr, MessagesTotal: n, ThreadsTotal: len(threads),
		HistoryID: strconv.FormatUint(s.horizonLocked(a, now), 10)}, nil
}

// historyResponse is Gmail's ListHistoryResponse.
type historyResponse struct {
	History       []historyJSON `json:"history,omitempty"`
	NextPageToken string        `json:"nextPageToken,omitempty"`
	HistoryID     string        `json:"historyId"`
}

type historyJSON struct {
	ID              string           `json:"id"`
	Messages        []listItem       `json:"messages"`
	MessagesAdded   []historyMessage `json:"messagesAdded,omitempty"`
	MessagesDeleted []historyMessage `json:"messagesDeleted,omitempty"`
	LabelsAdded     []historyLabels  `json:"labelsAdded,omitempty"`
	LabelsRemoved   []historyLabels  `json:"labelsRemoved,omitempty"`
}

type historyMessage struct {
	Message messageJSON `json:"message"`
}

type historyLabels struct {
	Message  messageJSON `json:"message"`
	LabelIDs []string    `json:"labelIds"`
}

func (r historyRecord) json() historyJSON {
	out := historyJSON{ID: strconv.FormatUint(r.id, 10), Messages: []listItem{{ID: r.msgID, ThreadID: r.threadID}}}
	msg := messageJSON{ID: r.msgID, ThreadID: r.threadID, LabelIDs: r.msgLabels}
	switch r.kind {
	case HistoryMessageAdded:
		out.MessagesAdded = []historyMessage{{msg}}
	case HistoryMessageDeleted:
		out.MessagesDeleted = []historyMessage{{messageJSON{ID: r.msgID, ThreadID: r.threadID}}}
	case HistoryLabelAdded:
		out.LabelsAdded = []historyLabels{{msg, r.changed}}
	case HistoryLabelRemoved:
		out.LabelsRemoved = []historyLabels{{msg, r.changed}}
	}
	return out
}

// matches reports whether r is listed under labelID ("" = any) and types
// (empty = any): a record touches a label when the message carries it or
// the change added or removed it.
func (r historyRecord) matches(labelID string, types []string) bool {
	if len(types) > 0 && !slices.Contains(types, r.kind) {
		return false
	}
	if labelID == "" {
		return true
	}
	eq := func(l string) bool { return strings.EqualFold(l, labelID) }
	return slices.ContainsFunc(r.msgLabels, eq) || slices.ContainsFunc(r.changed, eq)
}

// historyQuery is a history.list call's parameters.
type historyQuery struct {
	start, after uint64
	limit        int
	labelID      string
	types        []string
}

// parseHistoryQuery reads history.list's parameters; a bad one answers 400
// naming it (a missing or zero startHistoryId as Gmail words it).
func parseHistoryQuery(r *http.Request) (historyQuery, *apiError) {
	q := r.URL.Query()
	hq := historyQuery{limit: defaultMaxResults, labelID: q.Get("labelId")}
	start, err := strconv.ParseUint(strings.TrimSpace(q.Get("startHistoryId")), 10, 64)
	if err != nil || start == 0 {
		return hq, invalidParam("startHistoryId", "Missing/invalid parameter: startHistoryId")
	}
	hq.start, hq.after = start, start
	if v := q.Get("maxResults"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return hq, invalidParam("maxResults", "Invalid maxResults: "+strconv.Quote(v))
		}
		if n > 0 {
			hq.limit = min(n, maxMaxResults)
		}
	}
	if v := q.Get("pageToken"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n == 0 {
			return hq, invalidParam("pageToken", "Invalid pageToken")
		}
		hq.after = max(hq.after, n)
	}
	for _, v := range q["historyTypes"] {
		i := slices.IndexFunc(historyTypeNames, func(n string) bool {
			return strings.EqualFold(n, v) || strings.EqualFold(strings.ReplaceAll(v, "_", ""), n)
		})
		if i < 0 {
			return hq, invalidParam("historyTypes", "Invalid value for historyTypes: "+strconv.Quote(v)+
				" (want "+strings.Join(historyTypeNames, ", ")+")")
		}
		hq.types = append(hq.types, historyTypeNames[i])
	}
	return hq, nil
}

// historyList serves users.history.list for a: the listable records after
// startHistoryId (and after pageToken, the last record of the previous
// page), oldest first, filtered by labelId and historyTypes, and the
// historyId of the listable history, never below startHistoryId.
func (s *Server) historyList(r *http.Request, a *account, _ appliedFault) (any, *apiError) {
	hq, e := parseHistoryQuery(r)
	if e != nil {
		return nil, e
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.pruneHistoryLocked(a, now)
	if hq.start < a.history.floor || hq.start > s.counter {
		return nil, notFound() // out of date, or never handed out
	}
	resp := historyResponse{}
	horizon := a.history.floor
	for _, rec := range a.history.records {
		if rec.visibleAt.After(now) {
			break // records turn listable in order: none after this one is
		}
		horizon = rec.id
		if rec.id <= hq.after || resp.NextPageToken != "" || !rec.matches(hq.labelID, hq.types) {
			continue
		}
		if len(resp.History) == hq.limit {
			resp.NextPageToken = resp.History[len(resp.History)-1].ID
			continue
		}
		resp.History = append(resp.History, rec.json())
	}
	resp.HistoryID = strconv.FormatUint(max(hq.start, horizon), 10)
	return resp, nil
}
