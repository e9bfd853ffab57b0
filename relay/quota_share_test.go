package relay_test

import (
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay/internal/testclock"
	"github.com/gmailrelay/gmailrelay/relay"
)

// drain takes units through take (one of q's Take methods) until it
// refuses, with the clock stopped, and returns the units taken.
func drain(t *testing.T, take func(int) (bool, time.Duration), units int) int {
	t.Helper()
	taken := 0
	for range 10000 {
		if ok, _ := take(units); !ok {
			return taken
		}
		taken += units
	}
	t.Fatal("the quota never refused")
	return 0
}

// Several relays on one PostgreSQL share the quota
// (docs/design.md#several-relays-on-one-postgresql). A
// relay's bucket is its share of the mailbox's budget: with 3 replicas, a
// full bucket of 6000 gives 2000 units at once and 2000 more a minute
// later, never the whole budget; back alone, it refills to all of it.
func TestQuotaSetShareDividesTheBudget(t *testing.T) {
	clock := testclock.New()
	q := relay.NewQuota(6000, clock.Now)
	q.SetShare(3)
	if got, want := q.PerMinute(), 6000; got != want {
		t.Errorf("PerMinute() = %d, want %d (the mailbox's budget, not the share)", got, want)
	}
	if got, want := q.Share(), 2000; got != want {
		t.Errorf("Share() = %d, want %d", got, want)
	}
	if got, want := q.Replicas(), 3; got != want {
		t.Errorf("Replicas() = %d, want %d", got, want)
	}
	if got, want := drain(t, q.TakeForeground, relay.UnitsSend), 2000; got != want {
		t.Errorf("a full bucket with a third share gave %d units at once, want %d", got, want)
	}
	clock.Advance(30 * time.Second)
	if got, want := drain(t, q.TakeForeground, relay.UnitsSend), 1000; got != want {
		t.Errorf("30 s later: %d units, want %d (refilling at a third of the budget)", got, want)
	}
	q.SetShare(1)
	if got, want := q.Share(), 6000; got != want {
		t.Errorf("alone: Share() = %d, want %d", got, want)
	}
	clock.Advance(time.Minute)
	if got, want := drain(t, q.TakeForeground, relay.UnitsSend), 6000; got != want {
		t.Errorf("alone, a minute later: %d units, want %d (the whole budget)", got, want)
	}
	q.SetShare(0) // not a count: the whole budget
	if got, want := q.Share(), 6000; got != want {
		t.Errorf("SetShare(0): Share() = %d, want %d", got, want)
	}
}

// The reserves follow the share: with 2 replicas of a 1200-unit budget
// (a 600-unit bucket, send reserve 100), the sweeper stops taking where
// it leaves one send, and the outbox where it leaves that plus a tenth
// of the share; a caller's send may still empty the bucket.
func TestQuotaSetShareKeepsTheReserves(t *testing.T) {
	clock := testclock.New()
	q := relay.NewQuota(1200, clock.Now)
	q.SetShare(2)
	if got, want := drain(t, q.TakeBackground, relay.UnitsList), 500; got != want {
		t.Errorf("the sweeper took %d units of a 600-unit share, want %d (leaving the 100-unit send reserve)", got, want)
	}
	if ok, _ := q.TakeForeground(relay.UnitsSend); !ok {
		t.Error("the send reserve was not left for a send")
	}

	q2 := relay.NewQuota(1200, clock.Now)
	q2.SetShare(2)
	// 600 - (100 reserve + 60 reconciliation) = 440: four sends.
	if got, want := drain(t, q2.TakeDelivery, relay.UnitsSend), 400; got != want {
		t.Errorf("the outbox took %d units of a 600-unit share, want %d", got, want)
	}
}

// A share never gets smaller than one send: with more replicas than sends
// in the budget, each may still make one, refilling at its share's pace.
func TestQuotaSetShareAtLeastOneSend(t *testing.T) {
	clock := testclock.New()
	q := relay.NewQuota(300, clock.Now)
	q.SetShare(6) // 50 units each
	if got, want := q.Share(), relay.UnitsSend; got != want {
		t.Errorf("Share() = %d, want %d", got, want)
	}
	if got, want := drain(t, q.TakeForeground, relay.UnitsSend), relay.UnitsSend; got != want {
		t.Errorf("%d units at once, want %d", got, want)
	}
	// 50 units a minute: the next send in two minutes.
	if ok, in := q.TakeForeground(relay.UnitsSend); ok || in != 2*time.Minute {
		t.Errorf("TakeForeground = %v, %v; want refused for 2m0s", ok, in)
	}
}
