package retention_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/acceptlog"
	"github.com/gmailrelay/gmailrelay/acceptlog/acceptlogtest"
	"github.com/gmailrelay/gmailrelay/internal/testclock"
	"github.com/gmailrelay/gmailrelay/retention"
)

// sent writes a sent job last changed at the clock's now.
func sent(t *testing.T, l *acceptlog.Log, id string, at time.Time) {
	t.Helper()
	_, _, err := l.Mutate(context.Background(), id, func(*gmailrelay.Job) (gmailrelay.Change, error) {
		j := gmailrelay.Job{MessageID: id, Channel: "default", Mailbox: "default", State: gmailrelay.StateForwarding, Attempts: 1, CreatedAt: at, UpdatedAt: at}
		return gmailrelay.Change{Job: &j, Raw: []byte("raw"), Lines: []gmailrelay.Line{
			{Kind: gmailrelay.KindReceived, Attempt: 1, Time: at}, {Kind: gmailrelay.KindForwarding, Attempt: 1, State: gmailrelay.StateForwarding, Time: at}}}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = l.Mutate(context.Background(), id, func(cur *gmailrelay.Job) (gmailrelay.Change, error) {
		cur.State, cur.Effects = gmailrelay.StateSent, 1
		return gmailrelay.Change{Job: cur, Lines: []gmailrelay.Line{{Kind: gmailrelay.KindEffect, Attempt: 1, State: gmailrelay.StateSent, Source: gmailrelay.SourceResponse}}}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestRunOncePrunesInBatchesUntilDone(t *testing.T) {
	clock := testclock.New()
	l := acceptlogtest.Open(t)
	for i := range 5 {
		sent(t, l, fmt.Sprintf("<%d@x.example>", i), clock.Now())
	}
	p := retention.New(retention.Config{Log: l, Retention: 24 * time.Hour, Now: clock.Now, Batch: 2})
	if res, err := p.RunOnce(context.Background()); err != nil || res.Jobs != 0 {
		t.Fatalf("RunOnce before the retention ran out = %+v, %v; want nothing pruned", res, err)
	}
	clock.Advance(25 * time.Hour)
	res, err := p.RunOnce(context.Background())
	if err != nil || res.Jobs != 5 || res.Lines != 10 || res.RawBytes != 15 {
		t.Fatalf("RunOnce = %+v, %v; want 5 jobs, 10 lines, 15 raw bytes", res, err)
	}
	if !res.Cutoff.Equal(clock.Now().Add(-24 * time.Hour)) {
		t.Errorf("cutoff %v, want now - 24h", res.Cutoff)
	}
	if tot := p.Totals(); tot.Jobs != 5 {
		t.Errorf("Totals = %+v, want 5 jobs", tot)
	}
}

func TestDisabledPassPrunesNoJob(t *testing.T) {
	clock := testclock.New()
	l := acceptlogtest.Open(t)
	sent(t, l, "<a@x.example>", clock.Now().Add(-1000*time.Hour))
	p := retention.New(retention.Config{Log: l, Now: clock.Now})
	if res, err := p.RunOnce(context.Background()); err != nil || res.Jobs != 0 || p.Enabled() {
		t.Fatalf("disabled RunOnce = %+v, %v", res, err)
	}
	if j, err := l.Get(context.Background(), "<a@x.example>"); err != nil || !j.PrunedAt.IsZero() {
		t.Fatalf("job after a disabled pass = %+v, %v; want it unpruned", j, err)
	}
}

// TestPassPrunesTheSendIndex: with or without a retention, a pass drops
// the send-index entries older than SendsKeep (the daily budget counts 24 h)
// and keeps the newer ones, so the index does not grow forever.
func TestPassPrunesTheSendIndex(t *testing.T) {
	for _, keepDetail := range []time.Duration{0, 90 * 24 * time.Hour} {
		t.Run(fmt.Sprintf("retention=%s", keepDetail), func(t *testing.T) {
			clock := testclock.New()
			l := acceptlogtest.Open(t)
			ctx := context.Background()
			for i, age := range []time.Duration{72 * time.Hour, 49 * time.Hour, 47 * time.Hour, time.Hour} {
				sent(t, l, fmt.Sprintf("<%d@x.example>", i), clock.Now().Add(-age))
			}
			all, err := l.SendTimes(ctx, "default", time.Time{})
			if err != nil || len(all) != 4 {
				t.Fatalf("send index before the pass: %d entries, %v; want 4 (the test's sent helper must write forwarding lines at its time)", len(all), err)
			}
			p := retention.New(retention.Config{Log: l, Retention: keepDetail, Now: clock.Now})
			res, err := p.RunOnce(ctx)
			if err != nil || res.Sends != 2 {
				t.Fatalf("RunOnce = %+v, %v; want 2 send-index entries dropped (72 h and 49 h old)", res, err)
			}
			left, err := l.SendTimes(ctx, "default", time.Time{})
			if err != nil || len(left) != 2 {
				t.Fatalf("send index after the pass: %v, %v; want the 47 h and 1 h old entries", left, err)
			}
			if !left[0].Equal(clock.Now().Add(-47 * time.Hour)) {
				t.Errorf("oldest kept entry %v, want now - 47h", left[0])
			}
		})
	}
}

func TestSendsKeepNeverBelowTheBudgetWindow(t *testing.T) {
	clock := testclock.New()
	l := acceptlogtest.Open(t)
	sent(t, l, "<a@x.example>", clock.Now().Add(-23*time.Hour))
	p := retention.New(retention.Config{Log: l, Now: clock.Now, SendsKeep: time.Minute})
	if res, err := p.RunOnce(context.Background()); err != nil || res.Sends != 0 {
		t.Fatalf("RunOnce with SendsKeep 1m = %+v, %v; want the 23 h old entry kept (the budget counts 24 h)", res, err)
	}
}

func TestLoopRunsAPassAtStart(t *testing.T) {
	clock := testclock.New()
	l := acceptlogtest.Open(t)
	sent(t, l, "<a@x.example>", clock.Now().Add(-48*time.Hour))
	p := retention.New(retention.Config{Log: l, Retention: 24 * time.Hour, Now: clock.Now, Interval: time.Hour})
	p.Start(context.Background())
	res := <-p.Passes()
	p.Stop()
	p.Stop() // twice is fine
	if res.Jobs != 1 {
		t.Fatalf("first loop pass = %+v, want 1 job pruned", res)
	}
}
