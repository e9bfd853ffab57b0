package pglog_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/policy"
	"github.com/gmailrelay/gmailrelay/relay"
	"github.com/gmailrelay/gmailrelay/sweeper"
)

// Two replicas' sweepers share the measured lag p99, the floor under every
// miss: A's verify pass measures the mailbox's 8-minute lag and writes it
// to the mailbox's record; B, which never measured anything, waits that
// long before it counts a miss of an ambiguous send Gmail stored and
// indexed after 8 minutes (behind a later send indexed at once, its
// witness). Were the samples kept in A's memory, B would count the miss
// at grace and resend the job, and Gmail would deliver it twice (emulator
// ground truth).
func TestEmulatorTwoSweepersShareTheMeasuredLag(t *testing.T) {
	s := newSite(t)
	ctx := context.Background()
	pol := quietPolicy()
	grace := pol.Channels[policy.DefaultChannel].Grace
	a := s.replica(t, relay.Config{Provider: s.gm, Policy: pol})
	b := s.replica(t, relay.Config{Provider: s.gm, Policy: pol})
	swA, swB := sweeper.New(a.sweeperConfig()), sweeper.New(b.sweeperConfig())
	sweep := func(sw *sweeper.Sweeper) {
		t.Helper()
		s.clock.Advance(grace)
		if _, err := sw.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
	}
	keys := 0
	send := func(svc *pgRelay) gmailrelay.Job {
		t.Helper()
		keys++
		p, err := relay.Prepare(relay.SendRequest{Key: fmt.Sprintf("lag:%d", keys), To: relay.AddressList{"a@example.org"}, Subject: "s", Text: "b"},
			"", pol.MsgIDDomain, s.clock.Now())
		if err != nil {
			t.Fatal(err)
		}
		res, _ := svc.Send(ctx, p, relay.SendOptions{}) // an ambiguous send's error is the fault
		return res.Job
	}

	s.emu.SetIndexLagDistribution(gmailfake.LagDistribution{P50: 8 * time.Minute, P99: 8 * time.Minute, Max: 8 * time.Minute}, gmailfake.IndexRandom)
	mb := send(a).Mailbox
	for range 10 {
		sweep(swA)
	}
	p99, n := swA.IndexLag(mb, 0.99)
	if n != 1 || p99 < 8*time.Minute {
		t.Fatalf("A measured p99 %s from %d samples, want at least 8m from 1", p99, n)
	}
	rec, err := b.log.Mailbox(ctx, mb)
	if err != nil {
		t.Fatal(err)
	}
	if got := rec.Lags.Durations(); len(got) != 1 || got[0] != p99 {
		t.Fatalf("the mailbox's record, read by B: lag samples %v, want [%s]", got, p99)
	}

	if _, err := s.emu.AddFault(gmailfake.Fault{Method: gmailfake.MethodSend, Action: gmailfake.ActionAcceptThenError, Status: 500}); err != nil {
		t.Fatal(err)
	}
	j := send(b)
	if j.State != gmailrelay.StateUnknown {
		t.Fatalf("the faulted send left the job %s, want unknown", j.State)
	}
	s.emu.SetIndexLagDistribution(gmailfake.LagDistribution{P50: time.Second, P99: time.Second, Max: time.Second}, gmailfake.IndexRandom)
	s.clock.Advance(2 * time.Second)
	send(b)
	sweep(swB)
	if got, _ := swB.IndexLag(mb, 0.99); got != p99 {
		t.Errorf("B's first pass: p99 %s, want %s (A's, from the log)", got, p99)
	}
	first, err := b.log.Get(ctx, j.MessageID)
	if err != nil {
		t.Fatal(err)
	}
	if first.Checks != 0 || !first.NextCheckAt.Equal(first.AmbiguousAt.Add(p99)) {
		t.Errorf("B's first look at grace: checks %d, next check %s; want no miss counted and a look at attempt + p99 (%s)",
			first.Checks, first.NextCheckAt, first.AmbiguousAt.Add(p99))
	}
	for range 11 {
		sweep(swB)
	}
	if got := s.emu.Deliveries(j.MessageID); got != 1 {
		t.Errorf("emulator result: %d deliveries of the ambiguous send, want 1 (a resend is a duplicate)", got)
	}
	end, err := a.log.Get(ctx, j.MessageID)
	if err != nil {
		t.Fatal(err)
	}
	if end.State != gmailrelay.StateSent || end.Attempts != 1 {
		t.Errorf("the ambiguous job ended %s after %d attempts, want sent after 1 (found, not resent)", end.State, end.Attempts)
	}
}
