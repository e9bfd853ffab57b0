package outbox_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/faultmodes"
	"github.com/gmailrelay/gmailrelay/relay"
	"github.com/gmailrelay/gmailrelay/sweeper"
)

// TestEmulatorReconciliationKeepsItsShareWhileTheQueueIsFull: five sends
// whose answers are dropped (ambiguous), then a backlog of 300 queued
// sends at 6,000 units a minute. With the sweeper running beside the
// outbox, every ambiguous job is resolved (sent, found in the mailbox)
// while jobs are still queued: the delivery loop never takes the
// reconciliation share.
func TestEmulatorReconciliationKeepsItsShareWhileTheQueueIsFull(t *testing.T) {
	e := newEnv(t, 6000, 2000)
	ctx := context.Background()
	drop := faultmodes.Decision{RuleID: "test", Mode: faultmodes.ForwardThenDropResponse}
	var ambiguous []relay.Prepared
	for i := range 5 {
		p := e.prepare(10_000 + i)
		res, err := e.svc.Send(faultmodes.WithForced(ctx, drop), p, relay.SendOptions{Queue: true})
		if err != nil || res.Job.State != gmailrelay.StateUnknown {
			t.Fatalf("dropped send %d: %v state %s, want unknown", i, err, res.Job.State)
		}
		ambiguous = append(ambiguous, p)
	}
	var queued []relay.Prepared
	for i := range 300 {
		queued = append(queued, e.prepare(i))
		e.send(i)
	}
	sw := sweeper.New(e.te.SweeperConfig())
	var resolvedAt time.Duration = -1
	start := e.clock.Now()
	var leftWhenResolved int
	took := e.drain(time.Hour, func() {
		if _, err := sw.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		if resolvedAt >= 0 {
			return
		}
		for _, p := range ambiguous {
			if e.state(p) == gmailrelay.StateUnknown {
				return
			}
		}
		resolvedAt = e.clock.Now().Sub(start)
		leftWhenResolved, _ = e.svc.QueueDepth(ctx)
	})
	if resolvedAt < 0 || leftWhenResolved == 0 {
		t.Fatalf("ambiguous jobs resolved at %s with %d still queued; want resolved during the backlog (it took %s)", resolvedAt, leftWhenResolved, took)
	}
	for _, p := range append(ambiguous, queued...) {
		if d := e.emu.Deliveries(p.MessageID); d != 1 {
			t.Errorf("%s: emulator deliveries %d, want 1", p.MessageID, d)
		}
	}
	if st := e.emu.Stats(); st.RateLimited != 0 {
		t.Errorf("emulator answered %d rate limits, want 0", st.RateLimited)
	}
	t.Logf("emulator results: 5 ambiguous jobs resolved after %s with %d jobs still queued; backlog of 300 drained in %s", resolvedAt, leftWhenResolved, took)
}

// TestEmulatorSendAtOneHourAheadIsNotDeliveredBefore: a send_at an hour
// ahead is queued at once, not delivered a second before, delivered after.
func TestEmulatorSendAtOneHourAheadIsNotDeliveredBefore(t *testing.T) {
	e := newEnv(t, 6000, 2000)
	ctx := context.Background()
	p := e.prepare(1)
	p.SendAt = e.clock.Now().Add(time.Hour)
	res, err := e.svc.Send(ctx, p, relay.SendOptions{Queue: true})
	if err != nil || res.Job.State != gmailrelay.StateQueued {
		t.Fatalf("send: %v state %s, want queued", err, res.Job.State)
	}
	e.clock.Advance(time.Hour - time.Second)
	r, err := e.box.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d := e.emu.Deliveries(p.MessageID); d != 0 || r.Delivered != 0 {
		t.Fatalf("a second before send_at: %d deliveries (pass delivered %d), want 0", d, r.Delivered)
	}
	if r.Next != time.Second {
		t.Errorf("pass says next in %s, want 1s", r.Next)
	}
	e.clock.Advance(time.Second)
	if _, err := e.box.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if d := e.emu.Deliveries(p.MessageID); d != 1 || e.state(p) != gmailrelay.StateSent {
		t.Fatalf("at send_at: %d deliveries, state %s; want 1, sent", d, e.state(p))
	}
}

// TestEmulatorCancelQueuedIsAbandonedNeverDeliveredCancelSentIsConflict:
// cancelling a queued job abandons it with a resolved line (actor, reason
// cancelled) and the outbox never delivers it; cancelling a sent job is a
// conflict and changes nothing.
func TestEmulatorCancelQueuedIsAbandonedNeverDeliveredCancelSentIsConflict(t *testing.T) {
	e := newEnv(t, 6000, 2000)
	ctx := context.Background()
	now := e.prepare(1)
	if s := e.send(1).Job.State; s != gmailrelay.StateSent {
		t.Fatalf("first send: %s, want sent", s)
	}
	later := e.prepare(2)
	later.SendAt = e.clock.Now().Add(time.Minute)
	if res, err := e.svc.Send(ctx, later, relay.SendOptions{Queue: true}); err != nil || res.Job.State != gmailrelay.StateQueued {
		t.Fatalf("later send: %v %s, want queued", err, res.Job.State)
	}
	res, err := e.svc.Cancel(ctx, later.MessageID, "ops@example.com")
	if err != nil || res.Job.State != gmailrelay.StateAbandoned {
		t.Fatalf("cancel queued: %v state %s, want abandoned", err, res.Job.State)
	}
	lines, err := e.log.JobLines(ctx, later.MessageID)
	if err != nil {
		t.Fatal(err)
	}
	last := lines[len(lines)-1]
	if last.Kind != gmailrelay.KindResolved || last.Reason != gmailrelay.ReasonCancelled || last.Actor != "ops@example.com" {
		t.Errorf("last line %+v, want resolved cancelled by ops@example.com", last)
	}
	e.clock.Advance(time.Hour)
	if _, err := e.box.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if d := e.emu.Deliveries(later.MessageID); d != 0 {
		t.Errorf("cancelled job delivered %d times, want 0", d)
	}
	_, err = e.svc.Cancel(ctx, now.MessageID, "ops@example.com")
	var re *relay.Error
	if !errors.As(err, &re) || re.Code != relay.CodeConflict {
		t.Errorf("cancel sent: %v, want CodeConflict", err)
	}
	if e.state(now) != gmailrelay.StateSent {
		t.Errorf("sent job is %s after a refused cancel", e.state(now))
	}
}

// TestEmulatorQueuedJobsSurviveARestartAndSameKeyReplays: queued jobs are
// in the log: after a restart the new outbox delivers them once, and the
// same key while queued is a replay of the queued job, not a second entry.
func TestEmulatorQueuedJobsSurviveARestartAndSameKeyReplays(t *testing.T) {
	e := newEnv(t, 6000, 2000)
	ctx := context.Background()
	var ps []relay.Prepared
	for i := range 100 {
		ps = append(ps, e.prepare(i))
		e.send(i)
	}
	again, err := e.svc.Send(ctx, e.prepare(99), relay.SendOptions{Queue: true})
	if err != nil || !again.Replayed || again.Job.State != gmailrelay.StateQueued {
		t.Fatalf("same key again: %v replayed %v state %s, want a replay of the queued job", err, again.Replayed, again.Job.State)
	}
	want := 0
	for _, p := range ps {
		if e.state(p) == gmailrelay.StateQueued {
			want++
		}
	}
	if n, _ := e.svc.QueueDepth(ctx); n != want || want < 40 {
		t.Fatalf("queue depth %d, want %d queued jobs (at least 40: one minute's budget went at once)", n, want)
	}
	e.restart()
	e.drain(time.Hour, nil)
	for _, p := range ps {
		if d := e.emu.Deliveries(p.MessageID); d != 1 {
			t.Errorf("%s: %d deliveries after restart, want 1", p.MessageID, d)
		}
	}
}
