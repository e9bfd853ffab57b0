package gmailfake

import (
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

	"github.com/gmailrelay/gmailrelay/internal/lifecycle"
)

// Handler serves Gmail's paths (/gmail/v1/users/{userId}/messages…, the
// upload path /upload/gmail/v1/users/{userId}/messages/send) and the control
// API under /_emulator/. Every other path answers Gmail's 404 error JSON.
// Every answer is dated by the emulator's clock (Options.Now), as Gmail's
// are by its own (RFC 9110's Date header): the relay bounds Gmail's clock
// offset from it.
func (s *Server) Handler() http.Handler {
	mux := s.routes()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Date", s.now().UTC().Format(http.TimeFormat))
		mux.ServeHTTP(w, r)
	})
}

func (s *Server) routes() *http.ServeMux {
	mux := http.NewServeMux()
	const msgs = "/gmail/v1/users/{userId}/messages"
	mux.HandleFunc(msgs+"/send", s.gmailCall(route{http.MethodPost: {MethodSend, s.send}}))
	mux.HandleFunc("/upload"+msgs+"/send", s.gmailCall(route{http.MethodPost: {MethodSend, s.uploadSend}}))
	mux.HandleFunc(msgs, s.gmailCall(route{http.MethodGet: {MethodList, s.list}}))
	mux.HandleFunc(msgs+"/{id}", s.gmailCall(route{http.MethodGet: {MethodGet, s.get}, http.MethodDelete: {MethodDelete, s.delete}}))
	mux.HandleFunc(msgs+"/{id}/trash", s.gmailCall(route{http.MethodPost: {MethodTrash, s.trash}}))
	mux.HandleFunc(msgs+"/{id}/untrash", s.gmailCall(route{http.MethodPost: {MethodUntrash, s.untrash}}))
	mux.HandleFunc("/gmail/v1/users/{userId}/settings/sendAs", s.gmailCall(route{http.MethodGet: {MethodSendAs, s.sendAsList}}))
	mux.HandleFunc("/gmail/v1/users/{userId}/history", s.gmailCall(route{http.MethodGet: {MethodHistory, s.historyList}}))
	mux.HandleFunc("/gmail/v1/users/{userId}/profile", s.gmailCall(route{http.MethodGet: {MethodProfile, s.profile}}))
	s.controlRoutes(mux)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeAPIError(w, &apiError{code: http.StatusNotFound, reason: "notFound", domain: "global",
			message: "The emulator does not serve " + r.Method + " " + r.URL.Path})
	})
	return mux
}

// gmailHandler serves one Gmail call for account a after authentication,
// quota and fault selection. It returns the answer body (noContent for 204),
// or an error.
type gmailHandler func(r *http.Request, a *account, f appliedFault) (any, *apiError)

// noContent is the body of an answer without one (messages.delete: 204).
type noContent struct{}

// route maps an HTTP method to the Gmail method that serves it.
type route map[string]struct {
	method string
	h      gmailHandler
}

// gmailCall wraps the Gmail methods of one path: method check, call count,
// bearer token, userId, quota, injected faults and latency, in Gmail's
// order.
func (s *Server) gmailCall(rt route) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		m, ok := rt[r.Method]
		if !ok {
			allowed := make([]string, 0, len(rt))
			for k := range rt {
				allowed = append(allowed, k)
			}
			slices.Sort(allowed)
			writeAPIError(w, &apiError{code: http.StatusMethodNotAllowed, reason: "badRequest", domain: "global",
				message: "Method " + r.Method + " is not allowed here; use " + strings.Join(allowed, " or ")})
			return
		}
		cost := s.costs[m.method]
		s.mu.Lock()
		s.deliverDueLocked(s.now()) // reports that fell due arrive before the call sees the mailbox
		latency := s.latency
		a, e := s.resolveAccount(r, r.PathValue("userId"))
		if e != nil {
			s.unattributed.call(m.method)
			s.mu.Unlock()
			s.answer(w, r, latency, nil, e)
			return
		}
		a.counters.call(m.method)
		ok, wait := s.takeQuotaLocked(a, cost)
		var f appliedFault
		if ok {
			a.counters.units += cost
			f = s.pickFaultsLocked(m.method, a.addr)
		} else {
			a.counters.rateLimited++
			e = rateLimited(s.quotaStatus, s.now(), wait, s.header)
		}
		s.mu.Unlock()
		if e != nil {
			s.answer(w, r, latency, nil, e)
			return
		}
		latency += f.latency
		if f.action == ActionError {
			s.answer(w, r, latency, nil, errorForStatus(f.status))
			return
		}
		body, e := m.h(r, a, f)
		if e == nil && f.action == ActionAcceptThenError {
			body, e = nil, errorForStatus(f.status)
		}
		s.answer(w, r, latency, body, e)
	}
}

// answer writes the result after the latency; when the client goes away
// first, nothing is written (whatever the call did stands).
func (s *Server) answer(w http.ResponseWriter, r *http.Request, latency time.Duration, body any, e *apiError) {
	if !lifecycle.Sleep(r.Context(), latency) {
		return
	}
	if e != nil {
		writeAPIError(w, e)
		return
	}
	if _, ok := body.(noContent); ok {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	writeJSON(w, http.StatusOK, body)
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

func (s *Server) send(r *http.Request, a *account, f appliedFault) (any, *apiError) {
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
	return s.sendAnswer(a, raw, req.ThreadID, f)
}

func (s *Server) sendAnswer(a *account, raw []byte, threadID string, f appliedFault) (any, *apiError) {
	res, e := s.storeMessage(a, raw, threadID, f.action == ActionDuplicate)
	if e != nil {
		return nil, e
	}
	return messageJSON{ID: res.ID, ThreadID: res.ThreadID, LabelIDs: res.LabelIDs, HistoryID: strconv.FormatUint(res.HistoryID, 10)}, nil
}

// uploadSend serves /upload/gmail/v1/users/{userId}/messages/send with
// uploadType media (the body is the message) or multipart
// (multipart/related: JSON metadata, then the message). Resumable uploads
// are not emulated: 501.
func (s *Server) uploadSend(r *http.Request, a *account, f appliedFault) (any, *apiError) {
	switch t := r.URL.Query().Get("uploadType"); t {
	case "media":
		raw, e := readMedia(r.Body)
		if e != nil {
			return nil, e
		}
		if len(raw) == 0 {
			return nil, badRequest("Media upload has no content")
		}
		return s.sendAnswer(a, raw, "", f)
	case "multipart":
		return s.multipartSend(r, a, f)
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

func (s *Server) multipartSend(r *http.Request, a *account, f appliedFault) (any, *apiError) {
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
	return s.sendAnswer(a, raw, req.ThreadID, f)
}
