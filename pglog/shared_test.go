package pglog_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay/acceptlog"
	"github.com/gmailrelay/gmailrelay/faultmodes"
)

// A count: 1 fault rule stored in the database fires exactly once over 100
// concurrent decisions of two replicas (their Sets on two Logs).
func TestFaultRuleCountTakenOnceAcrossReplicas(t *testing.T) {
	url := databaseURL(t)
	schema := freshSchema(t, url)
	a := faultmodes.New(faultmodes.Options{Store: open(t, url, schema, nil)})
	b := faultmodes.New(faultmodes.Options{Store: open(t, url, schema, nil)})
	one := 1
	if _, err := a.Add(faultmodes.Spec{Mode: faultmodes.FailBeforeForward, Count: &one}); err != nil {
		t.Fatal(err)
	}
	var fired atomic.Int32
	var wg sync.WaitGroup
	for i := range 100 {
		s := a
		if i%2 == 1 {
			s = b
		}
		wg.Go(func() {
			if s.Decide("default", "", "<x@y>").Mode != "" {
				fired.Add(1)
			}
		})
	}
	wg.Wait()
	if fired.Load() != 1 || a.StoreErrors()+b.StoreErrors() != 0 {
		t.Errorf("fired %d times (store errors %d, %d), want once", fired.Load(), a.StoreErrors(), b.StoreErrors())
	}
	if l := b.List(); len(l) != 1 || l[0].Hits != 1 || l[0].Active {
		t.Errorf("B lists %+v, want the rule with 1 hit, inactive", l)
	}
}

// The daily budget on the database: 40 holds asked at once by two
// replicas with a limit of 10 get exactly 10; a forwarding line takes its
// hold over (counted once, as a send); a release gives a hold back.
func TestSendBudgetHoldsAcrossReplicas(t *testing.T) {
	url := databaseURL(t)
	schema := freshSchema(t, url)
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	a, b := open(t, url, schema, clock), open(t, url, schema, clock)
	ctx := context.Background()
	since := now.Add(-24 * time.Hour)
	var grantedA, grantedB atomic.Int32
	var wg sync.WaitGroup
	for i := range 40 {
		l, granted := a, &grantedA
		if i%2 == 1 {
			l, granted = b, &grantedB
		}
		wg.Go(func() {
			ans, err := l.SendBudget(ctx, "me", 10, since, now, true)
			if err != nil {
				t.Error(err)
			}
			if ans.OK {
				granted.Add(1)
			}
		})
	}
	wg.Wait()
	if n := grantedA.Load() + grantedB.Load(); n != 10 {
		t.Fatalf("%d holds granted with a limit of 10", n)
	}
	ans, _ := a.SendBudget(ctx, "me", 10, since, now, false)
	if ans.Used != 10 || ans.OK || !ans.Frees.Equal(now) {
		t.Errorf("budget after 10 holds: %+v; want used 10, not ok, frees at now (+24h)", ans)
	}
	// A's forwarding lines take A's holds over: still 10 used.
	forwarded := int(grantedA.Load())
	for i := range forwarded {
		id := fmt.Sprintf("<h%d@x>", i)
		_, _, err := a.Mutate(ctx, id, func(*acceptlog.Job) (acceptlog.Change, error) {
			return acceptlog.Change{
				Job: &acceptlog.Job{MessageID: id, Channel: "default", Mailbox: "me", State: acceptlog.StateForwarding, Attempts: 1},
				Lines: []acceptlog.Line{{Kind: acceptlog.KindReceived, Attempt: 1},
					{Kind: acceptlog.KindForwarding, Attempt: 1, State: acceptlog.StateForwarding}},
			}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if ans, _ := b.SendBudget(ctx, "me", 10, since, now, false); ans.Used != 10 {
		t.Errorf("after %d forwarding lines: used %d, want 10 (each took its hold over)", forwarded, ans.Used)
	}
	if grantedB.Load() > 0 {
		if err := b.ReleaseSend(ctx, "me"); err != nil {
			t.Fatal(err)
		}
		if ans, _ := a.SendBudget(ctx, "me", 10, since, now, false); ans.Used != 9 || !ans.OK {
			t.Errorf("after B released a hold: %+v, want used 9, ok", ans)
		}
	}
	// Holds of a replica that died stop counting after a few minutes.
	later := now.Add(10 * time.Minute)
	if ans, _ := a.SendBudget(ctx, "me", 10, since, later, false); ans.Used != forwarded {
		t.Errorf("10 minutes later: used %d, want %d (the sends; B's stale holds lapsed)", ans.Used, forwarded)
	}
}

// A pause set through one replica is read by the other; a shorter one
// does not shorten it.
func TestMailboxPauseSharedAcrossReplicas(t *testing.T) {
	url := databaseURL(t)
	schema := freshSchema(t, url)
	a, b := open(t, url, schema, nil), open(t, url, schema, nil)
	ctx := context.Background()
	if got, err := b.PausedUntil(ctx, "me"); err != nil || !got.IsZero() {
		t.Fatalf("no pause yet: %v, %v", got, err)
	}
	until := time.Date(2026, 3, 1, 12, 5, 0, 0, time.UTC)
	if err := a.PauseUntil(ctx, "me", until); err != nil {
		t.Fatal(err)
	}
	if err := b.PauseUntil(ctx, "me", until.Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	if got, err := b.PausedUntil(ctx, "me"); err != nil || !got.Equal(until) {
		t.Errorf("B reads the pause %v (%v), want %v", got, err, until)
	}
	if mb, err := a.Mailbox(ctx, "me"); err != nil || mb.Name != "me" {
		t.Errorf("the mailbox record after a pause: %+v, %v", mb, err)
	}
}
