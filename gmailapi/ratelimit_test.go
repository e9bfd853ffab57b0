package gmailapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay/acceptlog"
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
		if o := relay.Classify(err); o.Reason != acceptlog.ReasonRateLimited || !o.Retryable || o.Verdict != relay.Failed || o.RetryIn != 95*time.Second {
			t.Errorf("%d %s: Classify = %v %q retryable=%v in=%v, want failed rate_limited retryable 1m35s", tt.status, tt.reason, o.Verdict, o.Reason, o.Retryable, o.RetryIn)
		}
	}
	// A retry time already past, or none at all: 0 (the relay backs off).
	for _, msg := range []string{"User-rate limit exceeded.  Retry after 2001-01-01T00:00:00.000Z", "User-rate limit exceeded.", "Retry after tomorrow"} {
		c := quotaServer(t, clock.Now, 429, "rateLimitExceeded", msg)
		_, err := c.Send(context.Background(), "me", []byte("Subject: x\r\n\r\ny"), "")
		if o := relay.Classify(err); o.RetryIn != 0 || o.Reason != acceptlog.ReasonRateLimited {
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

// Every send, small or large, goes through the upload endpoint as one
// multipart request, and a message of Gmail's full 35 MB arrives intact
// at the emulator.
func TestSendUsesUploadPath(t *testing.T) {
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
	small := []byte("From: a@example.com\r\nTo: b@example.org\r\nMessage-ID: <small@example.com>\r\nSubject: x\r\n\r\nhello\r\n")
	head := "From: a@example.com\r\nTo: b@example.org\r\nMessage-ID: <big@example.com>\r\nSubject: big\r\n\r\n"
	big := []byte(head + strings.Repeat(strings.Repeat("x", 998)+"\r\n", (relay.MaxMessageBytes-len(head))/1000))
	for _, raw := range [][]byte{small, big} {
		m, err := c.Send(context.Background(), "me", raw, "")
		if err != nil {
			t.Fatalf("send of %d bytes: %v", len(raw), err)
		}
		if m.ID == "" {
			t.Fatalf("send of %d bytes: no id", len(raw))
		}
	}
	want := "/upload/gmail/v1/users/me/messages/send"
	if len(got) != 2 {
		t.Fatalf("calls = %v, want 2 sends", got)
	}
	for _, s := range got {
		if s.path != want || s.uploadType != "multipart" {
			t.Errorf("call %v, want %s with uploadType=multipart", s, want)
		}
	}
	res, err := http.Get(srv.URL + "/_emulator/messages?rfc822msgid=" + "%3Cbig@example.com%3E")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if !strings.Contains(string(body), `"deliveries":1`) {
		t.Errorf("emulator ground truth for the 35 MB message: %s, want deliveries 1", body)
	}
}
