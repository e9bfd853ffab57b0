package logtest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay"
)

// SharedBackend is an implementation of the log several relays share
// (gmailrelay.Shared), with the shared state of gmailrelay.SendBudget and
// gmailrelay.MailboxPauses.
type SharedBackend struct {
	// Open opens two handles on one fresh, empty log, as two replicas
	// would, both stamping lines with now, and registers their Check and
	// Close.
	Open func(t *testing.T, now func() time.Time) (a, b gmailrelay.Store)
}

// RunShared runs the conformance tests of the shared state against b.
func RunShared(t *testing.T, b SharedBackend) {
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, SharedBackend)
	}{
		{"SendBudgetHoldsAcrossReplicas", testSendBudgetHolds},
		{"MailboxPauseAcrossReplicas", testMailboxPause},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, b) })
	}
}

func budgets(t *testing.T, a, b gmailrelay.Store) (gmailrelay.SendBudget, gmailrelay.SendBudget) {
	t.Helper()
	ba, ok := a.(gmailrelay.SendBudget)
	bb, ok2 := b.(gmailrelay.SendBudget)
	if !ok || !ok2 || !gmailrelay.IsShared(a) {
		t.Fatalf("%T is not a shared log with a SendBudget", a)
	}
	return ba, bb
}

// 40 holds asked at once through two replicas with a limit of 10 get
// exactly 10; a forwarding line takes its replica's hold over (counted
// once, as a send); a release gives one back; holds left behind lapse.
func testSendBudgetHolds(t *testing.T, be SharedBackend) {
	now := t0
	a, b := be.Open(t, func() time.Time { return now })
	ba, bb := budgets(t, a, b)
	ctx := context.Background()
	since := now.Add(-24 * time.Hour)
	var grantedA, grantedB atomic.Int32
	var wg sync.WaitGroup
	for i := range 40 {
		s, granted := ba, &grantedA
		if i%2 == 1 {
			s, granted = bb, &grantedB
		}
		wg.Go(func() {
			ans, err := s.SendBudget(ctx, "me", 10, since, now, true)
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
	ans, err := ba.SendBudget(ctx, "me", 10, since, now, false)
	if err != nil || ans.Used != 10 || ans.OK || !ans.Frees.Equal(now) {
		t.Errorf("budget after 10 holds: %+v, %v; want used 10, not ok, frees at now (+24h)", ans, err)
	}
	forwarded := int(grantedA.Load())
	for i := range forwarded {
		Forward(t, a, fmt.Sprintf("<h%d@x>", i), "me", time.Time{})
	}
	if ans, _ := bb.SendBudget(ctx, "me", 10, since, now, false); ans.Used != 10 {
		t.Errorf("after %d forwarding lines: used %d, want 10 (each took its hold over)", forwarded, ans.Used)
	}
	if grantedB.Load() > 0 {
		if err := bb.ReleaseSend(ctx, "me"); err != nil {
			t.Fatal(err)
		}
		if ans, _ := ba.SendBudget(ctx, "me", 10, since, now, false); ans.Used != 9 || !ans.OK {
			t.Errorf("after B released a hold: %+v, want used 9, ok", ans)
		}
	}
	later := now.Add(10 * time.Minute)
	if ans, _ := ba.SendBudget(ctx, "me", 10, since, later, false); ans.Used != forwarded {
		t.Errorf("10 minutes later: used %d, want %d (the sends; B's stale holds lapsed)", ans.Used, forwarded)
	}
}

// A pause set through one replica is read by the other; a shorter one
// does not shorten it; the mailbox's record stays readable.
func testMailboxPause(t *testing.T, be SharedBackend) {
	a, b := be.Open(t, func() time.Time { return t0 })
	pa, ok := a.(gmailrelay.MailboxPauses)
	pb, ok2 := b.(gmailrelay.MailboxPauses)
	if !ok || !ok2 {
		t.Fatalf("%T has no MailboxPauses", a)
	}
	ctx := context.Background()
	if got, err := pb.PausedUntil(ctx, "me"); err != nil || !got.IsZero() {
		t.Fatalf("no pause yet: %v, %v", got, err)
	}
	until := t0.Add(5 * time.Minute)
	if err := pa.PauseUntil(ctx, "me", until); err != nil {
		t.Fatal(err)
	}
	if err := pb.PauseUntil(ctx, "me", until.Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	if got, err := pb.PausedUntil(ctx, "me"); err != nil || !got.Equal(until) {
		t.Errorf("B reads the pause %v (%v), want %v", got, err, until)
	}
	if mb, err := a.Mailbox(ctx, "me"); err != nil || mb.Name != "me" {
		t.Errorf("the mailbox record after a pause: %+v, %v", mb, err)
	}
}
