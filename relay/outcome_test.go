package relay_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay/acceptlog"

	"github.com/gmailrelay/gmailrelay/relay"
)

// gerr is Gmail's error answer as the adapter hands it over (package
// gmailapi's tests check the translation from Google's client errors).
func gerr(code int, reason string) error {
	return &relay.ProviderError{Status: code, Reason: reason}
}

// TestClassify has one row per row of the classification table in Classify's doc.
func TestClassify(t *testing.T) {
	tests := []struct {
		name      string
		err       error
		verdict   relay.Verdict
		retryable bool
		alarm     bool
		reason    string
	}{
		{"2xx", nil, relay.Sent, false, false, ""},
		{"not reached", &relay.NotReachedError{Err: errors.New("dial tcp: connection refused")}, relay.Failed, true, false, "not_reached"},
		{"token refresh", &relay.NotReachedError{Err: fmt.Errorf("%w: invalid_grant", relay.ErrTokenRefresh)}, relay.Failed, true, true, "token_refresh"},
		{"429", gerr(429, "rateLimitExceeded"), relay.Failed, true, false, "rate_limited"},
		{"403 user rate", gerr(403, "userRateLimitExceeded"), relay.Failed, true, false, "rate_limited"},
		{"403 quota", gerr(403, "quotaExceeded"), relay.Failed, true, false, "rate_limited"},
		{"401", gerr(401, "authError"), relay.Failed, false, true, "auth"},
		{"403 forbidden", gerr(403, "forbidden"), relay.Failed, false, true, "auth"},
		{"400", gerr(400, "invalidArgument"), relay.Failed, false, false, "provider_rejected"},
		{"413", gerr(413, "uploadTooLarge"), relay.Failed, false, false, "provider_rejected"},
		{"500", gerr(500, "backendError"), relay.Unknown, false, false, "provider_5xx"},
		{"502", gerr(502, ""), relay.Unknown, false, false, "provider_5xx"},
		{"503", gerr(503, "backendError"), relay.Unknown, false, false, "provider_5xx"},
		{"504", gerr(504, ""), relay.Unknown, false, false, "provider_5xx"},
		{"timeout after write", context.DeadlineExceeded, relay.Unknown, false, false, "timeout"},
		{"reset after write", errors.New("read tcp: connection reset by peer"), relay.Unknown, false, false, "transport"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := relay.Classify(tt.err)
			if got.Verdict != tt.verdict || got.Retryable != tt.retryable || got.Alarm != tt.alarm || got.Reason != acceptlog.Reason(tt.reason) {
				t.Errorf("Classify(%v) = %v retryable=%v alarm=%v reason=%q; want %v %v %v %q",
					tt.err, got.Verdict, got.Retryable, got.Alarm, got.Reason, tt.verdict, tt.retryable, tt.alarm, tt.reason)
			}
		})
	}
}

func TestClassifyHonoursRetryAfter(t *testing.T) {
	err := &relay.ProviderError{Status: 429, RetryAfter: 7 * time.Second}
	if got := relay.Classify(err).RetryIn; got != 7*time.Second {
		t.Errorf("RetryIn = %v, want 7s", got)
	}
}
