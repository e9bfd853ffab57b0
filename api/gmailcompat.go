package api

import (
	"bytes"
	"encoding/json"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/relay"
)

// The Gmail-compatible send path: a client that targets Gmail (an n8n HTTP
// Request node, Google's own client library) only changes its base URL.
// The job key is the raw message's own Message-ID.

// gmailMessage is the subset of Gmail's Message resource the path reads
// and answers. Relay carries the relay's view on 202 answers.
type gmailMessage struct {
	ID       string      `json:"id,omitempty"`
	ThreadID string      `json:"threadId,omitempty"`
	LabelIDs []string    `json:"labelIds,omitempty"`
	Raw      string      `json:"raw,omitempty"`
	Relay    *sendAnswer `json:"relay,omitempty"`
}

var gmailStatus = map[int]string{
	400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
	405: "UNIMPLEMENTED", 408: "DEADLINE_EXCEEDED", 409: "ABORTED", 413: "INVALID_ARGUMENT", 415: "INVALID_ARGUMENT", 422: "FAILED_PRECONDITION", 429: "RESOURCE_EXHAUSTED",
	500: "INTERNAL", 502: "UNAVAILABLE", 503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED",
}

var gmailReason = map[relay.Code]string{
	relay.CodeInvalid: "invalidArgument", relay.CodeUnauthorized: "authError", relay.CodeForbidden: "forbidden",
	relay.CodeNotFound: "notFound", relay.CodeInFlight: "conflict", relay.CodeConflict: "conflict", relay.CodeReservedMessageID: "conflict", relay.CodeMessageIDConflict: "conflict",
	relay.CodeTooLarge: "invalidArgument", codeUnsupportedType: "badContent", relay.CodeMismatch: "failedPrecondition",
	relay.CodeFromNotVerified: "invalidArgument", relay.CodeRateLimited: "rateLimitExceeded", relay.CodeProviderRejected: "backendError",
	relay.CodeUnavailable: "backendError", relay.CodeFaultDropped: "backendError", relay.CodeInternal: "backendError",
	codeMethodNotAllowed: "httpMethodNotAllowed", codeBodyTimeout: "requestTimeout",
}

// writeGmailError answers in Gmail's error JSON, so Google's client
// returns its error type with Code and Errors[0].Reason (which package
// gmailapi turns into a *relay.ProviderError). It is answerError's Gmail
// shape: internal errors are logged as on the relay's own surface.
func writeGmailError(w http.ResponseWriter, r *http.Request, err error) {
	answerError(w, r, err, gmailShape, "", "")
}

// gmailErrorBody is Gmail's error JSON for re, answered with status; msg
// is what the client may see.
func gmailErrorBody(re *relay.Error, status int, msg string) any {
	if re.Field != "" {
		msg += " (field " + re.Field + ")"
	}
	return map[string]any{"error": map[string]any{
		"code": status, "message": msg, "status": gmailStatus[status],
		"errors": []map[string]string{{"message": msg, "domain": "global", "reason": gmailReason[re.Code]}},
	}}
}

func (s *Server) gmailSend(w http.ResponseWriter, r *http.Request) {
	start := s.timingStart()
	body, err := readBody(r, MaxJSONBytes)
	if err != nil {
		writeGmailError(w, r, err)
		return
	}
	// A body rawOnly reads is printable ASCII holding one key, so
	// CheckJSON has nothing to refuse in it (FuzzRawOnly checks that):
	// only other bodies pay for its scan and its maps.
	m, ok := rawOnly(body)
	if !ok {
		if err := CheckJSON(body); err != nil {
			writeGmailError(w, r, err)
			return
		}
		// Into a variable of this branch: &m would move m to the heap on
		// every send.
		var full gmailMessage
		if err := json.Unmarshal(body, &full); err != nil {
			writeGmailError(w, r, jsonError(body, err))
			return
		}
		m = full
	}
	if m.Raw == "" {
		writeGmailError(w, r, relay.Invalid("raw", "'raw' RFC822 payload message string or uploading message via /upload/* URL required"))
		return
	}
	raw, err := relay.DecodeRaw(m.Raw)
	if err != nil {
		writeGmailError(w, r, err)
		return
	}
	s.gmailSendRaw(w, r, start, raw, m.ThreadID)
}

// rawOnly reads the body Google's client sends for Message{Raw}:
// {"raw":"…"} (and a newline), the value a plain string (plainString),
// without encoding/json's decoder; ok is false for any other body, which
// json.Unmarshal then reads. It gives what json.Unmarshal would.
func rawOnly(body []byte) (gmailMessage, bool) {
	rest, ok := bytes.CutPrefix(body, []byte(`{"raw":`))
	if !ok {
		return gmailMessage{}, false
	}
	rest = bytes.TrimRight(rest, " \t\r\n")
	rest, ok = bytes.CutSuffix(rest, []byte("}"))
	if !ok {
		return gmailMessage{}, false
	}
	v, ok := plainString(rest)
	return gmailMessage{Raw: v}, ok
}

// writeGmailSent answers a sent job as writeJSON(w, 200, gmailMessage{…})
// does, byte for byte, without the encoder (TestWriteGmailSentIsWriteJSON);
// ids that are not plain strings go through writeJSON.
func writeGmailSent(w http.ResponseWriter, j gmailrelay.Job) {
	b := make([]byte, 0, 64+len(j.GmailID)+len(j.ThreadID)+16*len(j.LabelIDs))
	b = append(b, '{')
	sep := false
	field := func(name, v string) bool {
		if v == "" {
			return true
		}
		if !plainText(v) {
			return false
		}
		if sep {
			b = append(b, ',')
		}
		sep = true
		b = append(append(append(append(b, '"'), name...), `":"`...), v...)
		b = append(b, '"')
		return true
	}
	ok := field("id", j.GmailID) && field("threadId", j.ThreadID)
	if ok && len(j.LabelIDs) > 0 {
		if sep {
			b = append(b, ',')
		}
		b = append(b, `"labelIds":[`...)
		for i, l := range j.LabelIDs {
			if !plainText(l) {
				ok = false
				break
			}
			if i > 0 {
				b = append(b, ',')
			}
			b = append(append(append(b, '"'), l...), '"')
		}
		b = append(b, ']')
	}
	if !ok {
		writeJSON(w, http.StatusOK, gmailMessage{ID: j.GmailID, ThreadID: j.ThreadID, LabelIDs: j.LabelIDs})
		return
	}
	b = append(b, "}\n"...)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
}

// plainText reports whether encoding/json writes s as it is between
// quotes (printable ASCII, no quote or backslash; HTML escaping is off).
func plainText(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '\\' || c == '"' || c < 0x20 || c >= 0x80 {
			return false
		}
	}
	return true
}

func (s *Server) gmailUpload(w http.ResponseWriter, r *http.Request) {
	start := s.timingStart()
	switch t := r.URL.Query().Get("uploadType"); t {
	case "media":
		raw, err := readBody(r, relay.MaxMessageBytes)
		if err != nil {
			writeGmailError(w, r, err)
			return
		}
		s.gmailSendRaw(w, r, start, raw, "")
	case "multipart":
		meta, raw, err := readMultipartRelated(r)
		if err != nil {
			writeGmailError(w, r, err)
			return
		}
		s.gmailSendRaw(w, r, start, raw, meta.ThreadID)
	case "resumable":
		writeGmailError(w, r, &relay.Error{Code: relay.CodeInvalid, Field: "uploadType",
			Message: "resumable uploads are not supported by the relay; send messages under 35 MB with uploadType=multipart"})
	default:
		writeGmailError(w, r, relay.Invalid("uploadType", "uploadType must be media or multipart, not %q", t))
	}
}

// readMultipartRelated reads Gmail's multipart/related upload: the JSON
// metadata part, then the message.
func readMultipartRelated(r *http.Request) (gmailMessage, []byte, error) {
	var meta gmailMessage
	ct, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || !strings.HasPrefix(ct, "multipart/") || params["boundary"] == "" {
		return meta, nil, relay.Invalid("Content-Type", "uploadType=multipart needs a multipart/related body with a boundary")
	}
	body, err := readBody(r, relay.MaxMessageBytes+1<<20)
	if err != nil {
		return meta, nil, err
	}
	mr := multipart.NewReader(bytes.NewReader(body), params["boundary"])
	part, err := mr.NextPart()
	if err != nil {
		return meta, nil, relay.Invalid("body", "multipart body has no metadata part: %v", err)
	}
	mb, err := io.ReadAll(part)
	if err != nil {
		return meta, nil, relay.Invalid("body", "read metadata part: %v", err)
	}
	if len(bytes.TrimSpace(mb)) > 0 {
		if err := CheckJSON(mb); err != nil {
			return meta, nil, err
		}
		if err := json.Unmarshal(mb, &meta); err != nil {
			return meta, nil, relay.Invalid("body", "metadata part is not JSON: %v", err)
		}
	}
	part, err = mr.NextPart()
	if err != nil {
		return meta, nil, relay.Invalid("body", "multipart body has no message part: %v", err)
	}
	raw, err := io.ReadAll(part)
	if err != nil {
		return meta, nil, relay.Invalid("body", "read message part: %v", err)
	}
	return meta, raw, nil
}

// gmailSendRaw sends raw with threadID, the JSON body's or the metadata
// part's threadId ("" for none), which is checked as /v1/send checks
// thread_id: it is stored with the job and handed to Gmail.
func (s *Server) gmailSendRaw(w http.ResponseWriter, r *http.Request, start time.Time, raw []byte, threadID string) {
	if err := relay.CheckThreadID("threadId", threadID); err != nil {
		writeGmailError(w, r, err)
		return
	}
	// Idempotency-Key only claims a Message-ID of the relay's own shape
	// (PrepareRawClaim); otherwise the key is the message's Message-ID.
	p, err := s.ids.PrepareRawClaim(raw, r.Header.Get("Idempotency-Key"), channelOf(r))
	if err != nil {
		writeGmailError(w, r, err)
		return
	}
	p.ThreadID = threadID
	if p.Mailbox, err = s.userMailbox(r); err != nil {
		writeGmailError(w, r, err)
		return
	}
	queue, err := whenBusyHeader(r, false)
	if err != nil {
		writeGmailError(w, r, err)
		return
	}
	s.run(w, r, start, p, queue, writeGmailError, s.writeGmailAnswer)
}

// writeGmailAnswer answers like Gmail: its Message JSON on 200, its error
// JSON on failures; a job the relay owns (202) carries the relay's view.
func (s *Server) writeGmailAnswer(w http.ResponseWriter, r *http.Request, res relay.Result) {
	switch j := res.Job; j.State {
	case gmailrelay.StateSent:
		writeGmailSent(w, j)
	case gmailrelay.StateFailed:
		writeGmailError(w, r, failureError(j, res))
	default:
		a := s.ownedAnswer(w, r, res)
		writeJSON(w, http.StatusAccepted, gmailMessage{Relay: &a})
	}
}

// userMailbox is the mailbox the path's userId picks: "" (pick by the raw
// message's From) for "me"; else the mailbox whose address, send_as or
// Gmail userId it is. An address no mailbox has is 400 naming it, except
// on a relay whose default mailbox has no address of its own (one mailbox
// without a mailboxes policy), which sends whatever the userId says, as
// before mailboxes had names.
func (s *Server) userMailbox(r *http.Request) (string, error) {
	uid, err := pathParam(r, "userId")
	if err != nil {
		return "", relay.Invalid("userId", "bad path escape in userId")
	}
	if uid == "me" || uid == "" || s.svc == nil {
		return "", nil
	}
	open := false
	for _, m := range s.svc.Mailboxes() {
		if strings.EqualFold(m.UserID(), uid) || slices.ContainsFunc(m.Addresses(), func(a string) bool { return strings.EqualFold(a, uid) }) {
			return m.Name(), nil
		}
		open = open || len(m.Addresses()) == 0
	}
	if open {
		return "", nil
	}
	var addrs []string
	for _, m := range s.svc.Mailboxes() {
		addrs = append(addrs, m.Addresses()...)
	}
	return "", relay.Invalid("userId", "no mailbox of this relay is %s (its addresses: %s; or use me to pick by From)",
		clipText(uid), strings.Join(addrs, ", "))
}
