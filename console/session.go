package console

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Cookie names. The session cookie is scoped to /ui/; the sign-in cookie
// (a double-submit CSRF token for the sign-in form, which has no session
// yet) only to the sign-in path.
const (
	sessionCookie = "gmailrelay_session"
	loginCookie   = "gmailrelay_signin"
	csrfField     = "csrf"
)

// DefaultSessionTTL is how long a session lives after sign-in.
const DefaultSessionTTL = 12 * time.Hour

// maxSessions bounds the store; only a correct token creates a session, so
// this is a guard against a runaway script, not against strangers. At the
// bound the session used least recently is ended, never a random one (a
// script signing in over and over must not sign out the admin at work).
const maxSessions = 10000

// role is what a signed-in person may do; the order matters (admin > viewer).
type role int

const (
	roleNone   role = iota
	roleViewer      // the API token: may look
	roleAdmin       // the admin token: may also resolve and change faults
)

func (r role) String() string {
	switch r {
	case roleAdmin:
		return "admin"
	case roleViewer:
		return "viewer"
	}
	return "none"
}

// session is one sign-in. The store keys it by the SHA-256 of its id, so the
// map never holds a live cookie value.
type session struct {
	role    role
	csrf    string
	expires time.Time
	// used orders sessions by their last use (creation or get): a counter,
	// so the order is exact even when the clock stands still.
	used uint64
}

// sessions is the in-memory session store: a restart signs everyone out.
type sessions struct {
	mu   sync.Mutex
	m    map[[32]byte]*session
	ttl  time.Duration
	now  func() time.Time
	uses uint64 // the last session.used handed out
}

func newSessions(ttl time.Duration, now func() time.Time) *sessions {
	return &sessions{m: map[[32]byte]*session{}, ttl: ttl, now: now}
}

// randomToken returns 32 bytes from crypto/rand, base64url without padding.
func randomToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand panics rather than return short)
	return base64.RawURLEncoding.EncodeToString(b)
}

// create starts a session and returns its id (the cookie value).
func (s *sessions) create(r role) (string, *session) {
	id := randomToken()
	ss := &session{role: r, csrf: randomToken(), expires: s.now().Add(s.ttl)}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if len(s.m) >= maxSessions {
		var lru [32]byte
		var lruUsed uint64
		for k, v := range s.m {
			if !now.Before(v.expires) {
				delete(s.m, k)
			} else if lruUsed == 0 || v.used < lruUsed {
				lru, lruUsed = k, v.used
			}
		}
		if len(s.m) >= maxSessions {
			delete(s.m, lru)
		}
	}
	s.uses++
	ss.used = s.uses
	s.m[sha256.Sum256([]byte(id))] = ss
	return id, ss
}

// get returns the live session with that id, or nil.
func (s *sessions) get(id string) *session {
	if id == "" {
		return nil
	}
	k := sha256.Sum256([]byte(id))
	s.mu.Lock()
	defer s.mu.Unlock()
	ss := s.m[k]
	if ss == nil {
		return nil
	}
	if !s.now().Before(ss.expires) {
		delete(s.m, k)
		return nil
	}
	s.uses++
	ss.used = s.uses
	return ss
}

// end deletes the session with that id; its cookie stops working at once.
func (s *sessions) end(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, sha256.Sum256([]byte(id)))
}

// tokens decides what a token submitted at sign-in may do, exactly as the
// API's bearer check does: both compared in constant time (through their
// SHA-256, so lengths leak nothing), and with no token configured at all
// every sign-in is admin (serve allows that on loopback only).
type tokens struct {
	apiSet, adminSet bool
	api, admin       [32]byte
}

func newTokens(apiToken, adminToken string) tokens {
	return tokens{apiSet: apiToken != "", adminSet: adminToken != "",
		api: sha256.Sum256([]byte(apiToken)), admin: sha256.Sum256([]byte(adminToken))}
}

// open reports whether the relay has no tokens (every request is admin).
func (t tokens) open() bool { return !t.apiSet && !t.adminSet }

func (t tokens) roleOf(token string) role {
	if t.open() {
		return roleAdmin
	}
	if token == "" {
		return roleNone
	}
	sum := sha256.Sum256([]byte(token))
	isAdmin := t.adminSet && subtle.ConstantTimeCompare(sum[:], t.admin[:]) == 1
	isAPI := t.apiSet && subtle.ConstantTimeCompare(sum[:], t.api[:]) == 1
	switch {
	case isAdmin:
		return roleAdmin
	case isAPI:
		return roleViewer
	}
	return roleNone
}

// secure reports whether the browser reached us over TLS, directly or
// through a proxy that says so; cookies are then marked Secure.
func secure(r *http.Request) bool {
	return r.TLS != nil || strings.EqualFold(strings.TrimSpace(r.Header.Get("X-Forwarded-Proto")), "https")
}

func setCookie(w http.ResponseWriter, r *http.Request, name, value, path string, maxAge int) {
	http.SetCookie(w, &http.Cookie{Name: name, Value: value, Path: path, MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: secure(r)})
}

func cookieValue(r *http.Request, name string) string {
	c, err := r.Cookie(name)
	if err != nil {
		return ""
	}
	return c.Value
}

// sameToken compares two CSRF tokens in constant time; empty never matches.
func sameToken(got, want string) bool {
	return got != "" && want != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}
