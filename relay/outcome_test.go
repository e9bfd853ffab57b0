package relay_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/internal/testclock"
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
		{"403 daily limit", gerr(403, "dailyLimitExceeded"), relay.Failed, true, false, "rate_limited"},
		{"401", gerr(401, "authError"), relay.Failed, false, true, "auth"},
		{"403 forbidden", gerr(403, "forbidden"), relay.Failed, false, true, "auth"},
		{"400", gerr(400, "invalidArgument"), relay.Failed, false, false, "provider_rejected"},
		{"404", gerr(404, "notFound"), relay.Failed, false, false, "provider_rejected"},
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
			if got.Verdict != tt.verdict || got.Retryable != tt.retryable || got.Alarm != tt.alarm || got.Reason != gmailrelay.Reason(tt.reason) {
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

func TestRetryAtFromMessage(t *testing.T) {
	at := time.Date(2024, 11, 12, 11, 16, 42, 247_000_000, time.UTC)
	tests := []struct {
		msg  string
		want time.Time
		ok   bool
	}{
		// Gmail's own wordings (two spaces after the period in the per-minute one).
		{"User-rate limit exceeded.  Retry after 2024-11-12T11:16:42.247Z", at, true},
		{"Daily user sending limit exceeded. Retry after 2024-11-12T11:16:42.247Z", at, true},
		{"rateLimitExceeded: User-rate limit exceeded.  Retry after 2024-11-12T11:16:42.247Z (Forwarding rules)", at, true},
		{"User-rate limit exceeded.  Retry after 2024-11-12T11:16:42.247Z.", at, true},
		{"retry AFTER 2024-11-12T12:16:42.247+01:00, please", at, true},
		{"Retry after 2024-11-12T11:16:42Z", at.Truncate(time.Second), true},
		{"Retry after soon. Retry after 2024-11-12T11:16:42.247Z", at, true}, // the first that parses
		{"User-rate limit exceeded.", time.Time{}, false},
		{"Retry after", time.Time{}, false},
		{"Retry after ", time.Time{}, false},
		{"Retry after 2024-11-12", time.Time{}, false},
		{"Retry after 1731410202", time.Time{}, false},
		{"Retry after 2024-13-12T11:16:42Z", time.Time{}, false},
		{"", time.Time{}, false},
	}
	for _, tt := range tests {
		got, ok := relay.RetryAtFromMessage(tt.msg)
		if ok != tt.ok || !got.Equal(tt.want) {
			t.Errorf("RetryAtFromMessage(%q) = %v, %v; want %v, %v", tt.msg, got, ok, tt.want, tt.ok)
		}
	}
	// Only the first 4 KiB is read.
	if _, ok := relay.RetryAtFromMessage(strings.Repeat("x", 5000) + " Retry after 2024-11-12T11:16:42Z"); ok {
		t.Errorf("a retry time past the first 4 KiB was read")
	}
}

// FuzzRetryAtFromMessage: Gmail's message text is outside input. The
// parser never panics, finds a time only after "retry after ", and reads
// back any instant written the way Gmail writes it.
func FuzzRetryAtFromMessage(f *testing.F) {
	f.Add("User-rate limit exceeded.  ", int64(1731410202), int64(247_000_000))
	f.Add("Daily user sending limit exceeded. ", int64(0), int64(0))
	f.Add("retry after retry after ", int64(253402300799), int64(999_999_999))
	f.Add("Retry after 2024-11-12T11:16:42.247Z", int64(-1), int64(1))
	f.Fuzz(func(t *testing.T, prefix string, sec, nsec int64) {
		at, ok := relay.RetryAtFromMessage(prefix)
		if ok && indexFold(prefix, "retry after ") < 0 {
			t.Fatalf("%q: a time (%v) without \"retry after \"", prefix, at)
		}
		if len(prefix) > 1000 {
			return
		}
		sec = (sec%253402300800 + 253402300800) % 253402300800 // years 1970..9999
		nsec = (nsec%1e9 + 1e9) % 1e9
		want := time.Unix(sec, nsec).UTC()
		msg := prefix + "Retry after " + want.Format(time.RFC3339Nano)
		if indexFold(msg, "retry after ") != len(prefix) {
			return // the prefix holds its own phrase: it comes first
		}
		got, ok := relay.RetryAtFromMessage(msg)
		if !ok || !got.Equal(want) {
			t.Fatalf("%q: got %v, %v; want %v", msg, got, ok, want)
		}
	})
}

// Without a retry time from Gmail the pause doubles from 1 s to 15 min,
// each with at most a quarter more as jitter (never past 15 min), and the
// next answer without a rate limit starts it again from 1 s. A retry time
// from Gmail is used as it is.
func TestBackoffGrowsIsJitteredAndResets(t *testing.T) {
	clock := testclock.New()
	q := relay.NewQuota(6000, clock.Now)
	step := relay.MinBackoff
	for i := range 14 {
		d := q.RateLimited(0)
		if hi := min(step+step/4, relay.MaxBackoff); d < step || d > hi {
			t.Fatalf("rate limit %d: pause %v, want in [%v, %v]", i+1, d, step, hi)
		}
		if got := q.PausedFor(); got != d {
			t.Fatalf("rate limit %d: PausedFor = %v, want %v", i+1, got, d)
		}
		if ok, in := q.TakeForeground(relay.UnitsSend); ok || in != d {
			t.Fatalf("rate limit %d: a send was let through the pause (ok=%v in=%v)", i+1, ok, in)
		}
		if ok, _ := q.TakeBackground(relay.UnitsList); ok {
			t.Fatalf("rate limit %d: a search was let through the pause", i+1)
		}
		clock.Advance(d)
		if ok, _ := q.Available(relay.UnitsSend, false); !ok {
			t.Fatalf("rate limit %d: still paused at the end of the pause", i+1)
		}
		step = min(2*step, relay.MaxBackoff)
	}
	if step != relay.MaxBackoff {
		t.Fatalf("the backoff never reached %v", relay.MaxBackoff)
	}
	// Reset, and the jitter is really random yet bounded.
	seen := map[time.Duration]bool{}
	for range 200 {
		q.Answered()
		d := q.RateLimited(0)
		if d < time.Second || d > time.Second+time.Second/4 {
			t.Fatalf("after a reset: pause %v, want in [1s, 1.25s]", d)
		}
		seen[d] = true
		clock.Advance(d)
	}
	if len(seen) < 10 {
		t.Errorf("200 first pauses took only %d values: no jitter", len(seen))
	}
	// Gmail's own retry time: exactly that, and the backoff does not grow.
	q.Answered()
	if d := q.RateLimited(95 * time.Second); d != 95*time.Second || q.PausedFor() != d {
		t.Fatalf("Gmail's retry time 95s gave a pause of %v (PausedFor %v)", d, q.PausedFor())
	}
	clock.Advance(95 * time.Second)
	if d := q.RateLimited(0); d > time.Second+time.Second/4 {
		t.Errorf("after Gmail's own retry time the backoff grew: %v", d)
	}
	// A shorter rate limit never cuts a longer pause short.
	q.RateLimited(time.Hour)
	q.RateLimited(time.Second)
	if got := q.PausedFor(); got != time.Hour {
		t.Errorf("PausedFor = %v after 1h then 1s, want 1h", got)
	}
}

// indexFold is the offset of the first place sub stands in s ignoring
// ASCII case, or -1. It is the fuzz target's oracle, so it is a different
// algorithm from the parser's (which lowers msg and then searches): a plain
// scan comparing each window with strings.EqualFold. sub is ASCII letters
// and spaces none of which has a non-ASCII case partner, so EqualFold on a
// window of len(sub) bytes matches exactly what ASCII folding would.
func indexFold(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if strings.EqualFold(s[i:i+len(sub)], sub) {
			return i
		}
	}
	return -1
}
