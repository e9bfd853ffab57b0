package gmailapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/api/googleapi"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/relay"
)

// errorServer answers every request with Google's error JSON for status
// and reason, and Retry-After when retryAfter is set.
func errorServer(t *testing.T, status int, reason, retryAfter string) *Client {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if retryAfter != "" {
			w.Header().Set("Retry-After", retryAfter)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"error":{"code":%d,"message":"boom %d","errors":[{"message":"boom %d","domain":"global","reason":%q}],"status":"X"}}`,
			status, status, status, reason)
	}))
	t.Cleanup(srv.Close)
	c, err := New(context.Background(), Config{Endpoint: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestSendErrorsClassify checks that Google's error answers, translated by
// the adapter, land on the same rows of relay.Classify's table as before
// the translation existed: the row Classify gives the ProviderError of the
// same status and reason (relay's TestClassify checks the rows themselves).
func TestSendErrorsClassify(t *testing.T) {
	tests := []struct {
		status int
		reason string
	}{
		{429, "rateLimitExceeded"},
		{403, "userRateLimitExceeded"},
		{403, "dailyLimitExceeded"},
		{401, "authError"},
		{403, "forbidden"},
		{400, "invalidArgument"},
		{404, "notFound"},
		{413, "uploadTooLarge"},
		{500, "backendError"},
		{503, "backendError"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d %s", tt.status, tt.reason), func(t *testing.T) {
			c := errorServer(t, tt.status, tt.reason, "")
			_, err := c.Send(context.Background(), "me", []byte("Subject: x\r\n\r\ny"), "")
			var p *relay.ProviderError
			if !errors.As(err, &p) {
				t.Fatalf("err = %T %v, want a *relay.ProviderError", err, err)
			}
			if p.Status != tt.status || p.Reason != tt.reason || p.Message == "" {
				t.Errorf("ProviderError = %+v, want status %d reason %q and a message", p, tt.status, tt.reason)
			}
			var g *googleapi.Error
			if !errors.As(err, &g) || err.Error() != g.Error() {
				t.Errorf("err text = %q, want Google's error text kept", err)
			}
			o := relay.Classify(err)
			w := relay.Classify(&relay.ProviderError{Status: tt.status, Reason: tt.reason})
			if o.Verdict != w.Verdict || o.Retryable != w.Retryable || o.Alarm != w.Alarm || o.Reason != w.Reason || o.Status != tt.status {
				t.Errorf("Classify = %v retryable=%v alarm=%v reason=%q status=%d; want the table's row %v %v %v %q and status %d",
					o.Verdict, o.Retryable, o.Alarm, o.Reason, o.Status, w.Verdict, w.Retryable, w.Alarm, w.Reason, tt.status)
			}
		})
	}
}

func TestRetryAfterTranslated(t *testing.T) {
	c := errorServer(t, 429, "rateLimitExceeded", "7")
	_, err := c.List(context.Background(), "me", "rfc822msgid:<a@b>", nil, "", 0)
	if got := relay.Classify(err).RetryIn; got != 7*time.Second {
		t.Errorf("RetryIn = %v, want 7s (err %v)", got, err)
	}
}

func TestRetryAfterForms(t *testing.T) {
	now := time.Date(2026, 12, 2, 18, 0, 0, 0, time.UTC)
	future := now.Add(time.Hour).Format(http.TimeFormat)
	tests := []struct {
		header   http.Header
		min, max time.Duration
	}{
		{nil, 0, 0},
		{http.Header{}, 0, 0},
		{http.Header{"Retry-After": {"7"}}, 7 * time.Second, 7 * time.Second},
		{http.Header{"Retry-After": {"-1"}}, 0, 0},
		{http.Header{"Retry-After": {"soon"}}, 0, 0},
		{http.Header{"Retry-After": {future}}, time.Hour, time.Hour},
	}
	for _, tt := range tests {
		if got := retryAfter(tt.header, now); got < tt.min || got > tt.max {
			t.Errorf("retryAfter(%v) = %v, want in [%v, %v]", tt.header, got, tt.min, tt.max)
		}
	}
}

func TestGetHeaderNotFound(t *testing.T) {
	c := errorServer(t, 404, "notFound", "")
	_, err := c.GetHeader(context.Background(), "me", "18c0ffee")
	if !errors.Is(err, relay.ErrMessageNotFound) {
		t.Fatalf("err = %v, want relay.ErrMessageNotFound", err)
	}
	if o := relay.Classify(err); o.Reason != gmailrelay.ReasonProviderRejected || o.Status != 404 {
		t.Errorf("Classify = %q status %d, want provider_rejected 404", o.Reason, o.Status)
	}
	c = errorServer(t, 500, "backendError", "")
	if _, err := c.GetHeader(context.Background(), "me", "18c0ffee"); errors.Is(err, relay.ErrMessageNotFound) {
		t.Errorf("a 500 on get wraps ErrMessageNotFound: %v", err)
	}
}

func TestNotReached(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close() // nothing listens there now
	c, err := New(context.Background(), Config{Endpoint: url})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Send(context.Background(), "me", []byte("Subject: x\r\n\r\ny"), "")
	var nr *relay.NotReachedError
	if !errors.As(err, &nr) {
		t.Fatalf("err = %T %v, want *relay.NotReachedError", err, err)
	}
	if o := relay.Classify(err); o.Reason != gmailrelay.ReasonNotReached || !o.Retryable {
		t.Errorf("Classify = %q retryable=%v, want not_reached retryable", o.Reason, o.Retryable)
	}
}

func TestTokenRefreshFailureNotReached(t *testing.T) {
	var refreshes atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "token") {
			refreshes.Add(1)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, `{"error":"invalid_grant","error_description":"Token has been expired or revoked."}`)
			return
		}
		t.Errorf("Gmail called despite the failed refresh: %s", r.URL)
	}))
	defer srv.Close()
	creds := fmt.Sprintf(`{"type":"authorized_user","client_id":"c","client_secret":"s","refresh_token":"r","token_uri":%q}`, srv.URL+"/token")
	c, err := New(context.Background(), Config{Endpoint: srv.URL, CredentialsJSON: []byte(creds)})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Send(context.Background(), "me", []byte("Subject: x\r\n\r\ny"), "")
	if o := relay.Classify(err); o.Reason != gmailrelay.ReasonTokenRefresh || !o.Alarm || !o.Retryable {
		t.Errorf("Classify(%v) = %q alarm=%v retryable=%v, want token_refresh alarm retryable", err, o.Reason, o.Alarm, o.Retryable)
	}
	if refreshes.Load() == 0 {
		t.Errorf("the token endpoint was never asked")
	}
	if c.TokenError() == "" {
		t.Errorf("TokenError() = \"\" after a failed refresh")
	}
}
