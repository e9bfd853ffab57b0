package outbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/relay"
)

// A job scheduled for tomorrow is not ahead of a send for now (the order is
// send_at, then acceptance): with budget, quota and Gmail all fine, sends
// that may queue are sent at once, delivered once each (emulator ground
// truth), and tomorrow's job stays queued. Were the scheduled job taken as
// the head of the queue, every later send of its mailbox would answer 202
// queued, and nothing would be sent until a delivery pass.
func TestEmulatorScheduledJobDoesNotQueueSendsForNow(t *testing.T) {
	e := newEnv(t, 1_000_000, 2000)
	ctx := context.Background()
	later := e.prepare(0)
	later.SendAt = e.clock.Now().Add(24 * time.Hour)
	if res, err := e.svc.Send(ctx, later, relay.SendOptions{Queue: true}); err != nil || res.Job.State != gmailrelay.StateQueued {
		t.Fatalf("scheduled send: %s, %v; want queued", res.Job.State, err)
	}
	for i := 1; i <= 3; i++ {
		p := e.prepare(i)
		res, err := e.svc.Send(ctx, p, relay.SendOptions{Queue: true})
		if err != nil || res.Job.State != gmailrelay.StateSent {
			t.Errorf("send %d: %s, %v; want sent at once", i, res.Job.State, err)
		}
		if got := e.emu.Deliveries(p.MessageID); got != 1 {
			t.Errorf("send %d: %d deliveries, want 1", i, got)
		}
	}
	if got := e.state(later); got != gmailrelay.StateQueued {
		t.Errorf("tomorrow's job: %s, want still queued", got)
	}
	if got := e.emu.Deliveries(later.MessageID); got != 0 {
		t.Errorf("tomorrow's job: %d deliveries, want 0", got)
	}
}

// With more jobs scheduled for later than a send reads (relay's queueScan,
// 64), a send for now is queued rather than read past them all, and the
// outbox's next pass delivers it first, once; tomorrow's jobs stay queued.
func TestEmulatorManyScheduledJobsQueueASendForNowThatGoesFirst(t *testing.T) {
	e := newEnv(t, 1_000_000, 2000)
	ctx := context.Background()
	for i := range 70 {
		later := e.prepare(1000 + i)
		later.SendAt = e.clock.Now().Add(24 * time.Hour)
		if _, err := e.svc.Send(ctx, later, relay.SendOptions{Queue: true}); err != nil {
			t.Fatal(err)
		}
	}
	now := e.prepare(1)
	res, err := e.svc.Send(ctx, now, relay.SendOptions{Queue: true})
	if err != nil || res.Job.State != gmailrelay.StateQueued {
		t.Fatalf("send for now behind 70 scheduled jobs: %s, %v; want queued", res.Job.State, err)
	}
	if _, err := e.box.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if got := e.state(now); got != gmailrelay.StateSent {
		t.Errorf("after one outbox pass the send for now is %s, want sent", got)
	}
	if got := e.emu.Deliveries(now.MessageID); got != 1 {
		t.Errorf("send for now: %d deliveries, want 1", got)
	}
	if got := e.emu.Stats().Deliveries; got != 1 {
		t.Errorf("emulator deliveries = %d, want 1 (tomorrow's jobs wait)", got)
	}
}

// The order per mailbox is send_at, then acceptance order
// (docs/design.md#the-outbox). Jobs queued for one send_at at one instant
// of the clock (a manual clock, or a coarse one) go in the order the relay
// accepted them, not in Message-ID order. The three jobs are picked so that their Message-IDs
// sort against their acceptance order.
func TestEmulatorJobsQueuedAtOneInstantGoInAcceptanceOrder(t *testing.T) {
	e := newEnv(t, 1_000_000, 2000)
	at := e.clock.Now().Add(time.Hour)
	var picked []relay.Prepared
	for i := 1; len(picked) < 3; i++ {
		p := e.prepare(i)
		if len(picked) == 0 || p.MessageID < picked[len(picked)-1].MessageID {
			p.SendAt = at
			picked = append(picked, p)
		}
	}
	ctx := context.Background()
	for _, p := range picked {
		if res, err := e.svc.Send(ctx, p, relay.SendOptions{Queue: true}); err != nil || res.Job.State != gmailrelay.StateQueued {
			t.Fatalf("send %s: %s, %v; want queued", p.MessageID, res.Job.State, err)
		}
	}
	e.clock.Advance(time.Hour)
	e.drain(time.Hour, nil)
	var order []uint64
	for _, p := range picked {
		lines, err := e.log.JobLines(ctx, p.MessageID)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range lines {
			if l.Kind == gmailrelay.KindEffect {
				order = append(order, l.Seq)
			}
		}
	}
	if len(order) != 3 || !(order[0] < order[1] && order[1] < order[2]) {
		t.Errorf("effect line seqs in acceptance order: %v, want 3 increasing (delivered in acceptance order)", order)
	}
}
