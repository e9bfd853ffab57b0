// Package api is gmailrelay's HTTP surface (docs/api.md): the send endpoint
// n8n calls, the Gmail-compatible send path, the acceptance log readers,
// the review queue, fault rules and operations endpoints. Handlers parse
// and answer; every decision is the relay's.
package api

import (
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/rs/zerolog"

	"github.com/gmailrelay/gmailrelay"
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
	// Relay is the send path (relay.Service): sends, resolutions and
	// cancellations go through it; it also gives the mailboxes and the
	// clock fence.
	Relay Relay
	// Log is the acceptance log the handlers read.
	Log gmailrelay.Store
	// Policy gives the channels a fault rule may name.
	Policy *policy.Policy
	// Faults holds the runtime fault rules (/admin/faults, the
	// X-Relay-Fault header, the stats' faults_injected); nil: fault
	// injection is off. The send path applies them through its mailboxes'
	// Gmail clients (faultmodes.Wrap), not through the API.
	Faults *faultmodes.Set
	// Now is the relay's clock; nil means time.Now.
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
	// MsgIDSecret is the relay's Message-ID secret (nil: none, the
	// default sha256(key) scheme): every Message-ID the API derives from a
	// key is relay.NewIDScheme(MsgIDDomain, MsgIDSecret)'s. Never shown.
	MsgIDSecret []byte
	// FaultHeader honours X-Relay-Fault on admin-token send requests
	// (faultHeader).
	FaultHeader bool
	// Mode is "sandbox" (embedded emulator) or "gmail"; shown on /readyz.
	Mode string
	// SandboxEmulator is the embedded emulator's URL in sandbox mode:
	// /readyz and /v1/stats carry it as sandbox.emulator (its ground
	// truth, /_emulator/…, answers there). Empty: no sandbox object.
	SandboxEmulator string
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

	// MaxInflightBytes bounds the request body bytes held at once, counted
	// as they arrive: a request whose Content-Length (or endpoint's limit,
	// without one) does not fit beside what other bodies have delivered is
	// answered 503 + Retry-After before its body is read, and one whose
	// bytes stop fitting while it is read is cut with the same answer.
	// 0: DefaultMaxInflightBytes.
	MaxInflightBytes int64
	// MinBodyRate is the slowest a request body may arrive, in bytes per
	// second, once MinBodyGrace has passed since its headers; a slower one
	// is cut and answered 408. 0: DefaultMinBodyRate; negative: no minimum.
	MinBodyRate int64
	// MinBodyGrace is the time a body has before MinBodyRate applies.
	// 0: DefaultMinBodyGrace.
	MinBodyGrace time.Duration

	// OnSendTiming, when set, is called after every send request that
	// reached the send path (POST /v1/send and the Gmail-compatible
	// paths) with where its time went: the benchmark's phase breakdown.
	// nil costs nothing. It must be cheap and safe for concurrent use.
	OnSendTiming func(SendTiming)
}

// SendTiming is where one send request's time went inside its handler:
// Decode (reading, decoding and validating the request up to the send
// path), the relay's phases (relay.Timing: admission, admission commit,
// Gmail call, outcome commit, heard as the Send's relay.TimingObserver)
// and Answer (from the send path's return to the response written). Total
// is the whole handler.
type SendTiming struct {
	Decode time.Duration
	relay.Timing
	Answer, Total time.Duration
}

// SendTimed implements relay.TimingObserver: it keeps the relay's phases.
func (t *SendTiming) SendTimed(rt relay.Timing) { t.Timing = rt }

// timingStart is the start of a send handler's clock: zero (no clock
// read) when nobody listens for SendTiming.
func (s *Server) timingStart() time.Time {
	if s.cfg.OnSendTiming == nil {
		return time.Time{}
	}
	return time.Now()
}

// Sender admits and forwards a send (relay.Service.Send).
type Sender interface {
	Send(ctx context.Context, p relay.Prepared, o relay.SendOptions) (relay.Result, error)
}

// Resolver applies a human decision to a job (relay.Service.Resolve).
type Resolver interface {
	Resolve(ctx context.Context, r relay.ResolveRequest) (relay.Result, error)
}

// Canceller cancels a queued job (relay.Service.Cancel).
type Canceller interface {
	Cancel(ctx context.Context, id, actor string) (relay.Result, error)
}

// Mailboxes is the relay's set of mailboxes (relay.Service): the default
// one first.
type Mailboxes interface {
	// MailboxOf returns the mailbox a job's Mailbox names.
	MailboxOf(name string) (*relay.Mailbox, error)
	// Mailboxes returns every mailbox.
	Mailboxes() []*relay.Mailbox
}

// ClockFence reports this replica's clock against the other replicas'
// (relay.Service.RecentClock).
type ClockFence interface {
	RecentClock(ctx context.Context) relay.ClockStatus
}

// Relay is the send path as the handlers use it; *relay.Service is one.
type Relay interface {
	Sender
	Resolver
	Canceller
	Mailboxes
	ClockFence
}

// Server is the HTTP handler.
type Server struct {
	cfg       Config
	svc       Relay
	ids       relay.IDScheme // Message-IDs derived from keys
	apiHash   [32]byte
	adminHash [32]byte
	router    chi.Router
	handler   http.Handler // router inside the request scope
	inflight  inflight     // request bytes in flight (guard.go)
	// minBodyRate and minBodyGrace are the body meter's (bodymeter.go);
	// onBodyRead, set by tests only, sees each body's running total.
	minBodyRate  int64
	minBodyGrace time.Duration
	onBodyRead   func(int64)
	probes       []*probe // readyz.go
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
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Server{cfg: cfg, svc: cfg.Relay, ids: relay.NewIDScheme(cfg.MsgIDDomain, cfg.MsgIDSecret)}
	s.apiHash = sha256.Sum256([]byte(cfg.APIToken))
	s.adminHash = sha256.Sum256([]byte(cfg.AdminToken))
	s.inflight.max = cmp.Or(cfg.MaxInflightBytes, DefaultMaxInflightBytes)
	s.minBodyRate = cmp.Or(cfg.MinBodyRate, DefaultMinBodyRate)
	s.minBodyGrace = cmp.Or(cfg.MinBodyGrace, DefaultMinBodyGrace)
	s.probes = newProbes(cfg.Probe, cfg.Probes)
	r := chi.NewRouter()
	// Outside the mux (scope.go, s.handler below): closeUnread's rule, the
	// request's logger with req_id, X-Request-Id and the access log.
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
		{roleAPI, http.MethodPost, "/v1/send", s.faultHeader(s.send)},
		{roleAPI, http.MethodPost, "/gmail/v1/users/{userId}/messages/send", s.faultHeader(s.gmailSend)},
		{roleAPI, http.MethodPost, "/upload/gmail/v1/users/{userId}/messages/send", s.faultHeader(s.gmailUpload)},
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
	r.MethodNotAllowed(s.methodNotAllowed)
	s.router = r
	s.handler = s.scope(r)
	return s
}

// codeMethodNotAllowed answers 405: a known path asked with a method it
// does not take (relay.Code has none: the send path never meets it).
const codeMethodNotAllowed relay.Code = "method_not_allowed"

// routeMethods are the methods the router is asked about for a 405's
// Allow header, in the order the header lists them.
var routeMethods = []string{http.MethodDelete, http.MethodGet, http.MethodHead, http.MethodOptions,
	http.MethodPatch, http.MethodPost, http.MethodPut}

// methodNotAllowed answers a known path asked with a method it does not
// take: 405 method_not_allowed with Allow, in the shape its endpoint speaks.
// chi hands a custom 405 handler no methods, so the router is asked again.
func (s *Server) methodNotAllowed(w http.ResponseWriter, r *http.Request) {
	var allow []string
	for _, m := range routeMethods {
		if s.router.Match(chi.NewRouteContext(), m, r.URL.EscapedPath()) {
			allow = append(allow, m)
		}
	}
	msg := clipText(r.Method) + " is not allowed on " + clipText(r.URL.Path)
	if len(allow) > 0 {
		w.Header().Set("Allow", strings.Join(allow, ", "))
		msg += " (allowed: " + strings.Join(allow, ", ") + ")"
	}
	guardError(w, r, &relay.Error{Code: codeMethodNotAllowed, Message: msg})
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
				guardError(w, r, relay.Errorf(relay.CodeUnauthorized, "missing or wrong bearer token"))
				return
			}
			if got < need {
				guardError(w, r, relay.Errorf(relay.CodeForbidden, "this needs the admin token"))
				return
			}
			next.ServeHTTP(w, withRole(r, got))
		})
	}
}

// faultHeader is a send route's middleware for X-Relay-Fault, honoured
// only with --fault-header and the admin token (otherwise ignored): the
// mode it names is forced (Set.Force, which counts it) on every attempt of
// the request, carried on the request's context (faultmodes.WithForced)
// to the mailbox's fault wrapper. An unknown mode, or one the relay does
// not allow, is answered 400; a relay without fault rules answers 503.
// The header never reaches Gmail: the relay builds the message itself.
func (s *Server) faultHeader(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		h := r.Header.Get("X-Relay-Fault")
		if h == "" || !s.cfg.FaultHeader || roleOfRequest(r) != roleAdmin {
			next(w, r)
			return
		}
		d, err := s.forceFault(h)
		if err != nil {
			guardError(w, r, err)
			return
		}
		next(w, r.WithContext(faultmodes.WithForced(r.Context(), d)))
	}
}

// forceFault turns an X-Relay-Fault value into a forced decision.
func (s *Server) forceFault(h string) (faultmodes.Decision, error) {
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
