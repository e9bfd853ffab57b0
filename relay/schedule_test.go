package relay_test

import (
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay/relay"
)

// FuzzSchedule: send_at and when_busy come from callers. Schedule never
// panics, accepts only the two when_busy words (or none), and an accepted
// send_at is an RFC 3339 time, returned in UTC.
func FuzzSchedule(f *testing.F) {
	// Seeds: each send_at (UTC, an offset, none, not a time) with each
	// when_busy (none, the two words, another word).
	for _, sendAt := range []string{"2026-12-03T18:00:00Z", "2026-12-03T18:00:00+02:00", "", "tomorrow"} {
		for _, whenBusy := range []string{"", relay.WhenBusyQueue, relay.WhenBusyReject, "later"} {
			f.Add(sendAt, whenBusy)
		}
	}
	f.Fuzz(func(t *testing.T, sendAt, whenBusy string) {
		at, queue, err := relay.SendRequest{SendAt: sendAt, WhenBusy: whenBusy}.Schedule()
		if err != nil {
			if relay.ErrorCode(err) != relay.CodeInvalid {
				t.Fatalf("error %v is not CodeInvalid", err)
			}
			return
		}
		switch whenBusy {
		case "", relay.WhenBusyQueue:
			if !queue {
				t.Fatalf("when_busy %q: queue false", whenBusy)
			}
		case relay.WhenBusyReject:
			if queue {
				t.Fatal("when_busy reject: queue true")
			}
		default:
			t.Fatalf("when_busy %q accepted", whenBusy)
		}
		if sendAt == "" {
			if !at.IsZero() {
				t.Fatalf("no send_at gave %s", at)
			}
			return
		}
		want, perr := time.Parse(time.RFC3339, sendAt)
		if perr != nil || !at.Equal(want) || at.Location() != time.UTC {
			t.Fatalf("send_at %q gave %s (parse error %v)", sendAt, at, perr)
		}
	})
}
