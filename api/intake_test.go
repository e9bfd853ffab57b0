package api_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"google.golang.org/api/gmail/v1"
	"google.golang.org/api/googleapi"

	"github.com/gmailrelay/gmailrelay/acceptlog"
	"github.com/gmailrelay/gmailrelay/api"
	"github.com/gmailrelay/gmailrelay/relay"
)

func TestEmulatorRawAndRFC822Intake(t *testing.T) {
	e := newEnv(t, envOpts{})
	id := relay.MessageID("raw-key", domain)
	msg := "From: me@example.org\r\nTo: a@example.org\r\nSubject: raw\r\nMessage-ID: " + id + "\r\n\r\nhello\r\n"
	r := e.must("POST", "/v1/send", apiToken, map[string]any{"key": "raw-key", "raw": base64.RawURLEncoding.EncodeToString([]byte(msg))})
	if r.status != 200 || r.body["message_id"] != id {
		t.Fatalf("raw JSON: %d %s", r.status, r.raw)
	}
	// message/rfc822 without a Message-ID: the key's is injected.
	r = e.must("POST", "/v1/send", apiToken, []byte("To: b@example.org\r\nSubject: rfc822\r\n\r\nhi\r\n"), "Idempotency-Key", "rfc822-key")
	want := relay.MessageID("rfc822-key", domain)
	if r.status != 200 || r.body["message_id"] != want || e.Emulator.Count(want) != 1 {
		t.Fatalf("rfc822: %d %s", r.status, r.raw)
	}
	// A Message-ID that is not the key's is refused.
	r = e.must("POST", "/v1/send", apiToken, []byte("To: b@example.org\r\nMessage-ID: <other@x.org>\r\n\r\nhi\r\n"), "Idempotency-Key", "rfc822-key-2")
	if r.status != 400 {
		t.Errorf("mismatched Message-ID: %d %s, want 400", r.status, r.raw)
	}
}

func TestTooLargeIs413(t *testing.T) {
	e := newEnv(t, envOpts{})
	big := strings.Repeat("a", api.MaxJSONBytes+10)
	r := e.must("POST", "/v1/send", apiToken, `{"key":"big","to":"a@example.org","text":"`+big+`"}`)
	if r.status != 413 {
		t.Errorf("status %d, want 413", r.status)
	}
}

func TestEmulatorQuotaSpentIs429AndSendsNothing(t *testing.T) {
	e := newEnv(t, envOpts{quota: 100}) // one send a minute
	if r := e.must("POST", "/v1/send", apiToken, sendBody("q1")); r.status != 200 {
		t.Fatalf("first: %d %s", r.status, r.raw)
	}
	b := sendBody("q2")
	b["when_busy"] = "reject" // the outbox's default would queue it
	r := e.must("POST", "/v1/send", apiToken, b)
	if r.status != 429 || r.header.Get("Retry-After") == "" {
		t.Fatalf("second: %d %v, want 429 with Retry-After", r.status, r.header)
	}
	if got := e.Emulator.Count(relay.MessageID("q2", domain)); got != 0 {
		t.Errorf("emulator holds %d for the refused send, want 0", got)
	}
	if _, err := e.Log.Get(context.Background(), relay.MessageID("q2", domain)); !errors.Is(err, acceptlog.ErrNotFound) {
		t.Errorf("refused send left a job: %v", err)
	}
}

// TestJobIDDecodedOnce: a Message-ID holding a '%' is found by its own
// escaped URL and by nothing else, and a resolve on that URL acts on it,
// never on the job its once-more-decoded form names.
func TestJobIDDecodedOnce(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.addFault(map[string]any{"mode": "forward-then-drop-response", "drop": "504", "channel": "billing"})
	const pct, plain = "<%6Aob-1@x.example>", "<job-1@x.example>"
	for _, id := range []string{pct, plain} {
		msg := "From: me@example.org\r\nTo: a@example.org\r\nSubject: s\r\nMessage-ID: " + id + "\r\n\r\nhi\r\n"
		e.must("POST", "/v1/send", apiToken, map[string]any{"channel": "billing", "raw": base64.RawURLEncoding.EncodeToString([]byte(msg))})
		if _, err := e.Log.Get(context.Background(), id); err != nil {
			t.Fatalf("send %s: %v", id, err)
		}
	}
	// Both end in review: forwarded, the answer lost, the channel reviews unknowns.
	e.Clock.Advance(2 * time.Minute)
	if r := e.must("POST", "/admin/sweep", adminToken, nil); r.status != 200 {
		t.Fatalf("sweep: %d %s", r.status, r.raw)
	}
	for _, id := range []string{pct, plain} {
		if j, _ := e.job(id); j.State != acceptlog.StateReview {
			t.Fatalf("%s after sweep: %s, want review", id, j.State)
		}
	}
	get := func(path string) string {
		t.Helper()
		r := e.must("GET", path, apiToken, nil)
		if r.status != 200 {
			return fmt.Sprintf("status %d", r.status)
		}
		s, _ := r.body["message_id"].(string)
		return s
	}
	if got := get("/v1/jobs/" + url.PathEscape(pct)); got != pct {
		t.Errorf("GET by the escaped %s: got %q", pct, got)
	}
	if got := get("/v1/jobs/" + url.PathEscape(plain)); got != plain {
		t.Errorf("GET by the escaped %s: got %q", plain, got)
	}
	// The once-decoded path must not reach the plain job by a second decode.
	if got := get("/v1/jobs/" + url.PathEscape(url.PathEscape(plain))); got == plain {
		t.Errorf("GET by a doubly escaped %s found it", plain)
	}
	r := e.must("POST", "/v1/jobs/"+url.PathEscape(pct)+"/resolve", adminToken, map[string]any{"action": "mark-sent", "note": "seen"})
	if r.status != 200 || r.body["message_id"] != pct {
		t.Fatalf("resolve %s: %d %s", pct, r.status, r.raw)
	}
	if j, _ := e.job(pct); j.State != acceptlog.StateSent {
		t.Errorf("%s after its resolve: %s, want sent", pct, j.State)
	}
	if j, _ := e.job(plain); j.State != acceptlog.StateReview {
		t.Errorf("%s after the other job's resolve: %s, want review (untouched)", plain, j.State)
	}
}

// TestSearchInjectionIDsRefusedAtIntake: Message-IDs holding Gmail search
// syntax are refused with 400 naming message_id, on the raw intake and the
// Gmail-compatible path, and nothing reaches Gmail or the log.
func TestSearchInjectionIDsRefusedAtIntake(t *testing.T) {
	e := newEnv(t, envOpts{})
	svc := e.gmailClient()
	for _, id := range []string{"<p}q@attacker.example>", "<x@[}OR(in:sent)OR{in:x]>"} {
		raw := "From: me@example.org\r\nTo: a@example.org\r\nSubject: s\r\nMessage-ID: " + id + "\r\n\r\nhi\r\n"
		r := e.must("POST", "/v1/send", apiToken, []byte(raw))
		ebody, _ := r.body["error"].(map[string]any)
		if r.status != 400 || ebody["field"] != "message_id" || !strings.Contains(fmt.Sprint(ebody["message"]), "holds '") {
			t.Errorf("rfc822 %s: %d %s, want 400 naming message_id and the character", id, r.status, r.raw)
		}
		r = e.must("POST", "/v1/send", apiToken, map[string]any{"raw": base64.RawURLEncoding.EncodeToString([]byte(raw))})
		if ebody, _ := r.body["error"].(map[string]any); r.status != 400 || ebody["field"] != "message_id" {
			t.Errorf("raw JSON %s: %d %s, want 400 naming message_id", id, r.status, r.raw)
		}
		_, err := svc.Users.Messages.Send("me", &gmail.Message{Raw: base64.URLEncoding.EncodeToString([]byte(raw))}).Do()
		var gerr *googleapi.Error
		if !errors.As(err, &gerr) || gerr.Code != 400 || !strings.Contains(gerr.Message, "Message-ID") {
			t.Errorf("Gmail-compatible %s: %v, want googleapi 400 about the Message-ID", id, err)
		}
		if c, d := e.Emulator.Count(id), e.Emulator.Deliveries(id); c != 0 || d != 0 {
			t.Errorf("%s: emulator holds %d copies, %d deliveries; want 0, 0", id, c, d)
		}
		if _, err := e.Log.Get(context.Background(), id); !errors.Is(err, acceptlog.ErrNotFound) {
			t.Errorf("%s: log Get = %v, want ErrNotFound", id, err)
		}
	}
	if st, err := e.Log.Stats(context.Background()); err != nil || st.Jobs != 0 {
		t.Errorf("log stats %+v, %v; want no job", st, err)
	}
}

// TestObsoleteHeaderNamesRefused: "Name :" (RFC 5322 §4.5 obs-syntax) is
// refused with 400 naming the header, so a second Message-ID or To
// cannot slip past the one-of-each checks; nothing reaches Gmail.
func TestObsoleteHeaderNamesRefused(t *testing.T) {
	e := newEnv(t, envOpts{})
	svc := e.gmailClient()
	tests := []struct{ name, id, raw, header string }{
		{"second Message-ID", "<obs-1@x.example>", "From: me@example.org\r\nTo: a@example.org\r\nMessage-ID: <obs-1@x.example>\r\nMessage-ID : <obs-other@x.example>\r\n\r\nhi\r\n", "Message-ID"},
		{"only Message-ID", "<obs-2@x.example>", "From: me@example.org\r\nTo: a@example.org\r\nMessage-ID : <obs-2@x.example>\r\n\r\nhi\r\n", "Message-ID"},
		{"second To", "<obs-3@x.example>", "From: me@example.org\r\nTo: a@example.org\r\nTo\t: b@example.org\r\nMessage-ID: <obs-3@x.example>\r\n\r\nhi\r\n", "To"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := e.must("POST", "/v1/send", apiToken, []byte(tt.raw))
			ebody, _ := r.body["error"].(map[string]any)
			if r.status != 400 || !strings.Contains(fmt.Sprint(ebody["message"]), `"`+tt.header) {
				t.Errorf("rfc822: %d %s, want 400 naming %s", r.status, r.raw, tt.header)
			}
			_, err := svc.Users.Messages.Send("me", &gmail.Message{Raw: base64.URLEncoding.EncodeToString([]byte(tt.raw))}).Do()
			var gerr *googleapi.Error
			if !errors.As(err, &gerr) || gerr.Code != 400 || !strings.Contains(gerr.Message, tt.header) {
				t.Errorf("Gmail-compatible: %v, want googleapi 400 naming %s", err, tt.header)
			}
			if d := e.Emulator.Deliveries(tt.id); d != 0 {
				t.Errorf("emulator: %d deliveries of %s, want 0", d, tt.id)
			}
			if _, err := e.Log.Get(context.Background(), tt.id); !errors.Is(err, acceptlog.ErrNotFound) {
				t.Errorf("log Get(%s) = %v, want ErrNotFound", tt.id, err)
			}
		})
	}
}
