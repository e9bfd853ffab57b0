package api

import (
	"context"
	"io"
	"mime"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gmailrelay/gmailrelay/relay"
)

// The guards every request passes before a handler reads anything
// (docs/operations.md, "Security model"):
//
//  1. closeUnread (outermost, in the request scope of scope.go): a request
//     whose body was not read to the end gets Connection: close on its
//     answer instead of having its body drained, so a refused client cannot
//     hold the server with a slow body.
//  2. routeEscaped (api.go): routes on the escaped path, so that a path
//     parameter is decoded exactly once.
//  3. sameOrigin: a request a browser sent from another site is refused
//     (Origin, Sec-Fetch-Site); a tokenless relay also refuses any Host
//     that is not a loopback name (DNS rebinding).
//  4. authenticate (api.go): the token, from the headers only.
//  5. bodyGuard: the Content-Type the endpoint takes (415), the size from
//     Content-Length (413) and room for it among the bytes in flight (503);
//     then the body meter (bodymeter.go) charges the bytes as they arrive
//     (503 when they no longer fit) and cuts a body slower than
//     --min-body-rate (408).

// codeUnsupportedType answers 415: a body of a Content-Type the endpoint
// does not take.
const codeUnsupportedType relay.Code = "unsupported_media_type"

// DefaultMaxInflightBytes bounds the request bodies being handled at once
// when Config.MaxInflightBytes is zero. A message costs the relay about six
// times its size while it is handled (the body, its normalised copy, the
// log's copy, Gmail's base64): measured on the real binary, one 24 MB send
// peaks at 146 MB resident and two at once at 294 MB, so the default lets
// one large message in at a time, beside any number of small ones
// (TestEmulatorRSSUnder16LargeSends in cmd/gmailrelay).
const DefaultMaxInflightBytes = 32 << 20

// maxSmallJSON bounds the bodies of the admin and resolve endpoints.
const maxSmallJSON = 1 << 20

// closeUnread's rule: the connection of a request answered before its
// body was read to the end (a refusal: 401, 403, 413, 415, 503) is ended:
// the answer says Connection: close and the connection's read deadline is
// set to now, so net/http does not read (up to 256 KB of) the rest of the
// body first, at whatever pace the client chooses. It is the outermost
// middleware (scope.go), so it has the server's own ResponseWriter.
func closeUnread(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !hasBody(r) {
			next.ServeHTTP(w, r)
			return
		}
		// A copy of the request: the server keeps the original, whose
		// Body it inspects after the handler.
		body := &eofBody{ReadCloser: r.Body}
		r = r.WithContext(r.Context())
		r.Body = body
		next.ServeHTTP(&unreadWriter{ResponseWriter: w, body: body}, r)
	})
}

// unreadWriter applies closeUnread's rule when the answer starts.
type unreadWriter struct {
	http.ResponseWriter
	body    *eofBody
	started bool
}

// WriteHeader implements http.ResponseWriter.
func (w *unreadWriter) WriteHeader(status int) {
	if !w.started && status >= 200 {
		w.started = true
		if !w.body.done() {
			w.Header().Set("Connection", "close")
			_ = http.NewResponseController(w.ResponseWriter).SetReadDeadline(time.Now())
		}
	}
	w.ResponseWriter.WriteHeader(status)
}

// Write implements http.ResponseWriter.
func (w *unreadWriter) Write(p []byte) (int, error) {
	if !w.started {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(p)
}

// Flush implements http.Flusher.
func (w *unreadWriter) Flush() {
	if !w.started {
		w.WriteHeader(http.StatusOK)
	}
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap lets http.ResponseController reach the connection.
func (w *unreadWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// eofBody is a request body that remembers whether it was read to EOF.
type eofBody struct {
	io.ReadCloser
	mu  sync.Mutex
	eof bool
}

func (b *eofBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.mu.Lock()
		b.eof = true
		b.mu.Unlock()
	}
	return n, err
}

func (b *eofBody) done() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.eof
}

// tokenless reports whether the relay runs without tokens (loopback only).
func (s *Server) tokenless() bool { return s.cfg.APIToken == "" && s.cfg.AdminToken == "" }

// sameOrigin refuses requests a browser made on another site's behalf:
// an Origin that is not the relay's own, Sec-Fetch-Site cross-site or
// same-site (another port of the same host is another origin). Without
// tokens, where being able to reach the port is the only credential, the
// Host must also be a loopback name or address, so a page whose host name
// rebinds to 127.0.0.1 gets nothing.
func (s *Server) sameOrigin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.tokenless() && !loopbackHost(r.Host) {
			guardError(w, r, relay.Errorf(relay.CodeForbidden,
				"Host %q is not a loopback name: a relay without tokens answers only to localhost, 127.0.0.1 and [::1] (a DNS rebinding page would use its own name)", clipText(r.Host)))
			return
		}
		if o := r.Header.Get("Origin"); o != "" && !ownOrigin(o, r.Host) && !forwardedOrigin(o, r) {
			guardError(w, r, relay.Errorf(relay.CodeForbidden,
				"cross-origin request refused: Origin %q is not this relay's own origin (http://%s)", clipText(o), clipText(r.Host)))
			return
		}
		switch site := strings.ToLower(r.Header.Get("Sec-Fetch-Site")); site {
		case "cross-site", "same-site":
			guardError(w, r, relay.Errorf(relay.CodeForbidden,
				"cross-origin request refused: the browser says Sec-Fetch-Site: %s", site))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// loopbackHost reports whether a Host header names this machine's loopback:
// localhost, 127.0.0.0/8 or [::1], with or without a port.
func loopbackHost(host string) bool {
	if rest, ok := strings.CutPrefix(host, "["); ok {
		addr, port, ok := strings.Cut(rest, "]")
		if !ok || (port != "" && !validPort(port)) {
			return false
		}
		ip := net.ParseIP(addr)
		return ip != nil && ip.To4() == nil && ip.Equal(net.IPv6loopback)
	}
	h := host
	if i := strings.LastIndexByte(h, ':'); i >= 0 {
		if !validPort(h[i:]) {
			return false
		}
		h = h[:i]
	}
	if strings.Contains(h, ":") {
		return false // an IPv6 address must be bracketed, as the bracketed branch requires
	}
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.To4() != nil && ip.To4()[0] == 127
}

// validPort reports whether s is ":" followed by a port number (or nothing).
func validPort(s string) bool {
	if s == ":" {
		return true
	}
	if len(s) < 2 || len(s) > 6 || s[0] != ':' {
		return false
	}
	n, err := strconv.Atoi(s[1:])
	return err == nil && n >= 0 && n <= 65535 && s[1] != '+' && s[1] != '-'
}

// ownOrigin reports whether origin is the relay's own: http or https and
// the very host (and port) the request was sent to.
func ownOrigin(origin, host string) bool {
	for _, scheme := range []string{"http://", "https://"} {
		if rest, ok := cutPrefixFold(origin, scheme); ok {
			return rest != "" && strings.EqualFold(rest, host)
		}
	}
	return false
}

// forwardedOrigin reports whether origin is the host a reverse proxy says
// the browser asked for (X-Forwarded-Host), as for a console behind TLS. A
// page on another site cannot set that header on a request without a CORS
// preflight, which the relay never grants.
func forwardedOrigin(origin string, r *http.Request) bool {
	fh := r.Header.Get("X-Forwarded-Host")
	return fh != "" && ownOrigin(origin, fh)
}

func cutPrefixFold(s, prefix string) (string, bool) {
	if len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix) {
		return s[len(prefix):], true
	}
	return "", false
}

// bodyRule is what one endpoint accepts as a body.
type bodyRule struct {
	types []string // media types, lower case
	limit int64
}

// bodyRuleFor says what the endpoint of r accepts: every endpoint that reads
// JSON takes application/json only; /v1/send also message/rfc822; the
// Gmail-compatible paths what Gmail takes. Requests without a body (GET,
// DELETE, POST /admin/sweep) need no Content-Type.
func bodyRuleFor(r *http.Request) bodyRule {
	p := r.URL.Path
	switch {
	case p == "/v1/send":
		if mediaType(r) == "message/rfc822" {
			return bodyRule{types: typesRFC822, limit: relay.MaxMessageBytes}
		}
		return bodyRule{types: typesSend, limit: MaxJSONBytes}
	case strings.HasPrefix(p, "/upload/gmail/"):
		switch r.URL.Query().Get("uploadType") {
		case "media":
			return bodyRule{types: typesRFC822, limit: relay.MaxMessageBytes}
		case "multipart":
			return bodyRule{types: typesMultipart, limit: relay.MaxMessageBytes + 1<<20}
		}
		return bodyRule{types: typesUpload, limit: relay.MaxMessageBytes + 1<<20}
	case strings.HasPrefix(p, "/gmail/"):
		return bodyRule{types: typesJSON, limit: MaxJSONBytes}
	}
	return bodyRule{types: typesJSON, limit: maxSmallJSON}
}

// The media types of the body rules, built once (never modified).
var (
	typesJSON      = []string{"application/json"}
	typesRFC822    = []string{"message/rfc822"}
	typesMultipart = []string{"multipart/related"}
	typesSend      = []string{"application/json", "message/rfc822"}
	typesUpload    = []string{"message/rfc822", "multipart/related"}
)

func mediaType(r *http.Request) string { return parseMediaType(r.Header.Get("Content-Type")) }

// parseMediaType is the lower-case media type of a Content-Type value, ""
// when it does not parse. The types the relay takes, written exactly so
// (as clients send them), are answered without mime.ParseMediaType's
// parameter map: for them it returns the value itself.
func parseMediaType(v string) string {
	switch v {
	case "application/json", "message/rfc822":
		return v
	}
	mt, _, err := mime.ParseMediaType(v)
	if err != nil {
		return ""
	}
	return strings.ToLower(mt)
}

// hasBody reports whether the request carries (or may carry) a body.
func hasBody(r *http.Request) bool {
	return r.ContentLength > 0 || (r.ContentLength < 0 && r.Body != nil && r.Body != http.NoBody)
}

// bodyGuard checks a request's body from its headers alone, before anything
// reads it: the endpoint's Content-Type (415), its size limit against
// Content-Length (413), and room for it among the bytes in flight now (503
// + Retry-After when the bytes other bodies have delivered leave too little).
// It then meters the body as it is read (bodymeter.go).
func (s *Server) bodyGuard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !hasBody(r) {
			next.ServeHTTP(w, r)
			return
		}
		rule := bodyRuleFor(r)
		mt := mediaType(r)
		ok := false
		for _, t := range rule.types {
			ok = ok || mt == t
		}
		if !ok {
			got := r.Header.Get("Content-Type")
			if got == "" {
				got = "none"
			}
			guardError(w, r, &relay.Error{Code: codeUnsupportedType, Field: "Content-Type",
				Message: "Content-Type " + strconv.Quote(clipText(got)) + " is not accepted here; send " + strings.Join(rule.types, " or ")})
			return
		}
		if r.ContentLength > rule.limit {
			guardError(w, r, &relay.Error{Code: relay.CodeTooLarge, Field: fieldRequest,
				Message: "request body of " + strconv.FormatInt(r.ContentLength, 10) + " bytes is larger than " + strconv.FormatInt(rule.limit, 10) + " bytes"})
			return
		}
		weight := r.ContentLength
		if weight < 0 {
			weight = rule.limit
		}
		if !s.inflight.fits(weight) {
			guardError(w, r, errInflightFull)
			return
		}
		body := s.meterBody(w, r)
		defer body.finish()
		r = r.WithContext(context.WithValue(r.Context(), meterKey{}, body))
		r.Body = http.MaxBytesReader(w, body, rule.limit)
		next.ServeHTTP(w, r)
	})
}

// guardError answers a request refused before its handler (a guard, the
// token, a method the path does not take) in the shape its endpoint
// speaks: Gmail's error JSON on the Gmail-compatible paths, the relay's
// otherwise.
func guardError(w http.ResponseWriter, r *http.Request, err error) {
	if strings.HasPrefix(r.URL.Path, "/gmail/") || strings.HasPrefix(r.URL.Path, "/upload/gmail/") {
		writeGmailError(w, r, err)
		return
	}
	writeError(w, r, err)
}

// maxLoggedPath bounds the path in access-log lines and error messages: a
// client chooses it, unauthenticated.
const maxLoggedPath = 256

// clipText bounds client-chosen text before it is logged or echoed.
func clipText(s string) string {
	if len(s) <= maxLoggedPath {
		return s
	}
	return s[:maxLoggedPath] + "…(" + strconv.Itoa(len(s)) + " bytes)"
}
