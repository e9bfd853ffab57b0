package relay_test

import (
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay/internal/testclock"
	"github.com/gmailrelay/gmailrelay/relay"
)

// A retry time from Gmail beyond MaxPause (a broken header or clock: the
// text can say "Retry after 9999-12-31…") pauses the mailbox for
// MaxPause, not for ever.
func TestGmailRetryTimeIsCappedAtMaxPause(t *testing.T) {
	clock := testclock.At(time.Date(2026, 12, 2, 18, 0, 0, 0, time.UTC))
	q := relay.NewQuota(6000, clock.Now)
	if d := q.RateLimited(100 * 365 * 24 * time.Hour); d != relay.MaxPause {
		t.Errorf("RateLimited(100 years) = %v, want MaxPause %v", d, relay.MaxPause)
	}
	if p := q.PausedFor(); p != relay.MaxPause {
		t.Errorf("PausedFor = %v, want %v", p, relay.MaxPause)
	}
	clock.Advance(relay.MaxPause)
	if p := q.PausedFor(); p != 0 {
		t.Errorf("after MaxPause: still paused for %v", p)
	}
	if d := q.RateLimited(2 * time.Hour); d != 2*time.Hour {
		t.Errorf("RateLimited(2h) = %v, want 2h (under the cap: Gmail's time as given)", d)
	}
}
