package relay_test

import (
	"context"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/acceptlog"
	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/internal/testenv"
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
	if res, err := e.svc.Send(ctx, p, relay.SendOptions{}); err != nil || res.Job.State != gmailrelay.StateFailed {
		t.Fatalf("send under Gmail's 400: %+v, %v; want failed", res.Job, err)
	}
	e.clock.Advance(time.Hour)
	if res, err := e.log.Prune(ctx, e.clock.Now(), 0); err != nil || res.Jobs != 1 {
		t.Fatalf("prune: %+v, %v; want the failed job pruned", res, err)
	}
	_, err := e.svc.Resolve(ctx, relay.ResolveRequest{ID: p.MessageID, Action: relay.ActionRetry, Note: "try again", Actor: "test", Seen: relay.AnyAttempts})
	if relay.ErrorCode(err) != relay.CodeConflict {
		t.Fatalf("resolve retry of a pruned job: %v; want CodeConflict", err)
	}
	j, err := e.log.Get(ctx, p.MessageID)
	if err != nil || j.State != gmailrelay.StateFailed || j.Attempts != 1 {
		t.Fatalf("job after the refused retry: %s after %d attempts, %v; want failed after 1 (nothing logged)", j.State, j.Attempts, err)
	}
	if n := e.emu.Deliveries(p.MessageID); n != 0 {
		t.Errorf("deliveries %d, want 0", n)
	}
	if err := e.log.Check(ctx); err != nil {
		t.Errorf("acceptlog check: %v", err)
	}
}

// pruningLog runs a retention pass right after the relay has read a job's
// message (between attempt's Raw and its transaction), as the background
// pass may.
type pruningLog struct {
	*acceptlog.Log
	cutoff time.Time
	armed  bool
	pruned int
}

func (l *pruningLog) Raw(ctx context.Context, id string) ([]byte, error) {
	raw, err := l.Log.Raw(ctx, id)
	if l.armed {
		l.armed = false
		res, perr := l.Log.Prune(ctx, l.cutoff, 0)
		if perr != nil {
			return nil, perr
		}
		l.pruned = res.Jobs
	}
	return raw, err
}

// A retry racing the retention pass: the message is read, then the job is
// pruned, then the attempt's transaction runs. It is refused (409, nothing
// sent, nothing logged). Before, the copy read before the prune went out
// (Gmail took it and answered 500), leaving an unknown job with no stored
// message: every sweeper resend was refused, it never reached review, and
// as a pruned job it was never pruned again.
func TestEmulatorRetryRacingThePruneIsRefused(t *testing.T) {
	var pl *pruningLog
	te := testenv.New(t, testenv.Options{SendTimeout: 2 * time.Second, Configure: func(c *relay.Config) {
		pl = &pruningLog{Log: c.Log.(*acceptlog.Log)}
		c.Log = pl
	}})
	ctx := context.Background()
	if _, err := te.Emulator.AddFault(gmailfake.Fault{Method: "send", Action: "error", Status: 400}); err != nil {
		t.Fatal(err)
	}
	p, err := relay.Prepare(relay.SendRequest{Key: "race:1", To: relay.AddressList{"c@example.org"}, Subject: "s", Text: "x"},
		"", svcDomain, te.Clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	if res, err := te.Service.Send(ctx, p, relay.SendOptions{}); err != nil || res.Job.State != gmailrelay.StateFailed {
		t.Fatalf("send under Gmail's 400: %+v, %v; want failed", res.Job, err)
	}
	te.Clock.Advance(2 * time.Hour)
	if _, err := te.Emulator.AddFault(gmailfake.Fault{Method: "send", Action: "accept-then-error", Status: 500}); err != nil {
		t.Fatal(err)
	}
	pl.cutoff, pl.armed = te.Clock.Now(), true
	_, err = te.Service.Resolve(ctx, relay.ResolveRequest{ID: p.MessageID, Action: relay.ActionRetry, Note: "try again", Actor: "test", Seen: relay.AnyAttempts})
	if pl.pruned != 1 {
		t.Fatalf("the pass between the read and the attempt pruned %d jobs, want 1", pl.pruned)
	}
	if relay.ErrorCode(err) != relay.CodeConflict {
		t.Errorf("retry of a job pruned meanwhile: %v; want CodeConflict", err)
	}
	j := te.Job(p.MessageID)
	if j.State != gmailrelay.StateFailed || j.Attempts != 1 {
		t.Errorf("job: %s after %d attempts; want failed after 1 (nothing logged)", j.State, j.Attempts)
	}
	if n := te.Emulator.Deliveries(p.MessageID); n != 0 {
		t.Errorf("deliveries %d, want 0", n)
	}
}
