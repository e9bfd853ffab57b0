// Package console is the review console in the browser (docs/console.md):
// server-rendered pages under /ui/ where a person signs in with a token and
// works through the review queue with the evidence in front of them — the
// searches, the attempts, the handle's trust — and decides mark-sent,
// retry or abandon with a note.
//
// Templates and assets are embedded; there is no build step. Every value
// from outside goes through html/template's contextual escaping. Sessions
// live in memory (a restart signs everyone out); every POST carries the
// session's CSRF token. The console reads and acts only through Relay, so
// it depends on the relay and never the other way round.
package console

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"html/template"
	"io/fs"
	"net/http"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/relay"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Actor is written on the resolved lines of decisions taken in the console.
const Actor = "ui"

// Config wires a Console.
type Config struct {
	// Relay is what the console reads and acts on (see Adapt).
	Relay Relay
	// APIToken may look; AdminToken may also resolve and change faults.
	// With neither set, every sign-in is admin, as the API admits every
	// request as admin then.
	APIToken, AdminToken string
	// SessionTTL is how long a sign-in lasts (default DefaultSessionTTL).
	SessionTTL time.Duration
	// Now is the clock of session expiry and of the sign-in throttle
	// (default time.Now).
	Now    func() time.Time
	Logger zerolog.Logger
}

// Console is the http.Handler serving /ui/.
type Console struct {
	relay    Relay
	tokens   tokens
	sessions *sessions
	throttle *throttle // failed sign-ins per client address (throttle.go)
	pages    map[string]*template.Template
	chart    *chartCache
	logger   zerolog.Logger
	mux      *http.ServeMux
}

// New builds the console. It panics only if the embedded templates are
// broken (a build defect, caught by every test).
func New(cfg Config) *Console {
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = DefaultSessionTTL
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	c := &Console{relay: cfg.Relay, tokens: newTokens(cfg.APIToken, cfg.AdminToken),
		sessions: newSessions(cfg.SessionTTL, cfg.Now), throttle: newThrottle(cfg.Now), pages: parsePages(), chart: &chartCache{},
		logger: cfg.Logger}
	m := http.NewServeMux()
	static, _ := fs.Sub(staticFS, "static")
	m.Handle("GET /ui/static/", http.StripPrefix("/ui/static/", cacheFor(http.FileServerFS(static))))
	m.HandleFunc("GET /ui/login", c.loginPage)
	m.HandleFunc("POST /ui/login", c.login)
	m.HandleFunc("POST /ui/logout", c.post(roleViewer, c.logout))
	m.HandleFunc("GET /ui/{$}", c.look(c.overview))
	m.HandleFunc("GET /ui/review", c.look(c.review))
	m.HandleFunc("GET /ui/jobs", c.look(c.jobs))
	m.HandleFunc("GET /ui/jobs/{id}", c.look(c.job))
	m.HandleFunc("POST /ui/jobs/{id}/resolve", c.post(roleAdmin, c.resolve))
	m.HandleFunc("GET /ui/faults", c.look(c.faults))
	m.HandleFunc("POST /ui/faults", c.post(roleAdmin, c.addFault))
	m.HandleFunc("POST /ui/faults/{id}/remove", c.post(roleAdmin, c.removeFault))
	m.HandleFunc("GET /ui/log", c.look(c.logTail))
	m.HandleFunc("/ui/", func(w http.ResponseWriter, r *http.Request) {
		c.fail(w, r, nil, errNotFound("There is no console page at this address."))
	})
	c.mux = m
	return c
}

// ServeHTTP serves paths under /ui/ (the full path: mount it at /ui/ without
// stripping the prefix). /ui itself redirects to /ui/.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "+
		"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin")
	if r.URL.Path == "/ui" {
		http.Redirect(w, r, "/ui/", http.StatusMovedPermanently)
		return
	}
	c.mux.ServeHTTP(w, r)
}

func cacheFor(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=300")
		h.ServeHTTP(w, r)
	})
}

// page is a handler that runs with a session and ends in an error or nil.
type page func(w http.ResponseWriter, r *http.Request, s *session) error

// look serves a GET page to any signed-in person; without a session it
// sends the browser to the sign-in form.
func (c *Console) look(p page) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s := c.sessions.get(cookieValue(r, sessionCookie))
		if s == nil {
			http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
			return
		}
		w.Header().Set("Cache-Control", "no-store")
		if err := p(w, r, s); err != nil {
			c.fail(w, r, s, err)
		}
	}
}

// post serves a form POST: a CSRF token in the form (403 without, session
// or not: every POST carries one), a session (401 without, or ended), the
// session's token (403 when it is another), and at least the role need
// (403).
func (c *Console) post(need role, p page) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s := c.sessions.get(cookieValue(r, sessionCookie))
		if err := parseForm(w, r); err != nil {
			c.fail(w, r, s, err)
			return
		}
		badToken := errForbidden("This form's security token is missing or wrong (an old tab, or a request from another site). Nothing was changed; reload the page and try again.")
		switch tok := r.PostForm.Get(csrfField); {
		case tok == "":
			c.fail(w, r, s, badToken)
			return
		case s == nil:
			c.fail(w, r, nil, &pageError{status: http.StatusUnauthorized, title: "Not signed in",
				msg: "Your session has ended or never began. Sign in again; nothing was changed."})
			return
		case !sameToken(tok, s.csrf):
			c.fail(w, r, s, badToken)
			return
		}
		if s.role < need {
			c.fail(w, r, s, errForbidden("You signed in with the API token: you may look, but only the admin token may act. Nothing was changed."))
			return
		}
		if err := p(w, r, s); err != nil {
			c.fail(w, r, s, err)
		}
	}
}

// maxFormBytes bounds a form body; notes are short.
const maxFormBytes = 64 << 10

func parseForm(w http.ResponseWriter, r *http.Request) error {
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		return errBadInput("The form could not be read (too large or malformed).")
	}
	return nil
}

// pageError is an error shown as a page with its status.
type pageError struct {
	status int
	title  string
	msg    string
}

func (e *pageError) Error() string { return e.title + ": " + e.msg }

func errNotFound(msg string) error { return &pageError{http.StatusNotFound, "Not found", msg} }
func errForbidden(msg string) error {
	return &pageError{http.StatusForbidden, "Not allowed", msg}
}
func errBadInput(msg string) error { return &pageError{http.StatusBadRequest, "Bad input", msg} }

// fail renders err as an error page. Relay errors keep their meaning (404,
// 400, 409); anything else is logged in full and shown as "internal error".
func (c *Console) fail(w http.ResponseWriter, r *http.Request, s *session, err error) {
	var pe *pageError
	var re *relay.Error
	switch {
	case errors.As(err, &pe):
	case errors.Is(err, gmailrelay.ErrNotFound):
		pe = &pageError{http.StatusNotFound, "Not found", "There is no job with that Message-ID in the acceptance log."}
	case errors.As(err, &re) && re.Code == relay.CodeNotFound:
		pe = &pageError{http.StatusNotFound, "Not found", re.Message}
	case errors.As(err, &re) && re.Code == relay.CodeInvalid:
		pe = &pageError{http.StatusBadRequest, "Bad input", re.Message}
	case errors.As(err, &re) && (re.Code == relay.CodeConflict || re.Code == relay.CodeInFlight):
		pe = &pageError{http.StatusConflict, "Not possible now", re.Message}
	case errors.As(err, &re) && (re.Code == relay.CodeRateLimited || re.Code == relay.CodeUnavailable):
		pe = &pageError{http.StatusServiceUnavailable, "Try again later", re.Message}
	default:
		c.logger.Error().Err(err).Str("path", r.URL.Path).Msg("console page failed")
		pe = &pageError{http.StatusInternalServerError, "Internal error", "Something went wrong on the relay; the details are in its log."}
	}
	w.Header().Set("Cache-Control", "no-store")
	c.render(w, r, s, pe.status, "error", map[string]any{"Title": pe.title, "Message": pe.msg, "Status": pe.status})
}

// view is what every page's layout gets.
type view struct {
	Title  string
	Nav    string
	Role   string
	Admin  bool
	CSRF   string
	Mode   string
	Signed bool
	Data   any
}

// render executes the named page into a buffer first, so a template error
// never leaves half a page on the wire.
func (c *Console) render(w http.ResponseWriter, r *http.Request, s *session, status int, name string, data any) {
	v := view{Data: data, Nav: name, Mode: c.relay.Mode()}
	if s != nil {
		v.Signed, v.Role, v.Admin, v.CSRF = true, s.role.String(), s.role == roleAdmin, s.csrf
	}
	var buf bytes.Buffer
	if err := c.pages[name].ExecuteTemplate(&buf, "layout", v); err != nil {
		c.logger.Error().Err(err).Str("page", name).Msg("render console page")
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// Warm reads the last hour of the log into the overview chart's counts, so
// the first overview after a start does not pay for it (about 50 ms with
// 60 sends a minute; see docs/benchmarks.md). serve runs it in the
// background at start; errors only mean the first overview reads instead.
func (c *Console) Warm(ctx context.Context) {
	st, err := c.relay.Stats(ctx)
	if err != nil {
		return
	}
	_, _ = c.chart.build(ctx, c.relay, c.relay.Now(), st.Lines)
}
