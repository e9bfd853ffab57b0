package gmailfake_test

import (
	"slices"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/internal/testclock"
)

// TestGmailLikeIndexOrder sends 150 messages a second apart under a lag
// distribution, then walks the clock through every instant a message turns
// visible and lists the mailbox through Google's client each time. Under
// fifo the visible messages are always the earliest sends; under random a
// later send shows before an earlier one.
func TestGmailLikeIndexOrder(t *testing.T) {
	dist := gmailfake.LagDistribution{P50: 2 * time.Second, P99: 2 * time.Minute, Max: 20 * time.Minute}
	for _, order := range []gmailfake.IndexOrder{gmailfake.IndexFIFO, gmailfake.IndexRandom} {
		t.Run(order.String(), func(t *testing.T) {
			clk := testclock.New()
			srv, svc, _ := emulator(t, gmailfake.Options{Now: clk.Now, Seed: 3, QuotaPerMinute: plenty,
				IndexLagDistribution: dist, IndexOrder: order})
			var sent []string // send order
			for i := range 150 {
				sent = append(sent, send(t, svc, rawMessage(msgID(i), "a@example.org", "o")).Id)
				clk.Advance(time.Second)
			}
			var instants []time.Time
			for _, m := range srv.Messages("") {
				instants = append(instants, m.VisibleAt)
			}
			slices.SortFunc(instants, time.Time.Compare)
			instants = slices.Compact(instants)
			overtaken := 0
			for _, at := range instants {
				clk.Advance(at.Sub(clk.Now()))
				visible := map[string]bool{}
				for _, id := range search(t, svc, "") {
					visible[id] = true
				}
				// The visible set is a prefix of the send order iff no
				// hidden message precedes a visible one.
				hiddenSeen := false
				for _, id := range sent {
					if !visible[id] {
						hiddenSeen = true
					} else if hiddenSeen {
						overtaken++
						if order == gmailfake.IndexFIFO {
							t.Fatalf("at %v: %s is searchable before an earlier send", at, id)
						}
						break
					}
				}
			}
			if got := len(search(t, svc, "")); got != len(sent) {
				t.Errorf("at the end %d of %d messages are searchable", got, len(sent))
			}
			t.Logf("%s: %d visibility instants, %d with a later send shown before an earlier one", order, len(instants), overtaken)
			if order == gmailfake.IndexRandom && overtaken == 0 {
				t.Errorf("random: no later send was ever searchable before an earlier one")
			}
		})
	}
}
