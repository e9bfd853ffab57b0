package relay_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/acceptlog"
	"github.com/gmailrelay/gmailrelay/internal/testenv"
	"github.com/gmailrelay/gmailrelay/relay"
	"github.com/gmailrelay/gmailrelay/sweeper"
)

// refusingLog is the real log with a storage that can be made to refuse
// writes: after `pass` more Mutates, each Mutate fails with an error
// wrapping gmailrelay.ErrWritesRefused (with landed, after writing its
// change, as when a commit's acknowledgement is lost), and the probe
// fails, until heal.
type refusingLog struct {
	*acceptlog.Log
	mu      sync.Mutex
	armed   bool
	pass    int
	landed  bool
	refused error
}

var errDiskFull = errors.New("write accept.db: no space left on device")

func (r *refusingLog) refuseAfter(pass int, landed bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.armed, r.pass, r.landed = true, pass, landed
}

func (r *refusingLog) heal() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.armed = false
}

func (r *refusingLog) Mutate(ctx context.Context, id string, fn func(cur *gmailrelay.Job) (gmailrelay.Change, error)) (gmailrelay.Job, []gmailrelay.Line, error) {
	r.mu.Lock()
	refuse, landed := r.armed && r.pass == 0, r.landed
	if r.armed && r.pass > 0 {
		r.pass--
	}
	if refuse {
		r.refused = errDiskFull
	}
	r.mu.Unlock()
	if !refuse {
		j, lines, err := r.Log.Mutate(ctx, id, fn)
		if err == nil {
			r.mu.Lock()
			r.refused = nil
			r.mu.Unlock()
		}
		return j, lines, err
	}
	if landed {
		if _, _, err := r.Log.Mutate(ctx, id, fn); err != nil {
			return gmailrelay.Job{}, nil, err
		}
	} else {
		// The callback runs, as bbolt runs it before the commit.
		var cur *gmailrelay.Job
		if j, err := r.Log.Get(ctx, id); err == nil {
			cur = &j
		}
		if _, err := fn(cur); err != nil {
			return gmailrelay.Job{}, nil, err
		}
	}
	return gmailrelay.Job{}, nil, errors.Join(gmailrelay.ErrWritesRefused, errDiskFull)
}

func (r *refusingLog) WritesRefused() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.refused
}

func (r *refusingLog) ProbeWrite(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.armed {
		return errors.Join(gmailrelay.ErrWritesRefused, errDiskFull)
	}
	r.refused = nil
	return nil
}

// newRefusingEnv is newEnv over a refusingLog, with its LogWatch and
// sweeper.
func newRefusingEnv(t *testing.T) (*env, *refusingLog, *relay.LogWatch, *sweeper.Sweeper) {
	t.Helper()
	var rl *refusingLog
	te := testenv.New(t, testenv.Options{SendTimeout: 2 * time.Second, Configure: func(c *relay.Config) {
		rl = &refusingLog{Log: c.Log.(*acceptlog.Log)}
		c.Log = rl
	}})
	e := &env{te: te, t: t, clock: te.Clock, emu: te.Emulator, emuURL: te.EmulatorURL, faults: te.Faults, policy: te.Policy,
		log: te.Log, svc: te.Service}
	return e, rl, relay.NewLogWatch(te.Service, 0), sweeper.New(sweeper.ConfigFor(te.Service))
}

// wantUnavailable fails unless err is a 503 unavailable with a
// Retry-After.
func wantUnavailable(t *testing.T, err error, what string) {
	t.Helper()
	var re *relay.Error
	if !errors.As(err, &re) || re.Code != relay.CodeUnavailable || re.RetryAfter <= 0 {
		t.Fatalf("%s: err = %v, want code unavailable with a Retry-After", what, err)
	}
}

// TestOutcomeRefusedAfterGmailAcceptedReplaysNeverResends (emulator
// results): Gmail accepts the send, then the log refuses to record its
// answer. The caller gets 503 with Retry-After; its retries while the log
// refuses writes get 503 and send nothing; once the log takes writes the
// LogWatch makes the job unknown (outcome_not_logged), the retry replays
// it, and the sweeper finds it in the mailbox: one delivery in all.
func TestOutcomeRefusedAfterGmailAcceptedReplaysNeverResends(t *testing.T) {
	ctx := context.Background()
	e, rl, watch, sw := newRefusingEnv(t)
	p := e.prepare("cus_9:order.shipped:ord_9", "hello")
	rl.refuseAfter(1, false) // the admission lands, the outcome is refused
	_, err := e.svc.Send(ctx, p, relay.SendOptions{})
	wantUnavailable(t, err, "send whose outcome the log refused")
	if got := e.emu.Deliveries(p.MessageID); got != 1 {
		t.Fatalf("emulator deliveries = %d, want 1 (Gmail accepted it)", got)
	}
	if j := e.te.Job(p.MessageID); j.State != gmailrelay.StateForwarding {
		t.Fatalf("job is %s, want forwarding (its outcome was refused)", j.State)
	}
	_, err = e.svc.Send(ctx, p, relay.SendOptions{})
	wantUnavailable(t, err, "the caller's retry while the log refuses writes")
	if c := watch.RunOnce(ctx); c.Refused == nil || !c.Probed || c.Settled != 0 || c.Unlogged != 1 {
		t.Fatalf("watch pass while refused = %+v, want a refused probe and 1 unlogged attempt", c)
	}
	rl.heal()
	if c := watch.RunOnce(ctx); c.Refused != nil || c.Settled != 1 || c.Unlogged != 0 {
		t.Fatalf("watch pass once healed = %+v, want the log back and 1 attempt settled", c)
	}
	j := e.te.Job(p.MessageID)
	if j.State != gmailrelay.StateUnknown || j.LastReason != gmailrelay.ReasonOutcomeNotLogged {
		t.Fatalf("job is %s (%s), want unknown (outcome_not_logged)", j.State, j.LastReason)
	}
	res, err := e.svc.Send(ctx, p, relay.SendOptions{})
	if err != nil || !res.Replayed || res.Job.State != gmailrelay.StateUnknown {
		t.Fatalf("retry once the log is back: %+v, %v; want the unknown job replayed", res, err)
	}
	e.clock.Advance(e.policy.Channels["default"].Grace + time.Second)
	if _, err := sw.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if j := e.te.Job(p.MessageID); j.State != gmailrelay.StateSent {
		t.Fatalf("after the sweep the job is %s, want sent (found in the mailbox)", j.State)
	}
	if got := e.emu.Deliveries(p.MessageID); got != 1 {
		t.Fatalf("emulator deliveries = %d, want 1", got)
	}
}

// TestAdmissionRefusedSendsNothingThenSendsOnce (emulator results): the
// log refuses the forwarding record: 503 with Retry-After, Gmail not
// called, and the relay refuses sends until a probe succeeds; then the
// caller's retry sends it, once.
func TestAdmissionRefusedSendsNothingThenSendsOnce(t *testing.T) {
	ctx := context.Background()
	e, rl, watch, _ := newRefusingEnv(t)
	p := e.prepare("cus_8:order.shipped:ord_8", "hello")
	rl.refuseAfter(0, false)
	_, err := e.svc.Send(ctx, p, relay.SendOptions{})
	wantUnavailable(t, err, "send whose admission the log refused")
	other := e.prepare("cus_8:order.shipped:ord_other", "hello")
	_, err = e.svc.Send(ctx, other, relay.SendOptions{})
	wantUnavailable(t, err, "another send while the log refuses writes")
	if n := e.emu.Deliveries(p.MessageID) + e.emu.Deliveries(other.MessageID); n != 0 {
		t.Fatalf("emulator deliveries = %d, want 0", n)
	}
	rl.heal()
	if c := watch.RunOnce(ctx); c.Refused != nil {
		t.Fatalf("watch pass once healed = %+v, want the log back", c)
	}
	for _, q := range []relay.Prepared{p, other} {
		res, err := e.svc.Send(ctx, q, relay.SendOptions{})
		if err != nil || res.Job.State != gmailrelay.StateSent {
			t.Fatalf("retry once the log is back: %+v, %v; want sent", res, err)
		}
		if got := e.emu.Deliveries(q.MessageID); got != 1 {
			t.Fatalf("emulator deliveries of %s = %d, want 1", q.MessageID, got)
		}
	}
}

// TestAdmissionStoredDespiteRefusalIsSettledNotSent (emulator results):
// the forwarding record lands but the log reports a refusal (a lost
// acknowledgement): Gmail is not called; once the log takes writes the
// LogWatch fails the attempt, retryable (not_reached), instead of leaving
// the job in forwarding, and the caller's retry sends it once.
func TestAdmissionStoredDespiteRefusalIsSettledNotSent(t *testing.T) {
	ctx := context.Background()
	e, rl, watch, _ := newRefusingEnv(t)
	p := e.prepare("cus_7:order.shipped:ord_7", "hello")
	rl.refuseAfter(0, true)
	_, err := e.svc.Send(ctx, p, relay.SendOptions{})
	wantUnavailable(t, err, "send whose admission landed but was reported refused")
	if j := e.te.Job(p.MessageID); j.State != gmailrelay.StateForwarding || e.emu.Deliveries(p.MessageID) != 0 {
		t.Fatalf("job is %s with %d deliveries, want forwarding, none", j.State, e.emu.Deliveries(p.MessageID))
	}
	rl.heal()
	if c := watch.RunOnce(ctx); c.Settled != 1 {
		t.Fatalf("watch pass once healed = %+v, want 1 attempt settled", c)
	}
	j := e.te.Job(p.MessageID)
	if j.State != gmailrelay.StateFailed || !j.Retryable || j.LastReason != gmailrelay.ReasonNotReached {
		t.Fatalf("job is %s (retryable %v, %s), want failed, retryable, not_reached", j.State, j.Retryable, j.LastReason)
	}
	res, err := e.svc.Send(ctx, p, relay.SendOptions{})
	if err != nil || res.Job.State != gmailrelay.StateSent {
		t.Fatalf("retry: %+v, %v; want sent", res, err)
	}
	if got := e.emu.Deliveries(p.MessageID); got != 1 {
		t.Fatalf("emulator deliveries = %d, want 1", got)
	}
}
