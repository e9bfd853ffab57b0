// Package api is gmailrelay's HTTP surface (CONTRACT.md): the send endpoint
// n8n calls, the Gmail-compatible send path, the acceptance log readers,
// the review queue, fault rules and operations endpoints. Handlers parse
// and answer; every decision is the relay's.
package api

import (
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/rs/zerolog"
	"github.com/rs/zerolog/hlog"

	"github.com/gmailrelay/gmailrelay/acceptlog"
	"github.com/gmailrelay/gmailrelay/faultmodes"
	"github.com/gmailrelay/gmailrelay/outbox"
	"github.com/gmailrelay/gmailrelay/policy"
	"github.com/gmailrelay/gmailrelay/relay"
	"github.com/gmailrelay/gmailrelay/retention"
	"github.com/gmailrelay/gmailrelay/sweeper"
)

// MaxJSONBytes bounds a JSON send request. Larger messages go as
// message/rfc822 bodies (up to relay.MaxMessageBytes, Gmail's ceiling).
const MaxJSONBytes = 25 << 20

// Config wires the HTTP API.
type Config struct {
	// Service is the send path: sends and resolves go through it.
	Service *relay.Service
	// The log readers, fault rules, quota, policy and clock the handlers
	// use. Nil fields are taken from Service, so a relay process
	// wires one Service; a test may hand in others.
	Log     acceptlog.Store
	Faults  *faultmodes.Set
	Quota   *relay.Quota
	Policy  *policy.Policy
	Now     func() time.Time
	Sweeper *sweeper.Sweeper // nil: /admin/sweep answers 503
	Outbox  *outbox.Outbox   // nil: /admin/outbox answers 503
	// Retention is the retention pass; nil or disabled: nothing is pruned.
	// POST /admin/sweep runs it after the sweep.
	Retention *retention.Pass
	// APIToken may send and read; AdminToken may also change faults,
	// resolve jobs and trigger sweeps. With neither set, every request is
	// admitted as admin (serve allows that on loopback only).
	APIToken, AdminToken string
	// MsgIDDomain is the right side of derived Message-IDs.
	MsgIDDomain string
	// FaultHeader honours X-Relay-Fault on admin-token requests.
	FaultHeader bool
	// Mode is "sandbox" (embedded emulator) or "gmail"; shown on /readyz.
	Mode string
	// Probe checks that the provider answers; nil: not checked. For a
	// relay of several mailboxes, Probes has one per mailbox instead.
	Probe func(ctx context.Context) error
	// Probes checks each mailbox's Gmail (by name): /readyz reports each,
	// and the relay is ready while the log is open and some mailbox is.
	Probes map[string]func(ctx context.Context) error
	// AdvanceClock, when set (serve --clock manual), is exposed as
	// POST /admin/clock {"advance": "5m"} so end-to-end tests move time
	// instead of sleeping.
	AdvanceClock func(time.Duration)
	// Metrics serves /metrics; nil: 404.
	Metrics *Metrics
	// Console, when set, serves /ui and everything under /ui/ (the review
	// console, package console) with the full path; it does its own
	// sign-in, so the bearer-token check does not apply there.
	Console http.Handler
	Logger  zerolog.Logger

	// MaxInflightBytes bounds the request bodies handled at once (by their
	// Content-Length, or their endpoint's limit when they have none); a
	// request that does not fit is answered 503 + Retry-After before its
	// body is read. 0: DefaultMaxInflightBytes.
	MaxInflightBytes int64

	// OnSendTiming, when set, is called after every send request that
	// reached the send path (POST /v1/send and the Gmail-compatible
	// paths) with where its time went: the benchmark's phase breakdown.
	// nil costs nothing. It must be cheap and safe for concurrent use.
	OnSendTiming func(SendTiming)
}

// SendTiming is where one send request's time went inside its handler:
// Decode (reading, decoding and validating the request up to the send
// path), the relay's phases (relay.Timing: admission, admission commit,
// Gmail call, outcome commit) and Answer (from the send path's return to
// the response written). Total is the whole handler.
type SendTiming struct {
	Decode time.Duration
	relay.Timing
	Answer, Total time.Duration
}

// timingStart is the start of a send handler's clock: zero (no clock
// read) when nobody listens for SendTiming.
func (s *Server) timingStart() time.Time {
	if s.cfg.OnSendTiming == nil {
		return time.Time{}
	}
	return time.Now()
}

// withDeps fills the dependencies c leaves nil from c.Service.
func (c Config) withDeps() Config {
	if c.Service == nil {
		return c
	}
	if c.Log == nil {
		c.Log = c.Service.Log()
	}
	if c.Faults == nil {
		c.Faults = c.Service.Faults()
	}
	if c.Quota == nil {
		c.Quota = c.Service.Quota()
	}
	if c.Policy == nil {
		c.Policy = c.Service.Policy()
	}
	if c.Now == nil {
		c.Now = c.Service.Now
	}
	return c
}

// Server is the HTTP handler.
type Server struct {
	cfg       Config
	svc       *relay.Service
	apiHash   [32]byte
	adminHash [32]byte
	router    chi.Router
	handler   http.Handler // router inside the request scope
	inflight  inflight     // request bytes in flight (guard.go)
	probes    []*probe     // readyz.go
}

type role int

const (
	roleNone role = iota
	roleAPI
	roleAdmin
)

// route is one authenticated endpoint: the role its caller's token must
// hold, and its method, chi pattern and handler.
type route struct {
	role    role
	method  string
	pattern string
	handler http.HandlerFunc
}

// New builds the router.
func New(cfg Config) *Server {
	cfg = cfg.withDeps()
	s := &Server{cfg: cfg, svc: cfg.Service}
	s.apiHash = sha256.Sum256([]byte(cfg.APIToken))
	s.adminHash = sha256.Sum256([]byte(cfg.AdminToken))
	s.inflight.max = cmp.Or(cfg.MaxInflightBytes, DefaultMaxInflightBytes)
	s.probes = newProbes(cfg.Probe, cfg.Probes)
	r := chi.NewRouter()
	// Outside the mux, the request scope (scope.go, s.handler below):
	// logger with req_id, X-Request-Id, the access log, closeUnread's rule
	// (guard.go) and chi's routing context, in one allocation.
	r.Use(middleware.Recoverer)
	r.Use(routeEscaped, s.sameOrigin)

	r.Get("/healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	r.Get("/readyz", s.readyz)
	if cfg.Metrics != nil {
		r.Method(http.MethodGet, "/metrics", cfg.Metrics.handler(s))
	}
	if cfg.Console != nil {
		r.Handle("/ui", cfg.Console)
		r.Handle("/ui/*", cfg.Console)
	}
	// Every /v1 and /admin route: the caller's token must hold the role,
	// and the body guard applies.
	routes := []route{
		{roleAPI, http.MethodPost, "/v1/send", s.send},
		{roleAPI, http.MethodPost, "/gmail/v1/users/{userId}/messages/send", s.gmailSend},
		{roleAPI, http.MethodPost, "/upload/gmail/v1/users/{userId}/messages/send", s.gmailUpload},
		{roleAPI, http.MethodGet, "/v1/jobs", s.listJobs},
		{roleAPI, http.MethodGet, "/v1/jobs/{id}", s.getJob},
		{roleAPI, http.MethodDelete, "/v1/jobs/{id}", s.cancelJob},
		{roleAPI, http.MethodGet, "/v1/log", s.readLog},
		{roleAPI, http.MethodGet, "/v1/stats", s.stats},
		{roleAPI, http.MethodGet, "/v1/msgid", s.msgid},
		{roleAdmin, http.MethodPost, "/v1/jobs/{id}/resolve", s.resolve},
		{roleAdmin, http.MethodGet, "/admin/faults", s.listFaults},
		{roleAdmin, http.MethodPost, "/admin/faults", s.addFault},
		{roleAdmin, http.MethodDelete, "/admin/faults", s.clearFaults},
		{roleAdmin, http.MethodDelete, "/admin/faults/{id}", s.deleteFault},
		{roleAdmin, http.MethodPost, "/admin/sweep", s.sweep},
		{roleAdmin, http.MethodPost, "/admin/outbox", s.outboxPass},
		{roleAdmin, http.MethodGet, "/admin/backup", s.backup},
	}
	if cfg.AdvanceClock != nil {
		routes = append(routes, route{roleAdmin, http.MethodPost, "/admin/clock", s.advanceClock})
	}
	for _, rt := range routes {
		r.With(s.authenticate(rt.role), s.bodyGuard).Method(rt.method, rt.pattern, rt.handler)
	}
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, r, relay.Errorf(relay.CodeNotFound, "no such endpoint: %s %s", r.Method, clipText(r.URL.Path)))
	})
	s.router = r
	s.handler = s.scope(r)
	return s
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

// roleOf compares the bearer token with both tokens in constant time.
func (s *Server) roleOf(r *http.Request) role {
	if s.cfg.APIToken == "" && s.cfg.AdminToken == "" {
		return roleAdmin
	}
	h := r.Header.Get("Authorization")
	tok, ok := strings.CutPrefix(h, "Bearer ")
	if !ok {
		tok, ok = strings.CutPrefix(h, "bearer ")
	}
	if !ok || tok == "" {
		return roleNone
	}
	sum := sha256.Sum256([]byte(tok))
	isAdmin := s.cfg.AdminToken != "" && subtle.ConstantTimeCompare(sum[:], s.adminHash[:]) == 1
	isAPI := s.cfg.APIToken != "" && subtle.ConstantTimeCompare(sum[:], s.apiHash[:]) == 1
	switch {
	case isAdmin:
		return roleAdmin
	case isAPI:
		return roleAPI
	}
	return roleNone
}

func (s *Server) authenticate(need role) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			got := s.roleOf(r)
			if got == roleNone {
				w.Header().Set("WWW-Authenticate", `Bearer realm="gmailrelay"`)
				writeError(w, r, relay.Errorf(relay.CodeUnauthorized, "missing or wrong bearer token"))
				return
			}
			if got < need {
				writeError(w, r, relay.Errorf(relay.CodeForbidden, "this needs the admin token"))
				return
			}
			if sc := scopeOf(r); sc != nil {
				sc.role = got
			}
			next.ServeHTTP(w, r)
		})
	}
}

// faultOverride reads X-Relay-Fault, honoured only with --fault-header and
// the admin token; otherwise it is ignored. It never reaches Gmail: the
// relay builds the message itself.
func (s *Server) faultOverride(r *http.Request) (faultmodes.Decision, error) {
	h := r.Header.Get("X-Relay-Fault")
	if h == "" || !s.cfg.FaultHeader || roleOfRequest(r) != roleAdmin {
		return faultmodes.Decision{}, nil
	}
	m, err := faultmodes.ParseMode(h)
	if err != nil {
		return faultmodes.Decision{}, relay.Invalid("X-Relay-Fault", "%v", err)
	}
	f := s.cfg.Faults
	if f == nil {
		return faultmodes.Decision{}, relay.Errorf(relay.CodeUnavailable, "fault modes are disabled on this relay")
	}
	d, err := f.Force(m)
	if err != nil {
		return faultmodes.Decision{}, relay.Invalid("X-Relay-Fault", "%v", err)
	}
	return d, nil
}

// sendAnswer is the 200/202 body of POST /v1/send.
type sendAnswer struct {
	MessageID string `json:"message_id"`
	State     string `json:"state"`
	// Mailbox is the name of the mailbox the job sends as.
	Mailbox  string   `json:"mailbox"`
	GmailID  string   `json:"gmail_id,omitempty"`
	ThreadID string   `json:"thread_id,omitempty"`
	LabelIDs []string `json:"label_ids,omitempty"`
	Attempts int      `json:"attempts"`
	Channel  string   `json:"channel"`
	URL      string   `json:"url,omitempty"`
	Replayed bool     `json:"replayed,omitempty"`
	// ETA is a queued job's estimated delivery time.
	ETA *time.Time `json:"eta,omitempty"`
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
		p, err := relay.PrepareRaw(body, key, channelOf(r), s.cfg.MsgIDDomain)
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
		p, err := relay.Prepare(req, key, s.cfg.MsgIDDomain, s.cfg.Now())
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
	return queryValue(r.URL.RawQuery, "channel")
}

// queryValue is url.ParseQuery(rawQuery).Get(key) without building the
// map: every send asks for ?channel=, and the Gmail-compatible path's query
// (alt=json&prettyPrint=false) would cost four allocations a send. Pairs
// that ParseQuery skips (a semicolon, a bad escape) are skipped here too
// (FuzzQueryValue checks it against url.ParseQuery).
func queryValue(rawQuery, key string) string {
	for rawQuery != "" {
		var pair string
		pair, rawQuery, _ = strings.Cut(rawQuery, "&")
		if pair == "" || strings.Contains(pair, ";") {
			continue
		}
		k, v, _ := strings.Cut(pair, "=")
		if k != key {
			if uk, err := url.QueryUnescape(k); err != nil || uk != key {
				continue
			}
		}
		if uv, err := url.QueryUnescape(v); err == nil {
			return uv
		}
	}
	return ""
}

func readBody(r *http.Request, limit int64) ([]byte, error) {
	body, err := readAllSized(http.MaxBytesReader(nil, r.Body, limit), r.ContentLength, limit)
	if err != nil {
		return nil, bodyError(err, limit)
	}
	return body, nil
}

// bodyError is readBody's answer to a failed read (apart, so that the
// successful read allocates no error target).
func bodyError(err error, limit int64) error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return &relay.Error{Code: relay.CodeTooLarge, Message: "request body larger than " + strconv.FormatInt(limit, 10) + " bytes"}
	}
	return relay.Invalid("body", "read request body: %v", err)
}

// readAllSized is io.ReadAll with the buffer sized from the request's
// Content-Length n (when known and within limit), so a body is read into
// one allocation instead of a doubling series from 512 bytes.
func readAllSized(rd io.Reader, n, limit int64) ([]byte, error) {
	if n < 0 || n > limit {
		return io.ReadAll(rd)
	}
	b := make([]byte, 0, n+1) // +1: room for the read that finds EOF
	for {
		m, err := rd.Read(b[len(b):cap(b)])
		b = b[:len(b)+m]
		if err != nil {
			if err == io.EOF {
				err = nil
			}
			return b, err
		}
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)] // a body longer than it said: grow
		}
	}
}

// run sends p and answers through write, which sees every outcome that is
// not a refusal (answered by fail) or a dropped response. start is the
// handler's timingStart.
func (s *Server) run(w http.ResponseWriter, r *http.Request, start time.Time, p relay.Prepared, queue bool,
	fail func(http.ResponseWriter, *http.Request, error), write func(http.ResponseWriter, *http.Request, relay.Result)) {
	fault, err := s.faultOverride(r)
	if err != nil {
		fail(w, r, err)
		return
	}
	opts := relay.SendOptions{Fault: fault, Queue: queue}
	var tm *SendTiming
	var sent time.Time
	if s.cfg.OnSendTiming != nil {
		tm = &SendTiming{Decode: time.Since(start)}
		opts.Timing = &tm.Timing
		defer func() {
			tm.Total = time.Since(start)
			tm.Answer = time.Since(sent)
			s.cfg.OnSendTiming(*tm)
		}()
	}
	res, err := s.svc.Send(r.Context(), p, opts)
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
	write(w, r, res)
}

func (s *Server) writeSendAnswer(w http.ResponseWriter, r *http.Request, res relay.Result) {
	j := res.Job
	if res.Replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	a := sendAnswer{MessageID: j.MessageID, State: string(j.State), Mailbox: s.viewMailbox(j), Attempts: j.Attempts,
		Channel: j.Channel, Replayed: res.Replayed}
	switch j.State {
	case acceptlog.StateSent:
		a.GmailID, a.ThreadID, a.LabelIDs = j.GmailID, j.ThreadID, j.LabelIDs
		writeJSON(w, http.StatusOK, a)
	case acceptlog.StateFailed:
		writeErrorFor(w, r, failureError(j, res), j.MessageID, j.State)
	default: // queued, unknown, review, forwarding
		a.URL = jobURL(j.MessageID)
		if j.State == acceptlog.StateQueued {
			a.ETA = s.eta(r.Context(), j.MessageID)
		}
		w.Header().Set("Location", a.URL)
		writeJSON(w, http.StatusAccepted, a)
	}
}

// failureError turns a failed job into the answer CONTRACT.md gives it.
func failureError(j acceptlog.Job, res relay.Result) *relay.Error {
	d := res.Fault
	switch {
	case j.LastReason == acceptlog.ReasonFaultInjected:
		return &relay.Error{Code: relay.CodeUnavailable, RetryAfter: 1,
			Message: "fault fail-before-forward injected (rule " + d.RuleID + "): nothing was sent; safe to retry"}
	case j.Retryable && j.LastReason == acceptlog.ReasonRateLimited:
		retry := 30 // a replayed answer: the pause is not known here
		if res.RetryIn > 0 {
			retry = int((res.RetryIn + time.Second - 1) / time.Second) // the mailbox's pause
		}
		return &relay.Error{Code: relay.CodeRateLimited, RetryAfter: retry, Message: "Gmail's rate limit: nothing was sent; retry later"}
	case j.LastReason == acceptlog.ReasonTokenRefresh:
		return &relay.Error{Code: relay.CodeUnavailable, RetryAfter: 30,
			Message: "the relay could not refresh its Gmail token (mailbox " + cmp.Or(j.Mailbox, "default") +
				"): nothing was sent; an operator must fix the credentials (see /readyz)"}
	case j.Retryable:
		return &relay.Error{Code: relay.CodeUnavailable, RetryAfter: 5, Message: "Gmail was not reached: nothing was sent; safe to retry"}
	case j.LastReason == acceptlog.ReasonAuth:
		return &relay.Error{Code: relay.CodeProviderRejected, Message: "Gmail refused the relay's credentials (status " + strconv.Itoa(j.LastStatus) + "); an operator must fix them"}
	default:
		msg := "Gmail rejected the message (status " + strconv.Itoa(j.LastStatus) + ")"
		if j.LastError != "" {
			msg += ": " + j.LastError
		}
		return &relay.Error{Code: relay.CodeProviderRejected, Message: msg}
	}
}

// routeEscaped makes chi route on the escaped path, so every path
// parameter is raw and its handler decodes it exactly once. Left alone,
// chi routes on r.URL.RawPath only when Go kept one (an escaping that
// differs from Go's own) and on the decoded r.URL.Path otherwise: a
// Message-ID holding "%6A" would then arrive decoded once already, and
// a second decode would name another job.
func routeEscaped(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if rctx := chi.RouteContext(r.Context()); rctx != nil && rctx.RoutePath == "" {
			rctx.RoutePath = r.URL.EscapedPath()
		}
		next.ServeHTTP(w, r)
	})
}

// pathParam returns the path parameter name, decoded once (see
// routeEscaped).
func pathParam(r *http.Request, name string) (string, error) {
	return url.PathUnescape(chi.URLParam(r, name))
}

func (s *Server) idParam(r *http.Request) (string, error) {
	v, err := pathParam(r, "id")
	if err != nil {
		return "", relay.Invalid("id", "bad path escape in Message-ID")
	}
	id, err := relay.NormalizeMessageID(v)
	if err != nil {
		return "", relay.Invalid("id", "%v", err)
	}
	return id, nil
}

func (s *Server) listJobs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	o := acceptlog.ListOptions{State: acceptlog.State(q.Get("state")), Channel: q.Get("channel"), After: q.Get("after")}
	if o.State != "" && !o.State.Valid() {
		writeError(w, r, relay.Invalid("state", "unknown state %q", o.State))
		return
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			writeError(w, r, relay.Invalid("limit", "limit must be 1..1000"))
			return
		}
		o.Limit = n
	}
	mailbox, err := s.mailboxParam(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	var jobs []acceptlog.Job
	var next string
	if mailbox == "" {
		jobs, next, err = s.cfg.Log.List(r.Context(), o)
	} else {
		jobs, next, err = s.listMailboxJobs(r.Context(), o, mailbox)
	}
	if err != nil {
		writeError(w, r, err)
		return
	}
	if jobs == nil {
		jobs = []acceptlog.Job{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"jobs": s.withETAs(r.Context(), jobs), "next": next})
}

var statesForMetrics = acceptlog.States

// jobView is a job with its lines, oldest first.
type jobView struct {
	acceptlog.Job
	URL   string           `json:"url"`
	Lines []acceptlog.Line `json:"lines"`
}

func (s *Server) getJob(w http.ResponseWriter, r *http.Request) {
	id, err := s.idParam(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	j, err := s.cfg.Log.Get(r.Context(), id)
	if err != nil {
		writeError(w, r, err)
		return
	}
	lines, err := s.cfg.Log.JobLines(r.Context(), id)
	if err != nil {
		writeError(w, r, err)
		return
	}
	j.Mailbox = s.viewMailbox(j)
	writeJSON(w, http.StatusOK, jobView{Job: j, URL: jobURL(id), Lines: lines})
}

func (s *Server) readLog(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var after uint64
	if v := q.Get("after"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			writeError(w, r, relay.Invalid("after", "after must be a sequence number"))
			return
		}
		after = n
	}
	limit := 100
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			writeError(w, r, relay.Invalid("limit", "limit must be 1..1000 (the log pages at most 1000 lines; follow next)"))
			return
		}
		limit = n
	}
	mailbox, err := s.mailboxParam(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	var lines []acceptlog.Line
	var next uint64
	if mailbox == "" {
		lines, next, err = s.cfg.Log.Lines(r.Context(), after, limit)
	} else {
		lines, next, err = s.mailboxLines(r.Context(), after, limit, mailbox)
	}
	if err != nil {
		writeError(w, r, err)
		return
	}
	if strings.Contains(r.Header.Get("Accept"), "application/x-ndjson") {
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.Header().Set("X-Next", strconv.FormatUint(next, 10))
		enc := json.NewEncoder(w)
		for _, l := range lines {
			_ = enc.Encode(l)
		}
		return
	}
	if lines == nil {
		lines = []acceptlog.Line{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"lines": lines, "next": next})
}

// Stats is the body of GET /v1/stats.
type Stats struct {
	acceptlog.Stats
	EffectLines      int                     `json:"effect_lines"`
	DuplicatesFound  int                     `json:"duplicates_found"`
	HandleRewrites   int                     `json:"handle_rewrites"`
	ReviewDepth      int                     `json:"review_queue_depth"`
	OldestUnknownAge float64                 `json:"oldest_unknown_age_seconds"`
	FaultsInjected   map[faultmodes.Mode]int `json:"faults_injected"`
	QuotaUnitsSpent  int64                   `json:"quota_units_spent"`
	Sweeper          *sweeper.Result         `json:"sweeper,omitempty"`
	// LogBytes is the size of the acceptance log file.
	LogBytes int64 `json:"log_bytes"`
	// Pruned sums the retention passes since start (absent when retention
	// is off).
	Pruned *acceptlog.PruneResult `json:"pruned,omitempty"`
	// Outbox is the queue and the daily budgets, over the mailboxes.
	Outbox outbox.Snapshot `json:"outbox"`
	// Mailboxes holds each mailbox's figures by name (only the one
	// ?mailbox= names, when given).
	Mailboxes map[string]MailboxStats `json:"mailboxes"`
}

// CollectStats gathers /v1/stats; /metrics reads the same numbers.
func (s *Server) CollectStats(ctx context.Context) (Stats, error) { return s.collectStats(ctx, "") }

// collectStats is CollectStats narrowed to mailbox when it is not "": the
// mailboxes map holds that mailbox only, and the outbox and
// quota_units_spent are its own. The log's counters (jobs, by_state, …)
// stay the relay's totals: the log counts them per relay, not per mailbox.
func (s *Server) collectStats(ctx context.Context, mailbox string) (Stats, error) {
	st, err := s.cfg.Log.Stats(ctx)
	if err != nil {
		return Stats{}, err
	}
	out := Stats{Stats: st, EffectLines: st.ByKind[acceptlog.KindEffect],
		DuplicatesFound: st.ByReason[acceptlog.KindReview][string(acceptlog.ReasonDuplicate)],
		HandleRewrites:  st.ByReason[acceptlog.KindHandle][string(acceptlog.ReasonHandleRewritten)],
		ReviewDepth:     st.ByState[acceptlog.StateReview],
		QuotaUnitsSpent: s.cfg.Quota.Spent(),
		FaultsInjected:  map[faultmodes.Mode]int{},
	}
	if !st.OldestUnknown.IsZero() {
		out.OldestUnknownAge = s.cfg.Now().Sub(st.OldestUnknown).Seconds()
	}
	if f := s.cfg.Faults; f != nil {
		out.FaultsInjected = f.Injected()
	}
	if s.cfg.Sweeper != nil {
		t := s.cfg.Sweeper.Totals()
		out.Sweeper = &t
	}
	if s.cfg.Retention != nil && s.cfg.Retention.Enabled() {
		t := s.cfg.Retention.Totals()
		out.Pruned = &t
	}
	if out.LogBytes, err = s.cfg.Log.Size(ctx); err != nil {
		return Stats{}, err
	}
	if out.Outbox, _, err = outbox.Estimate(ctx, s.svc); err != nil {
		return Stats{}, err
	}
	if out.Mailboxes, err = s.mailboxStats(ctx, out.Outbox, mailbox); err != nil {
		return Stats{}, err
	}
	switch {
	case mailbox != "":
		out.Outbox = narrow(out.Outbox, mailbox)
		out.QuotaUnitsSpent = out.Mailboxes[mailbox].QuotaUnitsSpent
	case len(out.Mailboxes) > 1: // the total over the mailboxes' own quotas
		out.QuotaUnitsSpent = 0
		for _, m := range out.Mailboxes {
			out.QuotaUnitsSpent += m.QuotaUnitsSpent
		}
	}
	return out, nil
}

func (s *Server) stats(w http.ResponseWriter, r *http.Request) {
	mailbox, err := s.mailboxParam(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	st, err := s.collectStats(r.Context(), mailbox)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

func (s *Server) resolve(w http.ResponseWriter, r *http.Request) {
	id, err := s.idParam(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	var body struct {
		Action string `json:"action"`
		Note   string `json:"note"`
		Actor  string `json:"actor"`
	}
	if err := decodeStrict(r, &body); err != nil {
		writeError(w, r, err)
		return
	}
	actor := body.Actor
	if actor == "" {
		actor = "admin"
	}
	res, err := s.svc.Resolve(r.Context(), id, body.Action, body.Note, actor)
	if err != nil {
		writeErrorFor(w, r, err, id, res.Job.State)
		return
	}
	lines, _ := s.cfg.Log.JobLines(r.Context(), id)
	res.Job.Mailbox = s.viewMailbox(res.Job)
	writeJSON(w, http.StatusOK, jobView{Job: res.Job, URL: jobURL(id), Lines: lines})
}

func decodeStrict(r *http.Request, v any) error {
	body, err := readBody(r, 1<<20)
	if err != nil {
		return err
	}
	if err := CheckJSON(body); err != nil {
		return err
	}
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		field := ""
		if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			field = strings.Trim(f, `"`)
			return relay.Invalid(field, "unknown field %q", field)
		}
		return relay.Invalid("body", "invalid JSON: %v", err)
	}
	return nil
}

func (s *Server) faultSet() (*faultmodes.Set, error) {
	if f := s.cfg.Faults; f != nil {
		return f, nil
	}
	return nil, relay.Errorf(relay.CodeUnavailable, "fault modes are disabled on this relay")
}

func (s *Server) listFaults(w http.ResponseWriter, r *http.Request) {
	f, err := s.faultSet()
	if err != nil {
		writeError(w, r, err)
		return
	}
	rules := f.List()
	if rules == nil {
		rules = []faultmodes.Rule{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"rules": rules, "seed": f.Seed(), "injected": f.Injected()})
}

func (s *Server) addFault(w http.ResponseWriter, r *http.Request) {
	f, err := s.faultSet()
	if err != nil {
		writeError(w, r, err)
		return
	}
	body, err := readBody(r, 1<<20)
	if err != nil {
		writeError(w, r, err)
		return
	}
	if err := CheckJSON(body); err != nil {
		writeError(w, r, err)
		return
	}
	spec, err := faultmodes.ParseSpec(body)
	if err != nil {
		writeError(w, r, err)
		return
	}
	if spec.Channel != "" {
		if _, err := s.cfg.Policy.Channel(spec.Channel); err != nil {
			writeError(w, r, relay.Invalid("channel", "%v", err))
			return
		}
	}
	rule, err := f.Add(spec)
	if err != nil {
		writeError(w, r, err)
		return
	}
	hlog.FromRequest(r).Warn().Str("rule", rule.ID).Str("mode", string(rule.Mode)).Msg("fault rule added")
	writeJSON(w, http.StatusCreated, rule)
}

func (s *Server) deleteFault(w http.ResponseWriter, r *http.Request) {
	f, err := s.faultSet()
	if err != nil {
		writeError(w, r, err)
		return
	}
	id, err := pathParam(r, "id")
	if err != nil {
		writeError(w, r, relay.Invalid("id", "bad path escape in fault rule id"))
		return
	}
	if !f.Remove(id) {
		writeError(w, r, relay.Errorf(relay.CodeNotFound, "no fault rule %q", id))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) clearFaults(w http.ResponseWriter, r *http.Request) {
	f, err := s.faultSet()
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]int{"removed": f.Clear()})
}

func (s *Server) sweep(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Sweeper == nil {
		writeError(w, r, relay.Errorf(relay.CodeUnavailable, "the sweeper is not running"))
		return
	}
	res, err := s.cfg.Sweeper.RunOnce(r.Context())
	if err != nil {
		writeError(w, r, err)
		return
	}
	out := sweepAnswer{Result: res}
	if s.cfg.Retention != nil && s.cfg.Retention.Enabled() {
		rr, err := s.cfg.Retention.RunOnce(r.Context())
		if err != nil {
			writeError(w, r, err)
			return
		}
		out.Retention = &rr
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) advanceClock(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Advance string `json:"advance"`
	}
	if err := decodeStrict(r, &body); err != nil {
		writeError(w, r, err)
		return
	}
	d, err := time.ParseDuration(body.Advance)
	if err != nil || d < 0 {
		writeError(w, r, relay.Invalid("advance", "advance must be a non-negative Go duration like 5m"))
		return
	}
	s.cfg.AdvanceClock(d)
	writeJSON(w, http.StatusOK, map[string]any{"now": s.cfg.Now()})
}
