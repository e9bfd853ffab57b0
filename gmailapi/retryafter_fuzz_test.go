package gmailapi

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// FuzzRetryAfter: Gmail's Retry-After header is outside input. retryAfter
// never answers a negative pause (relay.ProviderError.RetryAfter: "0 when
// it gave none, or one already past"), reads delay-seconds (RFC 9110: a
// run of digits) as that many seconds, an HTTP date as the time until
// it, and anything else as no retry time. (The "Retry after <RFC 3339>"
// of the message text is relay.FuzzRetryAtFromMessage's.)
func FuzzRetryAfter(f *testing.F) {
	now := time.Date(2026, 12, 2, 18, 0, 0, 0, time.UTC)
	for _, v := range []string{"7", "0", "-1", "+5", "soon", "", " 7", "007", "9223372036", "9227000000",
		now.Add(time.Hour).Format(http.TimeFormat), now.Add(-time.Hour).Format(http.TimeFormat),
		"Monday, 02-Jan-06 15:04:05 GMT", "Mon Jan  2 15:04:05 2006", "Fri, 31 Dec 9999 23:59:59 GMT"} {
		f.Add(v, now.Unix())
	}
	f.Fuzz(func(t *testing.T, v string, unix int64) {
		now := time.Unix(unix%(400*365*86400), 0).UTC()
		got := retryAfter(http.Header{"Retry-After": {v}}, now)
		if got < 0 {
			t.Fatalf("retryAfter(%q) = %v: a negative pause", v, got)
		}
		if v != "" && strings.Trim(v, "0123456789") == "" {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil && n <= math.MaxInt64/int64(time.Second) {
				if want := time.Duration(n) * time.Second; got != want {
					t.Fatalf("retryAfter(%q) = %v, want %v", v, got, want)
				}
			}
			return
		}
		if at, err := http.ParseTime(v); err == nil {
			if want := max(at.Sub(now), 0); got != want {
				t.Fatalf("retryAfter(%q) at %v = %v, want %v", v, now, got, want)
			}
			return
		}
		if _, err := strconv.Atoi(v); err != nil && got != 0 {
			t.Fatalf("retryAfter(%q) = %v, want 0 (neither seconds nor a date)", v, got)
		}
	})
}
