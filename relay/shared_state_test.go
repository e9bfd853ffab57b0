package relay_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay/acceptlog"
	"github.com/gmailrelay/gmailrelay/internal/testclock"
	"github.com/gmailrelay/gmailrelay/relay"
)

// sharedState stands in for a shared log (PostgreSQL) as the Budget and
// the Quota see it: a count of held attempts and a pause, both changed
// from "outside" (another replica) by the test.
type sharedState struct {
	acceptlog.Store // not called by the budget on a shared log
	mu              sync.Mutex
	used            int
	pause           time.Time
	fail            bool
}

func (s *sharedState) Shared() bool { return true }

func (s *sharedState) SendBudget(_ context.Context, _ string, limit int, _, now time.Time, hold bool) (acceptlog.BudgetAnswer, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail {
		return acceptlog.BudgetAnswer{}, errors.New("database down")
	}
	if s.used >= limit {
		return acceptlog.BudgetAnswer{Used: s.used, Frees: now.Add(-time.Hour)}, nil
	}
	if hold {
		s.used++
	}
	return acceptlog.BudgetAnswer{Used: s.used, OK: true}, nil
}

func (s *sharedState) ReleaseSend(context.Context, string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.used--
	return nil
}

func (s *sharedState) PausedUntil(context.Context, string) (time.Time, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pause, nil
}

func (s *sharedState) PauseUntil(_ context.Context, _ string, until time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if until.After(s.pause) {
		s.pause = until
	}
	return nil
}

// On a shared log the budget keeps nothing in memory: what another replica
// spent is seen at the next decision, a refund releases the hold, and a
// database error refuses (retry in a second).
func TestBudgetOnASharedLogCountsAtDecisionTime(t *testing.T) {
	st := &sharedState{}
	clock := testclock.New()
	b, err := relay.NewBudget(context.Background(), st, "me", 3, clock.Now)
	if err != nil {
		t.Fatal(err)
	}
	if ok, _ := b.Take(); !ok || b.Left() != 2 {
		t.Fatalf("first take: ok %v, left %d; want ok, 2", ok, b.Left())
	}
	st.mu.Lock()
	st.used += 2 // another replica spends the rest
	st.mu.Unlock()
	if ok, in := b.Available(); ok || in != 23*time.Hour {
		t.Errorf("after another replica spent the rest: available %v in %s; want no, in 23h (the oldest frees)", ok, in)
	}
	b.Refund()
	if ok, _ := b.Take(); !ok {
		t.Error("after a refund the hold given back is takeable again")
	}
	st.mu.Lock()
	st.used, st.fail = 0, true
	st.mu.Unlock()
	if ok, in := b.Take(); ok || in != time.Second {
		t.Errorf("database down: take %v, retry in %s; want refused, 1s", ok, in)
	}
}

// A pause Gmail asked of another replica (in the shared mailbox record)
// pauses this quota's sends, deliveries and searches; a pause this quota
// sets is written there.
func TestQuotaSharesGmailsPause(t *testing.T) {
	st := &sharedState{}
	clock := testclock.New()
	q := relay.NewQuota(6000, clock.Now)
	q.SharePauses(st, "me")
	if ok, _ := q.TakeForeground(relay.UnitsSend); !ok {
		t.Fatal("no pause yet: the send is refused")
	}
	st.mu.Lock()
	st.pause = clock.Now().Add(30 * time.Second)
	st.mu.Unlock()
	if ok, in := q.TakeForeground(relay.UnitsSend); ok || in != 30*time.Second {
		t.Errorf("send during another replica's pause: %v, %s; want refused for 30s", ok, in)
	}
	if ok, _ := q.TakeBackground(1); ok {
		t.Error("a search during the shared pause was allowed")
	}
	if ok, _ := q.AvailableDelivery(relay.UnitsSend); ok {
		t.Error("a delivery during the shared pause was allowed")
	}
	clock.Advance(31 * time.Second)
	if ok, _ := q.TakeForeground(relay.UnitsSend); !ok {
		t.Error("the pause is over: the send is refused")
	}
	d := q.RateLimited(2 * time.Minute)
	if got, _ := st.PausedUntil(context.Background(), "me"); !got.Equal(clock.Now().Add(d)) {
		t.Errorf("the pause this quota set is %v in the shared record, want %v", got, clock.Now().Add(d))
	}
}
