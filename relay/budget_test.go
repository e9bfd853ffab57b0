package relay_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/faultmodes"
	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/internal/testclock"
	"github.com/gmailrelay/gmailrelay/policy"
	"github.com/gmailrelay/gmailrelay/relay"
)

// TestEmulatorDailyLimit50The51stIsNotAttempted is issue 13's test (h):
// with daily_send_limit 50 the 51st send is never handed to Gmail (the
// emulator counts 50 send calls), it answers 429 with Retry-After to the
// time the budget frees up, and after a restart the budget is counted
// again from the log.
func TestEmulatorDailyLimit50The51stIsNotAttempted(t *testing.T) {
	e := newEnv(t, gmailfake.Options{})
	e.policy.Mailboxes = map[string]policy.Mailbox{policy.DefaultMailbox: {Name: policy.DefaultMailbox, DailySendLimit: 50}}
	if err := e.log.Close(); err != nil {
		t.Fatal(err)
	}
	e.open(e.emuURL) // the service counts its budget with the new policy
	ctx := context.Background()
	for i := range 50 {
		res, err := e.svc.Send(ctx, e.prepare(fmt.Sprintf("k%d", i), "hi"), relay.SendOptions{})
		if err != nil || res.Job.State != gmailrelay.StateSent {
			t.Fatalf("send %d: %v state %s", i, err, res.Job.State)
		}
		e.clock.Advance(time.Minute)
	}
	calls := e.emu.Stats().Calls[gmailfake.MethodSend]
	p := e.prepare("k50", "hi")
	_, err := e.svc.Send(ctx, p, relay.SendOptions{})
	var re *relay.Error
	if !errors.As(err, &re) || re.Code != relay.CodeRateLimited {
		t.Fatalf("51st send: err %v, want CodeRateLimited", err)
	}
	// The first send left at t0; 50 minutes have passed.
	if want := int((24*time.Hour - 50*time.Minute) / time.Second); re.RetryAfter != want {
		t.Errorf("Retry-After = %ds, want %ds (when the first send leaves the window)", re.RetryAfter, want)
	}
	if got := e.emu.Stats().Calls[gmailfake.MethodSend]; got != calls || calls != 50 {
		t.Errorf("emulator send calls: %d before, %d after the 51st; want 50 and no new one", calls, got)
	}
	if n := e.emu.Deliveries(p.MessageID); n != 0 {
		t.Errorf("the 51st message has %d deliveries, want 0", n)
	}
	// After a restart the budget is counted from the log: still spent.
	if err := e.log.Close(); err != nil {
		t.Fatal(err)
	}
	e.open(e.emuURL)
	if left := e.budget().Left(); left != 0 {
		t.Errorf("after restart: budget left %d, want 0", left)
	}
	res, err := e.svc.Send(ctx, p, relay.SendOptions{Queue: true})
	if err != nil || res.Job.State != gmailrelay.StateQueued {
		t.Fatalf("51st send with queue: %v state %s, want queued", err, res.Job.State)
	}
	if got := e.emu.Stats().Calls[gmailfake.MethodSend]; got != 50 {
		t.Errorf("emulator send calls after the queued 51st = %d, want 50", got)
	}
	// Once the first send left the window, one more fits.
	e.clock.Advance(24*time.Hour - 50*time.Minute)
	if left := e.budget().Left(); left != 1 {
		t.Errorf("a day after the first send: budget left %d, want 1", left)
	}
}

// sharedState stands in for a shared log (PostgreSQL) as the Budget and
// the Quota see it: a count of held attempts and a pause, both changed
// from "outside" (another replica) by the test.
type sharedState struct {
	gmailrelay.Store // not called by the budget on a shared log
	mu               sync.Mutex
	used             int
	pause            time.Time
	fail             bool
}

func (s *sharedState) Shared() bool { return true }

func (s *sharedState) SendBudget(_ context.Context, _ string, limit int, _, now time.Time, hold bool) (gmailrelay.BudgetAnswer, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail {
		return gmailrelay.BudgetAnswer{}, errors.New("database down")
	}
	if s.used >= limit {
		return gmailrelay.BudgetAnswer{Used: s.used, Frees: now.Add(-time.Hour)}, nil
	}
	if hold {
		s.used++
	}
	return gmailrelay.BudgetAnswer{Used: s.used, OK: true}, nil
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

func TestQuotaForegroundBackgroundAndPause(t *testing.T) {
	clock := testclock.New()
	q := relay.NewQuota(1200, clock.Now) // 20 units/s, burst 1200, send reserve 120
	if ok, _ := q.Available(1200, false); !ok {
		t.Fatal("a full bucket must have a minute's worth for sends")
	}
	if ok, _ := q.Available(1200, true); ok {
		t.Error("background work must leave the send reserve")
	}
	if got := q.Spent(); got != 0 {
		t.Fatalf("Available took %d units", got)
	}
	for i := 0; i < 10; i++ { // background takes 1000 of 1200, leaving the reserve
		if ok, _ := q.TakeBackground(100); !ok {
			t.Fatalf("background take %d refused", i)
		}
	}
	if ok, wait := q.TakeBackground(100); ok || wait <= 0 {
		t.Errorf("background take into the reserve: ok=%v wait=%v, want refused with a wait", ok, wait)
	}
	if ok, _ := q.TakeForeground(100); !ok {
		t.Error("a send must still get through while the sweeper is held back")
	}
	ok, wait := q.TakeForeground(200)
	if ok || wait <= 0 {
		t.Fatalf("over budget: ok=%v wait=%v", ok, wait)
	}
	if got := q.Spent(); got != 1100 {
		t.Errorf("spent %d, want 1100 (refused takes take nothing)", got)
	}
	clock.Advance(wait)
	if ok, _ := q.TakeForeground(200); !ok {
		t.Error("after the wait it must fit")
	}
	q.Pause(30 * time.Second)
	if ok, wait := q.TakeForeground(1); ok || wait != 30*time.Second {
		t.Errorf("paused: ok=%v wait=%v, want refused for 30s", ok, wait)
	}
	clock.Advance(30 * time.Second)
	if ok, _ := q.TakeForeground(1); !ok {
		t.Error("pause must end")
	}
}

// Concurrent identical requests, of which one attempts and the others get
// 409 or a replay, spend the quota of one send and the fault rule's count
// once, on the attempt that was made. Before the fix each of them took a
// send's units (and a count: 1 rule could fire for a request that then
// attempted nothing).
func TestConcurrentDuplicatesSpendQuotaAndFaultCountOnce(t *testing.T) {
	e := newEnv(t, gmailfake.Options{})
	ctx := context.Background()
	e.policy.VerifyHandle = "never"
	one := 1
	if _, err := e.faults.Add(faultmodes.Spec{Mode: faultmodes.ForwardThenDropResponse, Count: &one}); err != nil {
		t.Fatal(err)
	}
	p := e.prepare("dup-quota", "x")
	q := e.te.Quota
	before := q.Spent()
	together(16, func(int) { _, _ = e.svc.Send(ctx, p, relay.SendOptions{}) })
	lines := e.lines(p.MessageID)
	fwd, faults := count(lines, gmailrelay.KindForwarding), count(lines, gmailrelay.KindFault)
	if fwd != 1 || faults != 1 {
		t.Errorf("forwarding lines = %d, fault lines = %d, want 1 and 1", fwd, faults)
	}
	if got, want := q.Spent()-before, int64(relay.UnitsSend*fwd); got != want {
		t.Errorf("quota spent = %d, want %d (one send per attempt made)", got, want)
	}
}

// A replay is answered from the log whatever the quota, and takes none:
// with the mailbox paused (every take refused) a second request for a
// sent job replays it, and a new job is refused with nothing written or
// sent. The admission transaction decides both (Send's doc comment).
func TestReplayWhileQuotaPausedTakesNothing(t *testing.T) {
	e := newEnv(t, gmailfake.Options{})
	ctx := context.Background()
	p := e.prepare("replay-paused", "x")
	if _, err := e.svc.Send(ctx, p, relay.SendOptions{}); err != nil {
		t.Fatal(err)
	}
	q := e.te.Quota
	q.Pause(time.Hour)
	before := q.Spent()
	res, err := e.svc.Send(ctx, e.prepare("replay-paused", "x"), relay.SendOptions{})
	if err != nil || !res.Replayed || res.Job.State != gmailrelay.StateSent {
		t.Fatalf("replay with the quota paused: replayed %v state %s err %v, want a replay of the sent job", res.Replayed, res.Job.State, err)
	}
	fresh := e.prepare("new-paused", "y")
	if _, err := e.svc.Send(ctx, fresh, relay.SendOptions{}); relay.ErrorCode(err) != relay.CodeRateLimited {
		t.Fatalf("new job with the quota paused: %v, want rate_limited", err)
	}
	if got := q.Spent() - before; got != 0 {
		t.Errorf("quota spent while paused = %d, want 0", got)
	}
	if _, err := e.te.Log.Get(ctx, fresh.MessageID); !errors.Is(err, gmailrelay.ErrNotFound) {
		t.Errorf("refused new job: log read %v, want not found (nothing written)", err)
	}
	if got := e.emu.Deliveries(fresh.MessageID); got != 0 {
		t.Errorf("emulator has %d deliveries of the refused job, want 0", got)
	}
	e.wantOne(t, p.MessageID, gmailrelay.KindEffect)
}

// A resolve retry refused for quota writes nothing: before the fix the
// resolved line was committed first, so the log said a retry happened
// that did not.
func TestResolveRetryRefusedForQuotaWritesNoResolvedLine(t *testing.T) {
	e := newEnv(t, gmailfake.Options{})
	ctx := context.Background()
	p := e.inReview(ctx, "resolve-quota")
	before := len(e.lines(p.MessageID))
	e.te.Quota.Pause(time.Hour)
	_, err := e.svc.Resolve(ctx, relay.ResolveRequest{ID: p.MessageID, Action: relay.ActionRetry, Note: "try again", Actor: "op", Seen: relay.AnyAttempts})
	if relay.ErrorCode(err) != relay.CodeRateLimited {
		t.Fatalf("resolve retry with no quota: %v, want rate_limited", err)
	}
	lines := e.lines(p.MessageID)
	if got := count(lines, gmailrelay.KindResolved); got != 0 || len(lines) != before {
		t.Errorf("resolved lines = %d, lines %d → %d; want nothing written", got, before, len(lines))
	}
	if got := e.emu.Deliveries(p.MessageID); got != 1 {
		t.Errorf("emulator has %d deliveries, want 1", got)
	}
}

// Exhaust holds the budget spent, whatever it counts, until the oldest
// attempt of the window leaves it: Gmail's limit notice outranks the
// relay's own count.
func TestBudgetExhaustHoldsUntilTheOldestAttemptLeaves(t *testing.T) {
	clock := testclock.New()
	b, err := relay.NewBudget(context.Background(), nil, "me", 100, clock.Now)
	if err != nil {
		t.Fatal(err)
	}
	if ok, _ := b.Take(); !ok {
		t.Fatal("first take refused")
	}
	clock.Advance(time.Hour)
	b.Exhaust()
	if ok, in := b.Available(); ok || in != 23*time.Hour {
		t.Errorf("after Exhaust: available %v, in %s; want refused for 23h", ok, in)
	}
	clock.Advance(23 * time.Hour)
	if ok, _ := b.Available(); !ok {
		t.Error("a day after the oldest attempt: still refused")
	}
}
