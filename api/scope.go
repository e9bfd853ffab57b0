package api

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/rs/xid"
	"github.com/rs/zerolog"
)

// The request scope: what the outermost middleware keeps per request, in
// one allocation. It replaces four middlewares (closeUnread's body and
// writer wrappers, and zerolog hlog's logger, request id and access log
// handlers) and the auth role's context value, each of which cloned the
// request (Request.WithContext) or allocated wrappers of its own. It runs
// outside chi and hands chi its routing context (pooled, as chi pools its
// own), so chi does not clone the request either: one clone per request
// is left.
//
// What a request sees is unchanged: zerolog.Ctx(r.Context()) is the
// request's logger carrying req_id, the answer carries X-Request-Id, the
// access log line "request" has method, path, status, size and took at
// info, and closeUnread's rule holds (see guard.go).

// reqScope is one request's scope. It is its own context (ctx), response
// writer (w) and request body wrapper (body).
type reqScope struct {
	ctx  scopeCtx
	rctx *chi.Context
	// parent is the server's logger and id the request id; logger, the
	// request's own (parent with req_id), is built on first use
	// (requestLogger): zerolog's With allocates a 500-byte context, and a
	// request that logs nothing but its access line needs none.
	parent  *zerolog.Logger
	id      string
	logOnce sync.Once
	logger  zerolog.Logger
	role    role
	w       scopeWriter
	body    eofBody
	meter   *meteredBody // the body guard's (bodymeter.go); nil without a body
	// idHeader backs the X-Request-Id header's value slice.
	idHeader [1]string
}

// scopeKey is the context key of a request's *reqScope.
type scopeKey struct{}

// scopeCtx answers the scope and the request logger without a context
// value of their own.
type scopeCtx struct {
	context.Context
	s *reqScope
}

// Value implements context.Context: the scope for scopeKey, the request
// logger for zerolog's own key (so zerolog.Ctx finds it), chi's routing
// context for chi's key, else the parent's.
func (c *scopeCtx) Value(key any) any {
	switch key {
	case scopeKey{}:
		return c.s
	case chi.RouteCtxKey:
		return c.s.rctx
	case zerologKey:
		return c.s.requestLogger()
	}
	return c.Context.Value(key)
}

// zerologKey is the key zerolog.Ctx looks a logger up by (an unexported
// type of zerolog's), learnt once by asking zerolog.Ctx itself.
// TestScopeLoggerIsZerologCtx fails if zerolog ever finds it elsewhere.
var zerologKey = func() any {
	p := &keyProbe{Context: context.Background()}
	_ = zerolog.Ctx(p)
	return p.key
}()

type keyProbe struct {
	context.Context
	key any
}

func (p *keyProbe) Value(key any) any {
	p.key = key
	return nil
}

// requestLogger is the request's logger, the server's with req_id, built
// on its first use (safe from any goroutine of the request).
func (s *reqScope) requestLogger() *zerolog.Logger {
	s.logOnce.Do(s.buildLogger)
	return &s.logger
}

func (s *reqScope) buildLogger() { s.logger = s.parent.With().Str("req_id", s.id).Logger() }

// scopeOf returns r's scope, or nil for a request that did not pass the
// scope middleware (a handler called directly).
func scopeOf(r *http.Request) *reqScope {
	s, _ := r.Context().Value(scopeKey{}).(*reqScope)
	return s
}

// roleOfRequest is the role authenticate granted r (roleNone if none).
func roleOfRequest(r *http.Request) role {
	if s := scopeOf(r); s != nil {
		return s.role
	}
	return roleNone
}

// routeContexts pools chi's routing contexts, as chi.Mux does for its own.
var routeContexts = sync.Pool{New: func() any { return chi.NewRouteContext() }}

// scope is the outermost middleware, around the router mux: it builds the
// request's scope, sets X-Request-Id and writes the access log line when
// the handler is done (also when it panics, as hlog's AccessHandler did).
func (s *Server) scope(mux chi.Router) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sc := &reqScope{}
		sc.ctx = scopeCtx{Context: r.Context(), s: sc}
		sc.rctx = routeContexts.Get().(*chi.Context)
		sc.rctx.Reset()
		sc.rctx.Routes = mux
		id := xid.New().String()
		sc.parent, sc.id = &s.cfg.Logger, id
		sc.idHeader[0] = id
		w.Header()["X-Request-Id"] = sc.idHeader[:]
		sc.w = scopeWriter{ResponseWriter: w}
		r = r.WithContext(&sc.ctx)
		if hasBody(r) {
			sc.body.ReadCloser = r.Body
			r.Body = &sc.body
			sc.w.body = &sc.body
		}
		defer func() {
			// The same line as sc.requestLogger().Info() writes: the
			// parent's fields, then req_id, then the event's.
			s.cfg.Logger.Info().Str("req_id", id).Str("method", r.Method).Str("path", clipText(r.URL.Path)).Int("status", sc.w.status).
				Int("size", sc.w.size).Dur("took", time.Since(start)).Msg("request")
		}()
		mux.ServeHTTP(&sc.w, r)
		// As chi.Mux does: back to the pool once the handler returned (not
		// after a panic).
		sc.rctx.Reset()
		routeContexts.Put(sc.rctx)
		sc.rctx = nil
	})
}

// scopeWriter records the answer's status and size for the access log,
// and applies closeUnread's rule when body is set (the request has one):
// an answer given before the body was read to the end says
// Connection: close and ends the connection's reads.
type scopeWriter struct {
	http.ResponseWriter
	body   *eofBody
	status int
	size   int
}

// WriteHeader implements http.ResponseWriter.
func (w *scopeWriter) WriteHeader(status int) {
	if w.status != 0 {
		return
	}
	w.status = status
	if w.body != nil && !w.body.done() {
		w.Header().Set("Connection", "close")
		_ = http.NewResponseController(w.ResponseWriter).SetReadDeadline(time.Now())
	}
	w.ResponseWriter.WriteHeader(status)
}

// Write implements http.ResponseWriter.
func (w *scopeWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	n, err := w.ResponseWriter.Write(p)
	w.size += n
	return n, err
}

// Unwrap lets http.ResponseController reach the connection.
func (w *scopeWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Flush implements http.Flusher.
func (w *scopeWriter) Flush() {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
