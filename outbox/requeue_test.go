package outbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/internal/testenv"
	"github.com/gmailrelay/gmailrelay/relay"
	"github.com/gmailrelay/gmailrelay/sweeper"
)

// lastLine is the newest line of a job.
func (e *env) lastLine(id string) gmailrelay.Line {
	e.t.Helper()
	lines, err := e.log.JobLines(context.Background(), id)
	if err != nil || len(lines) == 0 {
		e.t.Fatalf("lines of %s: %d, %v", id, len(lines), err)
	}
	return lines[len(lines)-1]
}

// checkLog runs the log's offline invariant check (every transition in
// the table, state = fold of lines, effects counted).
func (e *env) checkLog() {
	e.t.Helper()
	if err := e.log.Check(context.Background()); err != nil {
		e.t.Errorf("acceptlog check: %v", err)
	}
}

// When Gmail answers a send with a rate limit, the job
// is logged queued and delivered when Gmail allows — a caller that accepts
// queueing never sees the 429. The attempt that met the 429 is in the log
// (forwarding, then not_sent with state queued); the outbox waits out the
// pause, then delivers it exactly once (docs/design.md#the-outbox).
func TestEmulatorGmailRateLimitOnASendQueuesTheJobAndTheOutboxDeliversItOnce(t *testing.T) {
	e := newEnv(t, 1_000_000, 100)
	if _, err := e.emu.AddFault(gmailfake.Fault{Method: gmailfake.MethodSend, Action: gmailfake.ActionError, Status: 429}); err != nil {
		t.Fatal(err)
	}
	p := e.prepare(0)
	res := e.send(0)
	if res.Job.State != gmailrelay.StateQueued || res.Job.Attempts != 1 || res.RetryIn <= 0 {
		t.Fatalf("send that met Gmail's 429: %s after %d attempts, retry in %s; want queued after 1, with the pause",
			res.Job.State, res.Job.Attempts, res.RetryIn)
	}
	if ln := e.lastLine(p.MessageID); ln.Kind != gmailrelay.KindNotSent || ln.State != gmailrelay.StateQueued || ln.Reason != gmailrelay.ReasonRateLimited {
		t.Fatalf("last line %+v; want not_sent, state queued, reason rate_limited", ln)
	}
	sends := e.emu.Stats().Calls[gmailfake.MethodSend]
	pass, err := e.box.RunOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if pass.Left != 1 || pass.Next <= 0 || e.emu.Stats().Calls[gmailfake.MethodSend] != sends {
		t.Fatalf("pass during Gmail's pause: %+v, %d sends at Gmail (was %d); want the job held, Gmail not called",
			pass, e.emu.Stats().Calls[gmailfake.MethodSend], sends)
	}
	e.drain(time.Hour, nil)
	if st, n := e.state(p), e.emu.Deliveries(p.MessageID); st != gmailrelay.StateSent || n != 1 {
		t.Fatalf("after the pause: %s with %d deliveries; want sent once", st, n)
	}
	e.checkLog()
}

// when_busy: reject (SendOptions.Queue false) keeps the old answer: the job
// that met Gmail's 429 ends failed, retryable, and is not queued.
func TestEmulatorGmailRateLimitWithoutQueueingFailsTheJob(t *testing.T) {
	e := newEnv(t, 1_000_000, 100)
	if _, err := e.emu.AddFault(gmailfake.Fault{Method: gmailfake.MethodSend, Action: gmailfake.ActionError, Status: 429}); err != nil {
		t.Fatal(err)
	}
	res, err := e.svc.Send(context.Background(), e.prepare(0), relay.SendOptions{})
	if err != nil || res.Job.State != gmailrelay.StateFailed || !res.Job.Retryable || res.Job.LastReason != gmailrelay.ReasonRateLimited {
		t.Fatalf("send that met Gmail's 429 without queueing: %+v, %v; want failed, retryable, rate_limited", res.Job, err)
	}
	e.checkLog()
}

// newUnreachableEnv is an env whose first n sends do not reach Gmail.
func newUnreachableEnv(t *testing.T, n int32) (*env, *testenv.Unreachable) {
	t.Helper()
	u := &testenv.Unreachable{}
	u.Left.Store(n)
	te := testenv.New(t, testenv.Options{Configure: func(c *relay.Config) { u.Provider = c.Provider; c.Provider = u }})
	return newEnvFrom(t, te), u
}

// Gmail unreachable before anything was sent → the job is logged queued
// (docs/design.md#the-outbox). The outbox then leaves it alone for a backoff read off
// the job (5 s, then 10 s: relay.HeldUntil) — a wake-up does not make it
// hammer a Gmail it cannot reach — and delivers it once Gmail answers.
func TestEmulatorGmailNotReachedQueuesTheJobAndTheOutboxBacksOff(t *testing.T) {
	e, u := newUnreachableEnv(t, 2)
	ctx := context.Background()
	p := e.prepare(0)
	if res := e.send(0); res.Job.State != gmailrelay.StateQueued || res.Job.LastReason != gmailrelay.ReasonNotReached {
		t.Fatalf("send that did not reach Gmail: %s (%s); want queued (not_reached)", res.Job.State, res.Job.LastReason)
	}
	for _, step := range []struct {
		advance time.Duration
		calls   int32
		state   gmailrelay.State
	}{
		{0, 1, gmailrelay.StateQueued},                                 // held: no second call at once
		{5*time.Second - time.Millisecond, 1, gmailrelay.StateQueued},  // still held
		{time.Millisecond, 2, gmailrelay.StateQueued},                  // 5 s after: tried, not reached again
		{10*time.Second - time.Millisecond, 2, gmailrelay.StateQueued}, // the backoff doubled
		{time.Millisecond, 3, gmailrelay.StateSent},                    // 10 s after: delivered
	} {
		e.clock.Advance(step.advance)
		if _, err := e.box.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		if got, st := u.Calls.Load(), e.state(p); got != step.calls || st != step.state {
			t.Fatalf("after +%s: %d send calls, %s; want %d, %s", step.advance, got, st, step.calls, step.state)
		}
	}
	if n := e.emu.Deliveries(p.MessageID); n != 1 {
		t.Errorf("deliveries %d, want 1", n)
	}
	e.checkLog()
}

// Attempts that went back to the queue sent nothing, so they do not use up
// the channel's max_attempts (3 by default): a job whose delivery did not
// reach Gmail twice and then met an ambiguous 5xx is still resent by the
// sweeper once its searches miss, and delivered once — not handed to a
// human for max_attempts.
func TestEmulatorRequeuedAttemptsDoNotUseUpMaxAttempts(t *testing.T) {
	e, _ := newUnreachableEnv(t, 2)
	ctx := context.Background()
	p := e.prepare(0)
	e.send(0) // attempt 1: not reached → queued
	e.clock.Advance(5 * time.Second)
	if _, err := e.box.RunOnce(ctx); err != nil { // attempt 2: not reached → queued
		t.Fatal(err)
	}
	if _, err := e.emu.AddFault(gmailfake.Fault{Method: gmailfake.MethodSend, Action: gmailfake.ActionError, Status: 500}); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(10 * time.Second)
	if _, err := e.box.RunOnce(ctx); err != nil { // attempt 3: 500 → unknown
		t.Fatal(err)
	}
	if j := e.te.Job(p.MessageID); j.State != gmailrelay.StateUnknown || j.Attempts != 3 {
		t.Fatalf("after the deliveries: %s after %d attempts; want unknown after 3", j.State, j.Attempts)
	}
	sw := sweeper.New(e.te.SweeperConfig())
	j := e.te.Job(p.MessageID)
	for i := 0; i < 100 && (j.State == gmailrelay.StateUnknown || j.State == gmailrelay.StateForwarding); i++ {
		e.clock.Advance(time.Minute)
		if _, err := sw.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		j = e.te.Job(p.MessageID)
	}
	if j.State != gmailrelay.StateSent || e.emu.Deliveries(p.MessageID) != 1 {
		t.Fatalf("after the sweeper: %s (%s), %d deliveries; want resent and sent once", j.State, j.LastReason, e.emu.Deliveries(p.MessageID))
	}
	e.checkLog()
}
