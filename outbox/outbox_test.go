package outbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/faultmodes"
	"github.com/gmailrelay/gmailrelay/relay"
)

// TestEmulatorBurst500AtGmailQuotaAllDeliveredOnceWithinIdeal: 500 sends
// in one burst at 6,000 units a minute. Every answer is sent (200) or
// queued (202), none refused; every message is delivered exactly once by
// the emulator's ground truth, the emulator answered no 429, and the
// backlog drained within the quota-limited ideal + 10 % of emulated time.
func TestEmulatorBurst500AtGmailQuotaAllDeliveredOnceWithinIdeal(t *testing.T) {
	const n, perMin = 500, 6000
	e := newEnv(t, perMin, 2000)
	sent, queued := 0, 0
	ps := make([]relay.Prepared, n)
	for i := range n {
		ps[i] = e.prepare(i)
		switch s := e.send(i).Job.State; s {
		case gmailrelay.StateSent:
			sent++
		case gmailrelay.StateQueued:
			queued++
		default:
			t.Fatalf("send %d answered state %s, want sent or queued", i, s)
		}
	}
	// One minute's burst goes at once, the rest at 100 units a second.
	perSend := time.Duration(relay.UnitsSend) * time.Minute / perMin
	ideal := time.Duration(n-perMin/relay.UnitsSend) * perSend
	took := e.drain(2*ideal, nil)
	for i, p := range ps {
		if d := e.emu.Deliveries(p.MessageID); d != 1 {
			t.Errorf("job %d: emulator deliveries = %d, want 1", i, d)
		}
		if s := e.state(p); s != gmailrelay.StateSent {
			t.Errorf("job %d: state %s, want sent", i, s)
		}
	}
	st := e.emu.Stats()
	if st.RateLimited != 0 {
		t.Errorf("emulator answered %d rate limits, want 0", st.RateLimited)
	}
	t.Logf("emulator results: %d sent at once, %d queued; backlog drained in %s of emulated time (ideal %s, bound %s); emulator 429s %d",
		sent, queued, took, ideal, ideal*11/10, st.RateLimited)
	if took > ideal*11/10 {
		t.Errorf("backlog took %s of emulated time, want at most ideal %s + 10 %%", took, ideal)
	}
}

// TestEmulatorDailyLimitHoldsTheRestForTheNextDay: daily limit 100 with 150
// sends: 100 go today, 50 the next day, none refused by the emulator.
func TestEmulatorDailyLimitHoldsTheRestForTheNextDay(t *testing.T) {
	e := newEnv(t, 1_000_000, 100)
	e.emu.SetDailySendLimit(100)
	ps := make([]relay.Prepared, 150)
	for i := range ps {
		ps[i] = e.prepare(i)
		e.send(i)
	}
	if _, err := e.box.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	today := 0
	for _, p := range ps {
		today += e.emu.Deliveries(p.MessageID)
	}
	if today != 100 {
		t.Fatalf("delivered today = %d, want 100", today)
	}
	e.drain(25*time.Hour, nil)
	total := 0
	for _, p := range ps {
		total += e.emu.Deliveries(p.MessageID)
	}
	if total != 150 {
		t.Errorf("delivered after the next day = %d, want 150", total)
	}
	if st := e.emu.Stats(); st.DailyLimited != 0 || st.RateLimited != 0 {
		t.Errorf("emulator refused %d sends for the daily limit and %d for quota, want 0", st.DailyLimited, st.RateLimited)
	}
	t.Logf("emulator results: 100 delivered on day one, %d on day two, 0 refused", total-today)
}

// A fail-before-forward fault on a delivery is Gmail out of reach before
// anything was sent: the job stays queued (queued → failed is not in the
// table) and the next pass delivers it, once.
func TestEmulatorFailBeforeForwardOnDeliveryKeepsTheJobQueued(t *testing.T) {
	e := newEnv(t, 1_000_000, 100)
	ctx := context.Background()
	p := e.prepare(0)
	p.SendAt = e.clock.Now().Add(time.Minute)
	if res, err := e.svc.Send(ctx, p, relay.SendOptions{Queue: true}); err != nil || res.Job.State != gmailrelay.StateQueued {
		t.Fatalf("send_at send: %+v, %v", res.Job, err)
	}
	one := 1
	if _, err := e.faults.Add(faultmodes.Spec{Mode: faultmodes.FailBeforeForward, Count: &one}); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Minute)
	res, err := e.box.RunOnce(ctx)
	if err != nil {
		t.Fatalf("outbox pass with a fail-before-forward fault: %v", err)
	}
	if st := e.state(p); st != gmailrelay.StateQueued || res.Left != 1 || res.Next <= 0 || e.emu.Deliveries(p.MessageID) != 0 {
		t.Fatalf("after the faulted delivery: %s, pass %+v, %d deliveries; want still queued, nothing sent", st, res, e.emu.Deliveries(p.MessageID))
	}
	e.clock.Advance(res.Next)
	if _, err := e.box.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if st, n := e.state(p), e.emu.Deliveries(p.MessageID); st != gmailrelay.StateSent || n != 1 {
		t.Errorf("next pass: %s with %d deliveries, want sent once", st, n)
	}
}
