package relay_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay/acceptlog"
	"github.com/gmailrelay/gmailrelay/gmailfake"
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
		if err != nil || res.Job.State != acceptlog.StateSent {
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
	if n := e.emu.Count(p.MessageID); n != 0 {
		t.Errorf("the 51st message is in the mailbox %d times, want 0", n)
	}
	// After a restart the budget is counted from the log: still spent.
	if err := e.log.Close(); err != nil {
		t.Fatal(err)
	}
	e.open(e.emuURL)
	if left := e.svc.Budget().Left(); left != 0 {
		t.Errorf("after restart: budget left %d, want 0", left)
	}
	res, err := e.svc.Send(ctx, p, relay.SendOptions{Queue: true})
	if err != nil || res.Job.State != acceptlog.StateQueued {
		t.Fatalf("51st send with queue: %v state %s, want queued", err, res.Job.State)
	}
	if got := e.emu.Stats().Calls[gmailfake.MethodSend]; got != 50 {
		t.Errorf("emulator send calls after the queued 51st = %d, want 50", got)
	}
	// Once the first send left the window, one more fits.
	e.clock.Advance(24*time.Hour - 50*time.Minute)
	if left := e.svc.Budget().Left(); left != 1 {
		t.Errorf("a day after the first send: budget left %d, want 1", left)
	}
}
