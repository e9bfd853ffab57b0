package api

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

// TestScopeLoggerIsZerologCtx: the request scope's logger is what
// zerolog.Ctx (and so hlog.FromRequest) finds in a handler's context, it
// carries req_id, the answer's X-Request-Id is that id, and the access log
// line has the fields and level hlog's handlers wrote.
func TestScopeLoggerIsZerologCtx(t *testing.T) {
	var logs bytes.Buffer
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		zerolog.Ctx(r.Context()).Warn().Msg("inside")
		w.WriteHeader(http.StatusTeapot)
		_, _ = w.Write([]byte("12345"))
	})
	s := New(Config{Logger: zerolog.New(&logs), Console: inner})
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://localhost/ui", nil))
	id := rec.Header().Get("X-Request-Id")
	if len(id) != 20 {
		t.Fatalf("X-Request-Id %q, want an xid", id)
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("want the handler's line and the access line, got %q", logs.String())
	}
	var in, access map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &in); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(lines[1]), &access); err != nil {
		t.Fatal(err)
	}
	if in["message"] != "inside" || in["level"] != "warn" || in["req_id"] != id {
		t.Errorf("handler's line %v: want message inside, level warn, req_id %s", in, id)
	}
	want := map[string]any{"level": "info", "message": "request", "req_id": id, "method": "GET", "path": "/ui",
		"status": float64(http.StatusTeapot), "size": float64(5)}
	for k, v := range want {
		if access[k] != v {
			t.Errorf("access line %s = %v, want %v (line %v)", k, access[k], v, access)
		}
	}
	if _, ok := access["took"].(float64); !ok {
		t.Errorf("access line has no took: %v", access)
	}
}

// TestScopeRequestIDsDiffer: every request gets its own id and logger (a
// shared one would mix req_ids).
func TestScopeRequestIDsDiffer(t *testing.T) {
	s := New(Config{Logger: zerolog.Nop()})
	seen := map[string]bool{}
	for range 3 {
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://localhost/healthz", nil))
		id := rec.Header().Get("X-Request-Id")
		if id == "" || seen[id] {
			t.Fatalf("request id %q repeated or missing", id)
		}
		seen[id] = true
	}
}

// TestScopeAccessLineBytes: the access line is written byte for byte as
// the request logger (the server's, with req_id) writes it, its fields in
// the same order, also when no handler asked for that logger.
func TestScopeAccessLineBytes(t *testing.T) {
	for _, name := range []string{"unused", "used"} {
		t.Run(name, func(t *testing.T) {
			var logs bytes.Buffer
			inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if name == "used" {
					_ = zerolog.Ctx(r.Context())
				}
				_, _ = w.Write([]byte("ok"))
			})
			s := New(Config{Logger: zerolog.New(&logs).With().Str("svc", "relay").Logger(), Console: inner})
			rec := httptest.NewRecorder()
			s.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://localhost/ui", nil))
			id := rec.Header().Get("X-Request-Id")
			want := `{"level":"info","svc":"relay","req_id":"` + id + `","method":"GET","path":"/ui","status":200,"size":2,"took":`
			if got := logs.String(); !strings.HasPrefix(got, want) || !strings.HasSuffix(got, `,"message":"request"}`+"\n") {
				t.Errorf("access line %q, want it to start %q and end with the message", got, want)
			}
		})
	}
}
