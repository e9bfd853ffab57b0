package api

import (
	"cmp"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/rs/zerolog/hlog"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/relay"
)

// sendAnswer is the 202 body of POST /v1/send (a job the relay owns: no
// Gmail ids), of a cancel, and the relay's view on the Gmail-compatible
// path's 202.
type sendAnswer struct {
	MessageID string `json:"message_id"`
	State     string `json:"state"`
	// Mailbox is the name of the mailbox the job sends as.
	Mailbox  string `json:"mailbox"`
	Attempts int    `json:"attempts"`
	Channel  string `json:"channel"`
	URL      string `json:"url,omitempty"`
	Replayed bool   `json:"replayed,omitempty"`
	// ETA is a queued job's estimated delivery time.
	ETA *time.Time `json:"eta,omitempty"`
}

// sentAnswer is the 200 body of POST /v1/send. docs/api.md lists gmail_id,
// thread_id and label_ids in it, so they are there even when not known
// (a job an operator marked sent, or one the sweeper found without a
// thread id): "" and [].
type sentAnswer struct {
	MessageID string   `json:"message_id"`
	State     string   `json:"state"`
	Mailbox   string   `json:"mailbox"`
	GmailID   string   `json:"gmail_id"`
	ThreadID  string   `json:"thread_id"`
	LabelIDs  []string `json:"label_ids"`
	Attempts  int      `json:"attempts"`
	Channel   string   `json:"channel"`
	Replayed  bool     `json:"replayed,omitempty"`
}

func jobURL(id string) string { return "/v1/jobs/" + url.PathEscape(id) }

func (s *Server) send(w http.ResponseWriter, r *http.Request) {
	start := s.timingStart()
	p, queue, err := s.prepare(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	s.run(w, r, start, p, queue, func(w http.ResponseWriter, r *http.Request, err error) {
		writeErrorFor(w, r, err, p.MessageID, "")
	}, s.writeSendAnswer)
}

// prepare reads and validates a /v1/send request of either content type.
// queue is false only when the caller asked to be refused when busy
// (when_busy "reject", or the X-Relay-When-Busy header).
func (s *Server) prepare(r *http.Request) (_ relay.Prepared, queue bool, _ error) {
	ct := parseMediaType(r.Header.Get("Content-Type"))
	key := r.Header.Get("Idempotency-Key")
	switch ct {
	case "message/rfc822":
		body, err := readBody(r, relay.MaxMessageBytes)
		if err != nil {
			return relay.Prepared{}, false, err
		}
		queue, err := whenBusyHeader(r, true)
		if err != nil {
			return relay.Prepared{}, false, err
		}
		p, err := s.ids.PrepareRaw(body, key, channelOf(r))
		return p, queue, err
	case "application/json", "":
		body, err := readBody(r, MaxJSONBytes)
		if err != nil {
			return relay.Prepared{}, false, err
		}
		req, err := DecodeSendRequest(body)
		if err != nil {
			return relay.Prepared{}, false, err
		}
		if req.Channel == "" {
			req.Channel = channelOf(r)
		}
		sendAt, queue, err := req.Schedule()
		if err != nil {
			return relay.Prepared{}, false, err
		}
		if req.WhenBusy == "" { // the body's when_busy wins; without it, the header decides
			if queue, err = whenBusyHeader(r, true); err != nil {
				return relay.Prepared{}, false, err
			}
		}
		p, err := s.ids.Prepare(req, key, s.cfg.Now())
		p.SendAt = sendAt
		return p, queue, err
	default:
		return relay.Prepared{}, false, relay.Invalid("Content-Type", "send application/json or message/rfc822, not %q", ct)
	}
}

func channelOf(r *http.Request) string {
	if c := r.Header.Get("X-Relay-Channel"); c != "" {
		return c
	}
	return r.URL.Query().Get("channel")
}

func readBody(r *http.Request, limit int64) ([]byte, error) {
	var oldest func() bool
	if m, ok := r.Context().Value(meterKey{}).(*meteredBody); ok {
		oldest = m.oldest
	}
	body, err := readAllSized(http.MaxBytesReader(nil, r.Body, limit), r.ContentLength, limit, oldest)
	if err != nil {
		return nil, bodyError(err, limit)
	}
	return body, nil
}

// bodyError is readBody's answer to a failed read.
func bodyError(err error, limit int64) error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return &relay.Error{Code: relay.CodeTooLarge, Field: fieldRequest, Message: "request body larger than " + strconv.FormatInt(limit, 10) + " bytes"}
	}
	var re *relay.Error // the body meter's 503 (budget) or 408 (rate)
	if errors.As(err, &re) {
		return re
	}
	return relay.Invalid(fieldRequest, "read request body: %v", err)
}

// readAllSized is io.ReadAll for a body of known length n (when within
// limit) with memory that follows the bytes that arrived, never a
// declared length alone: it reads into chunks (from
// firstBodyBuffer, doubling up to maxBodyChunk) and joins them at the end,
// except that the oldest body being read (oldest reports it; it is the one
// the in-flight budget lets finish, see bodymeter.go) moves into one buffer
// of exactly n+1 bytes as soon as it fills its first chunk. So a body the
// budget may yet cut holds little more than it received (and leaves no
// series of copies behind), and a large message that goes on is copied
// once. That takes one body's declared length, at most, beyond the bytes
// received.
func readAllSized(rd io.Reader, n, limit int64, oldest func() bool) ([]byte, error) {
	if n < 0 || n > limit {
		return io.ReadAll(rd)
	}
	var chunks [][]byte                             // full chunks, while the body is not the oldest
	var held int64                                  // their bytes
	b := make([]byte, 0, min(n+1, firstBodyBuffer)) // +1: room for the read that finds EOF
	for {
		m, err := rd.Read(b[len(b):cap(b)])
		b = b[:len(b)+m]
		if err != nil {
			if err == io.EOF {
				err = nil
			}
			if chunks != nil {
				b = joinChunks(chunks, b, held)
			}
			return b, err
		}
		if len(b) < cap(b) {
			continue
		}
		switch {
		case held+int64(len(b)) > n: // a body longer than it said: grow
			if chunks != nil {
				b, chunks, held = joinChunks(chunks, b, held), nil, 0
			}
			b = append(b, 0)[:len(b)]
		case oldest != nil && oldest():
			nb := make([]byte, 0, n+1)
			for _, c := range chunks {
				nb = append(nb, c...)
			}
			b, chunks, held = append(nb, b...), nil, 0
		default:
			chunks = append(chunks, b)
			held += int64(len(b))
			b = make([]byte, 0, min(n+1-held, int64(min(2*cap(b), maxBodyChunk))))
		}
	}
}

// joinChunks is chunks then last in one buffer.
func joinChunks(chunks [][]byte, last []byte, held int64) []byte {
	b := make([]byte, 0, held+int64(len(last))+1)
	for _, c := range chunks {
		b = append(b, c...)
	}
	return append(b, last...)
}

// firstBodyBuffer is readAllSized's first buffer for a body of known
// length, and maxBodyChunk the largest chunk it reads into.
const (
	firstBodyBuffer = 64 << 10
	maxBodyChunk    = 1 << 20
)

// run sends p and answers through write, which sees every outcome that is
// not a refusal (answered by fail) or a dropped response; a replay's answer
// carries Idempotent-Replayed: true. start is the
// handler's timingStart.
func (s *Server) run(w http.ResponseWriter, r *http.Request, start time.Time, p relay.Prepared, queue bool,
	fail func(http.ResponseWriter, *http.Request, error), write func(http.ResponseWriter, *http.Request, relay.Result)) {
	ctx := r.Context() // carries a forced fault (faultHeader)
	var tm *SendTiming
	var sent time.Time
	if s.cfg.OnSendTiming != nil {
		tm = &SendTiming{Decode: time.Since(start)}
		ctx = relay.WithTimingObserver(ctx, tm)
		defer func() {
			tm.Total = time.Since(start)
			tm.Answer = time.Since(sent)
			s.cfg.OnSendTiming(*tm)
		}()
	}
	res, err := s.svc.Send(ctx, p, relay.SendOptions{Queue: queue})
	if tm != nil {
		sent = time.Now()
	}
	if err != nil {
		fail(w, r, err)
		return
	}
	if res.Dropped {
		hlog.FromRequest(r).Warn().Str("message_id", p.MessageID).Str("rule", res.Fault.RuleID).
			Msg("fault forward-then-drop-response: Gmail's answer dropped, job unknown")
		if res.Fault.Drop == "504" {
			fail(w, r, &relay.Error{Code: relay.CodeFaultDropped,
				Message: "fault forward-then-drop-response injected (rule " + res.Fault.RuleID + "): Gmail's answer was dropped; the relay owns the job"})
			return
		}
		panic(http.ErrAbortHandler) // cut the connection: no HTTP answer at all
	}
	if res.Replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	write(w, r, res)
}

func (s *Server) writeSendAnswer(w http.ResponseWriter, r *http.Request, res relay.Result) {
	switch j := res.Job; j.State {
	case gmailrelay.StateSent:
		labels := j.LabelIDs
		if labels == nil {
			labels = []string{} // [], not null
		}
		writeJSON(w, http.StatusOK, sentAnswer{MessageID: j.MessageID, State: string(j.State), Mailbox: s.viewMailbox(j),
			GmailID: j.GmailID, ThreadID: j.ThreadID, LabelIDs: labels, Attempts: j.Attempts, Channel: j.Channel,
			Replayed: res.Replayed})
	case gmailrelay.StateFailed:
		writeErrorFor(w, r, failureError(j, res), j.MessageID, j.State)
	default: // queued, unknown, review, forwarding
		a := s.ownedAnswer(w, r, res)
		writeJSON(w, http.StatusAccepted, a)
	}
}

// ownedAnswer is the 202 body of a send whose job the relay owns (queued,
// with its eta; unknown, review, forwarding), on both paths; it sets the
// Location header to the job.
func (s *Server) ownedAnswer(w http.ResponseWriter, r *http.Request, res relay.Result) sendAnswer {
	j := res.Job
	a := sendAnswer{MessageID: j.MessageID, State: string(j.State), Mailbox: s.viewMailbox(j), Attempts: j.Attempts,
		Channel: j.Channel, Replayed: res.Replayed, URL: jobURL(j.MessageID)}
	if j.State == gmailrelay.StateQueued {
		a.ETA = s.eta(r.Context(), j.MessageID)
	}
	w.Header().Set("Location", a.URL)
	return a
}

// failureError turns a failed job into the answer docs/api.md gives it.
func failureError(j gmailrelay.Job, res relay.Result) *relay.Error {
	d := res.Fault
	switch {
	case j.LastReason == gmailrelay.ReasonFaultInjected:
		return &relay.Error{Code: relay.CodeUnavailable, RetryAfter: 1,
			Message: "fault fail-before-forward injected (rule " + d.RuleID + "): nothing was sent; safe to retry"}
	case j.Retryable && j.LastReason == gmailrelay.ReasonRateLimited:
		retry := 30 // a replayed answer: the pause is not known here
		if res.RetryIn > 0 {
			retry = int((res.RetryIn + time.Second - 1) / time.Second) // the mailbox's pause
		}
		return &relay.Error{Code: relay.CodeRateLimited, RetryAfter: retry, Message: "Gmail's rate limit: nothing was sent; retry later"}
	case j.LastReason == gmailrelay.ReasonTokenRefresh:
		return &relay.Error{Code: relay.CodeUnavailable, RetryAfter: 30,
			Message: "the relay could not refresh its Gmail token (mailbox " + cmp.Or(j.Mailbox, "default") +
				"): nothing was sent; an operator must fix the credentials (see /readyz)"}
	case j.Retryable:
		return &relay.Error{Code: relay.CodeUnavailable, RetryAfter: 5, Message: "Gmail was not reached: nothing was sent; safe to retry"}
	case j.LastReason == gmailrelay.ReasonAuth:
		return &relay.Error{Code: relay.CodeProviderRejected, Message: "Gmail refused the relay's credentials (status " + strconv.Itoa(j.LastStatus) + "); an operator must fix them"}
	default:
		msg := "Gmail rejected the message (status " + strconv.Itoa(j.LastStatus) + ")"
		if j.LastError != "" {
			msg += ": " + j.LastError
		}
		return &relay.Error{Code: relay.CodeProviderRejected, Message: msg}
	}
}
