package relay

import (
	"testing"

	"github.com/gmailrelay/gmailrelay"
)

// The front door's decision for each state of an existing job, and for
// other content under the same key: no emulator, no log.
func TestFrontDoorDecisions(t *testing.T) {
	p := Prepared{Fingerprint: "fp"}
	for _, c := range []struct {
		name     string
		job      gmailrelay.Job
		done     bool
		code     Code
		replayed bool
	}{
		{"other content", gmailrelay.Job{State: gmailrelay.StateSent, Fingerprint: "other"}, true, CodeMismatch, false},
		{"in flight", gmailrelay.Job{State: gmailrelay.StateForwarding, Fingerprint: "fp"}, true, CodeInFlight, false},
		{"sent: replay", gmailrelay.Job{State: gmailrelay.StateSent, Fingerprint: "fp"}, true, "", true},
		{"unknown: replay, never a resend", gmailrelay.Job{State: gmailrelay.StateUnknown, Fingerprint: "fp"}, true, "", true},
		{"review: replay", gmailrelay.Job{State: gmailrelay.StateReview, Fingerprint: "fp"}, true, "", true},
		{"failed, retryable: attempt", gmailrelay.Job{State: gmailrelay.StateFailed, Retryable: true, Fingerprint: "fp"}, false, "", false},
		{"failed for good: replay", gmailrelay.Job{State: gmailrelay.StateFailed, Fingerprint: "fp"}, true, "", true},
		{"abandoned", gmailrelay.Job{State: gmailrelay.StateAbandoned, Fingerprint: "fp"}, true, CodeConflict, false},
	} {
		res, done, err := frontDoor(&c.job, p)
		code := Code("")
		if err != nil {
			code = ErrorCode(err)
		}
		if done != c.done || code != c.code || res.Replayed != c.replayed {
			t.Errorf("%s: done %v, error %v, replayed %v; want %v, %q, %v", c.name, done, err, res.Replayed, c.done, c.code, c.replayed)
		}
	}
}
