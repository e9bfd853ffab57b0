package gmailapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/internal/testclock"
	"github.com/gmailrelay/gmailrelay/relay"
)

// quotaServer answers like Gmail's per-minute quota: the retry time only
// in the message text (no Retry-After header), at status with reason.
func quotaServer(t *testing.T, now func() time.Time, status int, reason, msg string) *Client {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"error":{"code":%d,"message":%q,"errors":[{"message":%q,"domain":"usageLimits","reason":%q}]}}`,
			status, msg, msg, reason)
	}))
	t.Cleanup(srv.Close)
	c, err := New(context.Background(), Config{Endpoint: srv.URL, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The retry time in the message text becomes the ProviderError's
// RetryAfter, measured on the injected clock; 429 and 403
// userRateLimitExceeded are both rate limits.
func TestRetryTimeFromMessageText(t *testing.T) {
	clock := testclock.New()
	at := clock.Now().Add(95 * time.Second).UTC().Format("2006-01-02T15:04:05.000Z07:00")
	for _, tt := range []struct {
		status int
		reason string
	}{{429, "rateLimitExceeded"}, {403, "userRateLimitExceeded"}, {403, "rateLimitExceeded"}} {
		c := quotaServer(t, clock.Now, tt.status, tt.reason, "User-rate limit exceeded.  Retry after "+at)
		_, err := c.Send(context.Background(), "me", []byte("Subject: x\r\n\r\ny"), "")
		var p *relay.ProviderError
		if !errors.As(err, &p) {
			t.Fatalf("%d %s: err = %T %v, want *relay.ProviderError", tt.status, tt.reason, err, err)
		}
		if p.RetryAfter != 95*time.Second {
			t.Errorf("%d %s: RetryAfter = %v, want 1m35s (from the message text)", tt.status, tt.reason, p.RetryAfter)
		}
		if o := relay.Classify(err); o.Reason != gmailrelay.ReasonRateLimited || !o.Retryable || o.Verdict != relay.Failed || o.RetryIn != 95*time.Second {
			t.Errorf("%d %s: Classify = %v %q retryable=%v in=%v, want failed rate_limited retryable 1m35s", tt.status, tt.reason, o.Verdict, o.Reason, o.Retryable, o.RetryIn)
		}
	}
	// A retry time already past, or none at all: 0 (the relay backs off).
	for _, msg := range []string{"User-rate limit exceeded.  Retry after 2001-01-01T00:00:00.000Z", "User-rate limit exceeded.", "Retry after tomorrow"} {
		c := quotaServer(t, clock.Now, 429, "rateLimitExceeded", msg)
		_, err := c.Send(context.Background(), "me", []byte("Subject: x\r\n\r\ny"), "")
		if o := relay.Classify(err); o.RetryIn != 0 || o.Reason != gmailrelay.ReasonRateLimited {
			t.Errorf("%q: RetryIn = %v reason %q, want 0 rate_limited", msg, o.RetryIn, o.Reason)
		}
	}
}

// The header wins over the message text.
func TestRetryHeaderBeatsText(t *testing.T) {
	clock := testclock.New()
	at := clock.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "7")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(429)
		fmt.Fprintf(w, `{"error":{"code":429,"message":"User-rate limit exceeded.  Retry after %s","errors":[{"reason":"rateLimitExceeded"}]}}`, at)
	}))
	defer srv.Close()
	c, err := New(context.Background(), Config{Endpoint: srv.URL, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Send(context.Background(), "me", []byte("Subject: x\r\n\r\ny"), "")
	if o := relay.Classify(err); o.RetryIn != 7*time.Second {
		t.Errorf("RetryIn = %v, want 7s (the header)", o.RetryIn)
	}
}

// A message up to RawLimit bytes goes as the JSON raw field (Gmail's
// metadata path, no uploadType), a larger one through the upload endpoint
// as one multipart request; each arrives intact and once at the emulator
// (its ground truth: deliveries), Gmail's full 35 MB included, and a
// thread id is carried on both paths.
func TestSendPathBySize(t *testing.T) {
	type seen struct{ path, uploadType string }
	var got []seen
	emu := gmailfake.New(gmailfake.Options{})
	h := emu.Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, "/_emulator") {
			got = append(got, seen{r.URL.Path, r.URL.Query().Get("uploadType")})
		}
		h.ServeHTTP(w, r)
	}))
	defer srv.Close()
	c, err := New(context.Background(), Config{Endpoint: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	msg := func(id string, size int) []byte {
		head := "From: a@example.com\r\nTo: b@example.org\r\nMessage-ID: <" + id + "@example.com>\r\nSubject: x\r\n" +
			"References: <small@example.com>\r\n\r\n" // so that Gmail threads it with the first
		body := strings.Repeat(strings.Repeat("x", 998)+"\r\n", (size-len(head))/1000)
		return []byte(head + body + strings.Repeat("y", size-len(head)-len(body)))
	}
	const rawPath, uploadPath = "/gmail/v1/users/me/messages/send", "/upload/gmail/v1/users/me/messages/send"
	cases := []struct {
		id   string
		raw  []byte
		want seen
	}{
		{"small", []byte("From: a@example.com\r\nTo: b@example.org\r\nMessage-ID: <small@example.com>\r\nSubject: x\r\n\r\nhello\r\n"), seen{rawPath, ""}},
		{"at-limit", msg("at-limit", RawLimit), seen{rawPath, ""}},
		{"over-limit", msg("over-limit", RawLimit+1), seen{uploadPath, "multipart"}},
		{"big", msg("big", relay.MaxMessageBytes), seen{uploadPath, "multipart"}},
	}
	var thread string
	for i, tc := range cases {
		got = nil
		m, err := c.Send(context.Background(), "me", tc.raw, thread)
		if err != nil {
			t.Fatalf("send %s (%d bytes): %v", tc.id, len(tc.raw), err)
		}
		if m.ID == "" {
			t.Fatalf("send %s: no id", tc.id)
		}
		if i == 0 {
			thread = m.ThreadID // the others join its thread
		} else if m.ThreadID != thread {
			t.Errorf("send %s: thread %q, want %q (the thread id was not carried)", tc.id, m.ThreadID, thread)
		}
		if len(got) != 1 || got[0] != tc.want {
			t.Errorf("send %s (%d bytes): calls %v, want one %v", tc.id, len(tc.raw), got, tc.want)
		}
		res, err := http.Get(srv.URL + "/_emulator/messages?rfc822msgid=%3C" + tc.id + "@example.com%3E")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if !strings.Contains(string(body), `"deliveries":1`) {
			t.Errorf("emulator ground truth for %s: %s, want deliveries 1", tc.id, body)
		}
		_, body, _ = bytes.Cut(tc.raw, []byte("\r\n\r\n"))
		if ms := emu.Messages("<" + tc.id + "@example.com>"); len(ms) != 1 || !bytes.HasSuffix(ms[0].Raw, body) {
			t.Errorf("send %s: the emulator did not store the body of %d bytes sent, once", tc.id, len(body))
		}
	}
}
