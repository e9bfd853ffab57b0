package retention_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay/acceptlog"
	"github.com/gmailrelay/gmailrelay/acceptlog/acceptlogtest"
	"github.com/gmailrelay/gmailrelay/internal/testclock"
	"github.com/gmailrelay/gmailrelay/retention"
)

// sent writes a sent job last changed at the clock's now.
func sent(t *testing.T, l *acceptlog.Log, id string, at time.Time) {
	t.Helper()
	_, _, err := l.Mutate(context.Background(), id, func(*acceptlog.Job) (acceptlog.Change, error) {
		j := acceptlog.Job{MessageID: id, Channel: "default", State: acceptlog.StateForwarding, Attempts: 1, CreatedAt: at, UpdatedAt: at}
		return acceptlog.Change{Job: &j, Raw: []byte("raw"), Lines: []acceptlog.Line{
			{Kind: acceptlog.KindReceived, Attempt: 1}, {Kind: acceptlog.KindForwarding, Attempt: 1, State: acceptlog.StateForwarding}}}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = l.Mutate(context.Background(), id, func(cur *acceptlog.Job) (acceptlog.Change, error) {
		cur.State, cur.Effects = acceptlog.StateSent, 1
		return acceptlog.Change{Job: cur, Lines: []acceptlog.Line{{Kind: acceptlog.KindEffect, Attempt: 1, State: acceptlog.StateSent, Source: acceptlog.SourceResponse}}}, nil
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

func TestDisabledPassDoesNothing(t *testing.T) {
	clock := testclock.New()
	l := acceptlogtest.Open(t)
	sent(t, l, "<a@x.example>", clock.Now().Add(-1000*time.Hour))
	p := retention.New(retention.Config{Log: l, Now: clock.Now})
	p.Start(context.Background()) // does nothing
	defer p.Stop()
	if res, err := p.RunOnce(context.Background()); err != nil || res.Jobs != 0 || p.Enabled() {
		t.Fatalf("disabled RunOnce = %+v, %v", res, err)
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
