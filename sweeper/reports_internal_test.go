package sweeper

import (
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/dsn"
)

// A sending-limit notice puts in review only the mailbox's sent jobs of
// the window that no report accounts for.
func TestLimitReviewTakesTheWindowsUnreportedSends(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name string
		j    gmailrelay.Job
		want bool
	}{
		{"sent in the window", gmailrelay.Job{State: gmailrelay.StateSent, Attempts: 1, UpdatedAt: now.Add(-10 * time.Minute)}, true},
		{"sent before the window", gmailrelay.Job{State: gmailrelay.StateSent, Attempts: 1, UpdatedAt: now.Add(-2 * time.Hour)}, false},
		{"bounced: it left Gmail", gmailrelay.Job{State: gmailrelay.StateSent, Attempts: 1, Bounced: 1, UpdatedAt: now}, false},
		{"not sent", gmailrelay.Job{State: gmailrelay.StateQueued, UpdatedAt: now}, false},
	} {
		d, ok := limitReview(c.j, "n1", now, time.Hour)
		if ok != c.want {
			t.Errorf("%s: review %v, want %v", c.name, ok, c.want)
			continue
		}
		if ok && (d.to != gmailrelay.StateReview || d.why.Reason != gmailrelay.ReasonSendingLimitBounce || d.why.GmailID != "n1") {
			t.Errorf("%s: decision %+v, want review sending_limit_bounce citing the notice", c.name, d)
		}
	}
}

// A report's failed and delayed recipients become bounce lines and counts;
// the same report read again adds nothing; delivered recipients are not
// bounces.
func TestBounceChange(t *testing.T) {
	j := gmailrelay.Job{MessageID: "<m@x>", State: gmailrelay.StateSent, Attempts: 1}
	rs := []dsn.Recipient{{Address: "x@bounce.test", Action: "failed", Status: "5.1.1", Diagnostic: "550 no"},
		{Address: "s@delay.test", Action: "delayed", Status: "4.4.1"}, {Address: "ok@example.org", Action: "delivered"}}
	ch := bounceChange(j, "r1", rs, nil)
	if len(ch.Lines) != 2 || ch.Job.Bounced != 1 || ch.Job.Delayed != 1 || ch.Job.State != gmailrelay.StateSent ||
		ch.Lines[0].Kind != gmailrelay.KindBounce || ch.Lines[0].DSNStatus != "5.1.1" || ch.Lines[0].GmailID != "r1" {
		t.Fatalf("change %+v", ch)
	}
	again := bounceChange(*ch.Job, "r1", rs, ch.Lines)
	if again.Job != nil || len(again.Lines) != 0 {
		t.Errorf("the same report again: %+v, want no change", again)
	}
}
