package sweeper_test

import (
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/gmailfake"
)

// The measured lag p99, the floor under every miss, survives a restart:
// the verify pass writes each sample to the mailbox's record in the log
// and a new sweeper reads them at its first pass. The mailbox lags 8
// minutes; an ambiguous send Gmail stored is indexed after 8 minutes,
// behind a later send indexed at once (Gmail's order is not FIFO), so the
// companion query finds a witness from the first look. A relay restarted
// between the two that forgot its samples would count the miss at grace
// and resend the job, and Gmail would deliver it twice (emulator ground
// truth). Without the restart it is delivered once.
func TestEmulatorMeasuredLagFloorSurvivesRestart(t *testing.T) {
	for _, tc := range []struct {
		name    string
		restart bool
	}{{"same process", false}, {"after a restart", true}} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, setup{})
			slow := gmailfake.LagDistribution{P50: 8 * time.Minute, P99: 8 * time.Minute, Max: 8 * time.Minute}
			fast := gmailfake.LagDistribution{P50: time.Second, P99: time.Second, Max: time.Second}
			h.srv.SetIndexLagDistribution(slow, gmailfake.IndexRandom)
			k0, _ := h.send(retryChannel)
			mb := h.job(k0).Mailbox
			for range 10 {
				h.clock.Advance(grace)
				h.sweep()
			}
			p99, n := h.sw.IndexLag(mb, 0.99)
			if n != 1 || p99 < 8*time.Minute {
				t.Fatalf("measured p99 %s from %d samples, want at least 8m from 1", p99, n)
			}
			rec, err := h.log.Mailbox(h.ctx, mb)
			if err != nil {
				t.Fatal(err)
			}
			if got := rec.Lags.Durations(); len(got) != 1 || got[0] != p99 {
				t.Fatalf("mailbox record's lag samples %v, want [%s]", got, p99)
			}

			j := h.sendAmbiguous(retryChannel)
			h.srv.SetIndexLagDistribution(fast, gmailfake.IndexRandom)
			h.clock.Advance(2 * time.Second)
			h.send(retryChannel)
			if tc.restart {
				h.restart()
			}
			h.clock.Advance(grace)
			h.sweep()
			if got, gotN := h.sw.IndexLag(mb, 0.99); got != p99 || gotN != 2 {
				t.Errorf("first pass: p99 %s from %d samples, want %s from 2 (the log's and the later send's)", got, gotN, p99)
			}
			if jj := h.job(j); jj.Checks != 0 || !jj.NextCheckAt.Equal(jj.AmbiguousAt.Add(p99)) {
				t.Errorf("first look at grace: checks %d, next check %s; want no miss counted and a look at attempt + p99 (%s)",
					jj.Checks, jj.NextCheckAt, jj.AmbiguousAt.Add(p99))
			}
			for range 11 {
				h.clock.Advance(grace)
				h.sweep()
			}
			h.wantDeliveries(j, 1, "the ambiguous send was delivered once; a resend is a duplicate")
			h.wantJob(j, gmailrelay.StateSent, 1, 1, 1) // found by the search: one attempt, no resend
		})
	}
}
