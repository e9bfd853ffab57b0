package gmailfake

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Handler serves Gmail's paths (/gmail/v1/users/{userId}/messages…, the
// upload path /upload/gmail/v1/users/{userId}/messages/send) and the control
// API under /_emulator/. Every other path answers Gmail's 404 error JSON.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/gmail/v1/users/{userId}/messages/send", s.gmailCall(http.MethodPost, MethodSend, CostSend, s.send))
	mux.HandleFunc("/upload/gmail/v1/users/{userId}/messages/send", s.gmailCall(http.MethodPost, MethodSend, CostSend, s.uploadSend))
	mux.HandleFunc("/gmail/v1/users/{userId}/messages", s.gmailCall(http.MethodGet, MethodList, CostList, s.list))
	mux.HandleFunc("/gmail/v1/users/{userId}/messages/{id}", s.gmailCall(http.MethodGet, MethodGet, CostGet, s.get))
	s.controlRoutes(mux)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeAPIError(w, &apiError{code: http.StatusNotFound, reason: "notFound", domain: "global",
			message: "The emulator does not serve " + r.Method + " " + r.URL.Path})
	})
	return mux
}

// gmailHandler serves one Gmail call after authentication, quota and fault
// selection. It returns the answer body, or an error.
type gmailHandler func(r *http.Request, f appliedFault) (any, *apiError)

// gmailCall wraps a Gmail method: method check, call count, bearer token,
// userId, quota, injected faults and latency, in Gmail's order.
func (s *Server) gmailCall(httpMethod, method string, cost int, h gmailHandler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != httpMethod {
			writeAPIError(w, &apiError{code: http.StatusMethodNotAllowed, reason: "badRequest", domain: "global",
				message: "Method " + r.Method + " is not allowed here; use " + httpMethod})
			return
		}
		s.mu.Lock()
		s.calls[method]++
		latency := s.latency
		s.mu.Unlock()

		if e := s.checkAuth(r); e != nil {
			s.answer(w, r, latency, nil, e)
			return
		}
		if e := s.checkUser(r.PathValue("userId")); e != nil {
			s.answer(w, r, latency, nil, e)
			return
		}
		s.mu.Lock()
		ok, retryAfter := s.takeQuotaLocked(cost)
		var f appliedFault
		if ok {
			s.units += cost
			f = s.pickFaultsLocked(method)
		} else {
			s.rateLimited++
		}
		quotaStatus := s.quotaStatus
		s.mu.Unlock()
		if !ok {
			s.answer(w, r, latency, nil, rateLimited(quotaStatus, retryAfter))
			return
		}
		latency += f.latency
		if f.action == ActionError {
			s.answer(w, r, latency, nil, errorForStatus(f.status))
			return
		}
		body, e := h(r, f)
		if e == nil && f.action == ActionAcceptThenError {
			body, e = nil, errorForStatus(f.status)
		}
		s.answer(w, r, latency, body, e)
	}
}

// answer writes the result after the latency; when the client goes away
// first, nothing is written (whatever the call did stands).
func (s *Server) answer(w http.ResponseWriter, r *http.Request, latency time.Duration, body any, e *apiError) {
	if !sleepCtx(r.Context(), latency) {
		return
	}
	if e != nil {
		writeAPIError(w, e)
		return
	}
	writeJSON(w, http.StatusOK, body)
}

func (s *Server) checkAuth(r *http.Request) *apiError {
	if s.token == "" {
		return nil
	}
	scheme, tok, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	if strings.EqualFold(scheme, "Bearer") && strings.TrimSpace(tok) == s.token {
		return nil
	}
	return &apiError{code: http.StatusUnauthorized, reason: "authError", domain: "global",
		message: "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential."}
}

func (s *Server) checkUser(userID string) *apiError {
	if userID == "me" || strings.EqualFold(userID, s.account) {
		return nil
	}
	return &apiError{code: http.StatusForbidden, reason: "forbidden", domain: "global",
		message: "Delegation denied for " + s.account}
}

func rateLimited(status, retryAfter int) *apiError {
	until := strconv.Itoa(retryAfter) + "s"
	if status == http.StatusForbidden {
		return &apiError{code: status, reason: "userRateLimitExceeded", domain: "usageLimits", retryAfter: retryAfter,
			message: "User-rate limit exceeded. Retry after " + until}
	}
	return &apiError{code: http.StatusTooManyRequests, reason: "rateLimitExceeded", domain: "usageLimits", retryAfter: retryAfter,
		message: "User-rate limit exceeded. Retry after " + until}
}

// maxSendBody bounds the metadata-path JSON body: a 35 MB message in
// base64, plus room for the JSON around it.
const maxSendBody = (maxMessageBytes+2)/3*4 + 1<<20

// sendRequest is the Message resource a send carries.
type sendRequest struct {
	Raw      string `json:"raw"`
	ThreadID string `json:"threadId"`
}

// messageJSON is Gmail's Message resource. historyId and internalDate are
// JSON strings, as Gmail sends them and as the Go client requires.
type messageJSON struct {
	ID           string       `json:"id"`
	ThreadID     string       `json:"threadId"`
	LabelIDs     []string     `json:"labelIds,omitempty"`
	Snippet      string       `json:"snippet,omitempty"`
	Payload      *messagePart `json:"payload,omitempty"`
	SizeEstimate int          `json:"sizeEstimate,omitempty"`
	HistoryID    string       `json:"historyId,omitempty"`
	InternalDate string       `json:"internalDate,omitempty"`
	Raw          string       `json:"raw,omitempty"`
}

func (s *Server) send(r *http.Request, f appliedFault) (any, *apiError) {
	body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, maxSendBody))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return nil, tooLarge()
		}
		return nil, badRequest("Could not read the request body")
	}
	var req sendRequest
	if len(strings.TrimSpace(string(body))) > 0 {
		if err := json.Unmarshal(body, &req); err != nil {
			return nil, badRequest("Invalid JSON payload received: " + err.Error())
		}
	}
	if req.Raw == "" {
		return nil, badRequest("'raw' RFC822 payload message string or uploading message via /upload/* URL required")
	}
	raw, err := decodeRaw(req.Raw)
	if err != nil {
		return nil, badRequest("Invalid value at 'message.raw' (TYPE_BYTES): " + err.Error())
	}
	return s.sendAnswer(raw, req.ThreadID, f)
}

func (s *Server) sendAnswer(raw []byte, threadID string, f appliedFault) (any, *apiError) {
	res, e := s.storeMessage(raw, threadID, f.action == ActionDuplicate)
	if e != nil {
		return nil, e
	}
	return messageJSON{ID: res.ID, ThreadID: res.ThreadID, LabelIDs: res.LabelIDs}, nil
}

// uploadSend serves /upload/gmail/v1/users/{userId}/messages/send with
// uploadType media (the body is the message) or multipart
// (multipart/related: JSON metadata, then the message). Resumable uploads
// are not emulated: 501.
func (s *Server) uploadSend(r *http.Request, f appliedFault) (any, *apiError) {
	switch t := r.URL.Query().Get("uploadType"); t {
	case "media":
		raw, e := readMedia(r.Body)
		if e != nil {
			return nil, e
		}
		if len(raw) == 0 {
			return nil, badRequest("Media upload has no content")
		}
		return s.sendAnswer(raw, "", f)
	case "multipart":
		return s.multipartSend(r, f)
	case "resumable":
		return nil, &apiError{code: http.StatusNotImplemented, reason: "notImplemented", domain: "global",
			message: "The Gmail emulator does not implement resumable uploads; send messages under the client's chunk size (16 MB by default) or with googleapi.ChunkSize(0)"}
	default:
		return nil, &apiError{code: http.StatusBadRequest, reason: "badRequest", domain: "global", location: "uploadType",
			message: "Invalid upload type " + strconv.Quote(t) + "; use media or multipart"}
	}
}

func readMedia(r io.Reader) ([]byte, *apiError) {
	raw, err := io.ReadAll(io.LimitReader(r, maxMessageBytes+1))
	if err != nil {
		return nil, badRequest("Could not read the upload")
	}
	if len(raw) > maxMessageBytes {
		return nil, tooLarge()
	}
	return raw, nil
}

func (s *Server) multipartSend(r *http.Request, f appliedFault) (any, *apiError) {
	mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || !strings.HasPrefix(mt, "multipart/") || params["boundary"] == "" {
		return nil, badRequest("Multipart upload needs a multipart/related body with a boundary")
	}
	mr := multipart.NewReader(r.Body, params["boundary"])
	meta, err := mr.NextRawPart()
	if err != nil {
		return nil, badRequest("Multipart upload: missing metadata part")
	}
	metaBody, err := io.ReadAll(io.LimitReader(meta, 1<<20))
	if err != nil {
		return nil, badRequest("Multipart upload: unreadable metadata part")
	}
	var req sendRequest
	if len(strings.TrimSpace(string(metaBody))) > 0 {
		if err := json.Unmarshal(metaBody, &req); err != nil {
			return nil, badRequest("Invalid JSON payload received in the metadata part: " + err.Error())
		}
	}
	media, err := mr.NextRawPart()
	if err != nil {
		return nil, badRequest("Multipart upload: missing media part")
	}
	raw, e := readMedia(media)
	if e != nil {
		return nil, e
	}
	if len(raw) == 0 {
		return nil, badRequest("Media upload has no content")
	}
	return s.sendAnswer(raw, req.ThreadID, f)
}

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

func (s *Server) list(r *http.Request, _ appliedFault) (any, *apiError) {
	q := r.URL.Query()
	limit := defaultMaxResults
	if v := q.Get("maxResults"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return nil, &apiError{code: http.StatusBadRequest, reason: "invalidArgument", domain: "global", location: "maxResults",
				message: "Invalid maxResults: " + strconv.Quote(v)}
		}
		if n > 0 {
			limit = min(n, maxMaxResults)
		}
	}
	var after uint64
	if v := q.Get("pageToken"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n == 0 {
			return nil, &apiError{code: http.StatusBadRequest, reason: "invalidArgument", domain: "global", location: "pageToken",
				message: "Invalid pageToken"}
		}
		after = n
	}
	if v := q.Get("includeSpamTrash"); v != "" {
		if _, err := strconv.ParseBool(v); err != nil {
			return nil, &apiError{code: http.StatusBadRequest, reason: "invalidArgument", domain: "global", location: "includeSpamTrash",
				message: "Invalid includeSpamTrash: " + strconv.Quote(v)}
		}
		// Every stored message is a sent one: nothing is in spam or trash.
	}
	node, err := parseQuery(q.Get("q"))
	if err != nil {
		return nil, &apiError{code: http.StatusBadRequest, reason: "invalidArgument", domain: "global", location: "q",
			message: "Invalid query: " + strings.TrimPrefix(err.Error(), errQuery.Error()+": ")}
	}
	labels := q["labelIds"]

	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	var resp listResponse
	var lastSeq uint64
	for i := len(s.msgs) - 1; i >= 0; i-- { // newest first, as Gmail lists
		m := s.msgs[i]
		if now.Before(m.StoredAt.Add(s.indexLag)) || !hasLabels(m, labels) || !node.match(m) {
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

func (s *Server) get(r *http.Request, _ appliedFault) (any, *apiError) {
	id := r.PathValue("id")
	q := r.URL.Query()
	format := q.Get("format")
	if format == "" {
		format = "full"
	}
	switch format {
	case "minimal", "metadata", "raw", "full":
	default:
		return nil, &apiError{code: http.StatusBadRequest, reason: "invalidArgument", domain: "global", location: "format",
			message: "Invalid value for format: " + strconv.Quote(format)}
	}
	if !isHex(id) {
		return nil, &apiError{code: http.StatusBadRequest, reason: "invalidArgument", domain: "global", location: "id",
			message: "Invalid id value"}
	}
	s.mu.Lock()
	m, ok := s.byID[id]
	var c stored
	if ok {
		c = *m // Raw is never modified once stored
	}
	s.mu.Unlock()
	if !ok {
		return nil, notFound()
	}
	out := messageJSON{
		ID:           c.ID,
		ThreadID:     c.ThreadID,
		LabelIDs:     c.LabelIDs,
		SizeEstimate: len(c.Raw),
		HistoryID:    strconv.FormatUint(c.historyID, 10),
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
