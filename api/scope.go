package api

import (
	"context"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/rs/zerolog/hlog"
)

// scope wraps the router in the middlewares every request passes,
// outermost first:
//   - closeUnread (guard.go), which needs the server's own ResponseWriter
//     to end a connection whose body was not read;
//   - zerolog's hlog: the request's logger (zerolog.Ctx, hlog.FromRequest)
//     carrying req_id, the X-Request-Id header, and the access line
//     "request" at info with method, path, status, size and took, written
//     also when the handler panics.
func (s *Server) scope(mux chi.Router) http.Handler {
	access := hlog.AccessHandler(func(r *http.Request, status, size int, took time.Duration) {
		hlog.FromRequest(r).Info().Str("method", r.Method).Str("path", clipText(r.URL.Path)).
			Int("status", status).Int("size", size).Dur("took", took).Msg("request")
	})
	var h http.Handler = mux
	h = access(h)
	h = hlog.RequestIDHandler("req_id", "X-Request-Id")(h)
	h = hlog.NewHandler(s.cfg.Logger)(h)
	return closeUnread(h)
}

// roleKey is the context key of the role authenticate granted a request.
type roleKey struct{}

// withRole returns r carrying the role authenticate granted it.
func withRole(r *http.Request, got role) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), roleKey{}, got))
}

// roleOfRequest is the role authenticate granted r (roleNone if none).
func roleOfRequest(r *http.Request) role {
	got, _ := r.Context().Value(roleKey{}).(role)
	return got
}
