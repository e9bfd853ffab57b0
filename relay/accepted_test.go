package relay_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/internal/testenv"
	"github.com/gmailrelay/gmailrelay/relay"
)

// New jobs accepted at one instant of the clock get CreatedAt a
// nanosecond apart, in acceptance order (the outbox's tie-break); after
// the clock steps back, a new job's CreatedAt is the clock's, never ahead
// of its own lines (it stood at the last stamp + 1 ns, an hour ahead).
func TestCreatedAtFollowsAcceptanceAndTheClock(t *testing.T) {
	e := newEnv(t, gmailfake.Options{})
	ctx := context.Background()
	var mu sync.Mutex
	back := time.Duration(0)
	now := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return e.clock.Now().Add(-back)
	}
	svc := e.te.Replica(testenv.Options{Policy: e.policy, Now: now, Provider: e.te.Provider}).Service
	send := func(key string) relay.Result {
		t.Helper()
		res, err := svc.Send(ctx, e.prepare(key, "x"), relay.SendOptions{})
		if err != nil {
			t.Fatalf("send %s: %v", key, err)
		}
		return res
	}
	a, b := send("tie-a"), send("tie-b")
	if got := b.Job.CreatedAt.Sub(a.Job.CreatedAt); got != time.Nanosecond {
		t.Errorf("second job at one instant: CreatedAt %s after the first, want 1ns", got)
	}
	mu.Lock()
	back = time.Hour
	mu.Unlock()
	c := send("after-step")
	if !c.Job.CreatedAt.Equal(now()) || c.Job.CreatedAt.After(c.Job.UpdatedAt) {
		t.Errorf("after a step back: CreatedAt %s, UpdatedAt %s, clock %s; want the clock's", c.Job.CreatedAt, c.Job.UpdatedAt, now())
	}
}
