package gmailfake

import (
	"encoding/base64"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// listResponse is Gmail's ListMessagesResponse; messages is omitted when
// nothing matches.
type listResponse struct {
	Messages           []listItem `json:"messages,omitempty"`
	NextPageToken      string     `json:"nextPageToken,omitempty"`
	ResultSizeEstimate int        `json:"resultSizeEstimate"`
}

type listItem struct {
	ID       string `json:"id"`
	ThreadID string `json:"threadId"`
}

const (
	defaultMaxResults = 100
	maxMaxResults     = 500
)

func invalidParam(location, msg string) *apiError {
	return &apiError{code: http.StatusBadRequest, reason: "invalidArgument", domain: "global", location: location, message: msg}
}

// list serves messages.list for a. Messages labelled TRASH or SPAM are left
// out unless includeSpamTrash=true (Gmail's discovery document); a q the
// emulator cannot parse answers an empty list, as Gmail does for queries it
// cannot match, unless Options.StrictQueries.
func (s *Server) list(r *http.Request, a *account, _ appliedFault) (any, *apiError) {
	q := r.URL.Query()
	limit := defaultMaxResults
	if v := q.Get("maxResults"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return nil, invalidParam("maxResults", "Invalid maxResults: "+strconv.Quote(v))
		}
		if n > 0 {
			limit = min(n, maxMaxResults)
		}
	}
	var after uint64
	if v := q.Get("pageToken"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n == 0 {
			return nil, invalidParam("pageToken", "Invalid pageToken")
		}
		after = n
	}
	spamTrash := false
	if v := q.Get("includeSpamTrash"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return nil, invalidParam("includeSpamTrash", "Invalid includeSpamTrash: "+strconv.Quote(v))
		}
		spamTrash = b
	}
	node, err := parseQuery(q.Get("q"))
	s.mu.Lock()
	strict := s.strict
	s.mu.Unlock()
	if err != nil {
		if strict {
			return nil, invalidParam("q", "Invalid query: "+strings.TrimPrefix(err.Error(), errQuery.Error()+": "))
		}
		return listResponse{}, nil
	}
	labels := q["labelIds"]

	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	var resp listResponse
	var lastSeq uint64
	for i := len(a.msgs) - 1; i >= 0; i-- { // newest first, as Gmail lists
		m := a.msgs[i]
		if m.Deleted || !s.visibleLocked(m, now) || !hasLabels(m, labels) || !node.match(m) {
			continue
		}
		if !spamTrash && slices.ContainsFunc(m.LabelIDs, func(l string) bool { return l == labelTrash || l == labelSpam }) {
			continue
		}
		// The estimate counts every match, whichever page is asked for.
		resp.ResultSizeEstimate++
		switch {
		case after != 0 && m.seq >= after: // on an earlier page
		case len(resp.Messages) < limit:
			resp.Messages = append(resp.Messages, listItem{ID: m.ID, ThreadID: m.ThreadID})
			lastSeq = m.seq
		default: // a later page exists: it starts below this page's last message
			resp.NextPageToken = strconv.FormatUint(lastSeq, 10)
		}
	}
	return resp, nil
}

func hasLabels(m *stored, want []string) bool {
	for _, w := range want {
		if !slices.ContainsFunc(m.LabelIDs, func(l string) bool { return strings.EqualFold(l, w) }) {
			return false
		}
	}
	return true
}

// lookupLocked finds a's message id for a Gmail call: 400 for an id that is
// not one, 404 for one a does not hold (or that was deleted).
func (s *Server) lookupLocked(a *account, id string) (*stored, *apiError) {
	if !isHex(id) {
		return nil, invalidParam("id", "Invalid id value")
	}
	m, ok := s.byID[id]
	if !ok || m.acct != a || m.Deleted {
		return nil, notFound()
	}
	return m, nil
}

func (s *Server) get(r *http.Request, a *account, _ appliedFault) (any, *apiError) {
	q := r.URL.Query()
	format := q.Get("format")
	if format == "" {
		format = "full"
	}
	switch format {
	case "minimal", "metadata", "raw", "full":
	default:
		return nil, invalidParam("format", "Invalid value for format: "+strconv.Quote(format))
	}
	s.mu.Lock()
	m, e := s.lookupLocked(a, r.PathValue("id"))
	var c Message
	var historyID uint64
	if e == nil {
		c, historyID = s.snapshotLocked(m), m.historyID
	}
	s.mu.Unlock()
	if e != nil {
		return nil, e
	}
	out := messageJSON{
		ID:           c.ID,
		ThreadID:     c.ThreadID,
		LabelIDs:     c.LabelIDs,
		SizeEstimate: len(c.Raw),
		HistoryID:    strconv.FormatUint(historyID, 10),
		InternalDate: strconv.FormatInt(c.StoredAt.UnixMilli(), 10),
	}
	msg := parseRFC822(c.Raw)
	payload, snippet := buildPayload(msg)
	out.Snippet = snippet
	switch format {
	case "raw":
		out.Raw = base64.URLEncoding.EncodeToString(c.Raw)
	case "metadata":
		payload.Body, payload.Parts = nil, nil
		if want := q["metadataHeaders"]; len(want) > 0 {
			payload.Headers = slices.DeleteFunc(payload.Headers, func(h messageHeader) bool {
				return !slices.ContainsFunc(want, func(w string) bool { return strings.EqualFold(w, h.Name) })
			})
		}
		out.Payload = payload
	case "full":
		out.Payload = payload
	}
	return out, nil
}

// trash serves messages.trash: the message gains TRASH and keeps its other
// labels (a trashed sent message keeps SENT).
func (s *Server) trash(r *http.Request, a *account, _ appliedFault) (any, *apiError) {
	return s.setTrash(a, r.PathValue("id"), true)
}

// untrash serves messages.untrash: TRASH is removed.
func (s *Server) untrash(r *http.Request, a *account, _ appliedFault) (any, *apiError) {
	return s.setTrash(a, r.PathValue("id"), false)
}

func (s *Server) setTrash(a *account, id string, trash bool) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, e := s.lookupLocked(a, id)
	if e != nil {
		return nil, e
	}
	before := slices.Clone(m.LabelIDs)
	setTrashLocked(m, trash)
	s.historyChangedLocked(m, before, false)
	return messageJSON{ID: m.ID, ThreadID: m.ThreadID, LabelIDs: slices.Clone(m.LabelIDs), HistoryID: strconv.FormatUint(m.historyID, 10)}, nil
}

// delete serves messages.delete: the message is gone from list and get
// (404) at once; the ground truth keeps it, marked deleted. 204, no body.
func (s *Server) delete(r *http.Request, a *account, _ appliedFault) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, e := s.lookupLocked(a, r.PathValue("id"))
	if e != nil {
		return nil, e
	}
	m.Deleted = true
	s.historyChangedLocked(m, m.LabelIDs, false)
	return noContent{}, nil
}

func isHex(s string) bool {
	if s == "" || len(s) > 32 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}
