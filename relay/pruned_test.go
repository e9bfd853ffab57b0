package relay_test

import (
	"context"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay/acceptlog"
	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/relay"
)

// A resolve retry of a job whose message retention pruned is refused
// before anything is logged: 409, the job stays failed. Before, the
// forwarding line was committed and the message read afterwards, so the
// job was left forwarding with nothing in flight (every caller then got
// in_flight until a restart, and the job could never be sent).
func TestEmulatorRetryOfAPrunedJobIsRefusedNotLeftForwarding(t *testing.T) {
	e := newEnv(t, gmailfake.Options{})
	ctx := context.Background()
	if _, err := e.emu.AddFault(gmailfake.Fault{Method: "send", Action: "error", Status: 400}); err != nil {
		t.Fatal(err)
	}
	p := e.prepare("pruned:1", "x")
	if res, err := e.svc.Send(ctx, p, relay.SendOptions{}); err != nil || res.Job.State != acceptlog.StateFailed {
		t.Fatalf("send under Gmail's 400: %+v, %v; want failed", res.Job, err)
	}
	e.clock.Advance(time.Hour)
	if res, err := e.log.Prune(ctx, e.clock.Now(), 0); err != nil || res.Jobs != 1 {
		t.Fatalf("prune: %+v, %v; want the failed job pruned", res, err)
	}
	_, err := e.svc.Resolve(ctx, p.MessageID, relay.ActionRetry, "try again", "test", relay.AnyAttempts)
	if relay.ErrorCode(err) != relay.CodeConflict {
		t.Fatalf("resolve retry of a pruned job: %v; want CodeConflict", err)
	}
	j, err := e.log.Get(ctx, p.MessageID)
	if err != nil || j.State != acceptlog.StateFailed || j.Attempts != 1 {
		t.Fatalf("job after the refused retry: %s after %d attempts, %v; want failed after 1 (nothing logged)", j.State, j.Attempts, err)
	}
	if n := e.emu.Deliveries(p.MessageID); n != 0 {
		t.Errorf("deliveries %d, want 0", n)
	}
	if err := e.log.Check(ctx); err != nil {
		t.Errorf("acceptlog check: %v", err)
	}
}
