package pglog_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/pglog"
)

// Five replicas opening one fresh schema at once: all succeed and the
// migrations are applied exactly once.
func TestOpenConcurrentlyMigratesOnce(t *testing.T) {
	url := databaseURL(t)
	schema := freshSchema(t, url)
	logs := make([]*pglog.Log, 5)
	var wg sync.WaitGroup
	for i := range logs {
		wg.Go(func() {
			l, err := pglog.Open(context.Background(), url, pglog.Options{Schema: schema})
			if err != nil {
				t.Errorf("replica %d: %v", i, err)
				return
			}
			t.Cleanup(func() { _ = l.Close() })
			logs[i] = l
		})
	}
	wg.Wait()
	for i, l := range logs {
		if l == nil {
			t.Fatalf("replica %d did not open", i)
		}
	}
	applied, err := pglog.Migrate(context.Background(), poolOf(t, url, schema))
	if err != nil || len(applied) != 0 {
		t.Errorf("Migrate after five opens applied %v (%v), want nothing", applied, err)
	}
}

// Two replicas (two Logs on one schema) creating the same new job from 40
// goroutines at once: exactly one creation wins, every other call sees the
// job and refuses, and the job has one received line.
func TestTwoReplicasSameNewJobEndInOneJob(t *testing.T) {
	a, b := twoReplicas(t, nil)
	const id = "<same@x>"
	var created, refused atomic.Int32
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range 40 {
		l := a
		if i%2 == 1 {
			l = b
		}
		wg.Go(func() {
			<-start
			_, _, err := l.Mutate(context.Background(), id, func(cur *gmailrelay.Job) (gmailrelay.Change, error) {
				if cur != nil {
					return gmailrelay.Change{}, errExists
				}
				return gmailrelay.Change{
					Job:   &gmailrelay.Job{MessageID: id, Channel: "default", State: gmailrelay.StateForwarding, Attempts: 1},
					Lines: []gmailrelay.Line{{Kind: gmailrelay.KindReceived, Attempt: 1, State: gmailrelay.StateForwarding}},
				}, nil
			})
			switch err {
			case nil:
				created.Add(1)
			case errExists:
				refused.Add(1)
			default:
				t.Errorf("Mutate: %v", err)
			}
		})
	}
	close(start)
	wg.Wait()
	if created.Load() != 1 || refused.Load() != 39 {
		t.Errorf("created %d, refused %d; want 1 and 39", created.Load(), refused.Load())
	}
	lines, err := b.JobLines(context.Background(), id)
	if err != nil || len(lines) != 1 {
		t.Errorf("job lines %v (%v), want one received line", lines, err)
	}
}

var errExists = fmt.Errorf("job exists")

// A reader tailing Lines(after) while two replicas write concurrently sees
// every line exactly once, in Seq order, with no gap: lines commit in Seq
// order, so a page never skips one that commits later.
func TestLinesTailNeverSkipsUnderConcurrentWriters(t *testing.T) {
	a, b := twoReplicas(t, func() time.Time { return time.Unix(1, 0) })
	ctx := context.Background()
	const writers, jobs = 8, 25
	var wg sync.WaitGroup
	done := make(chan struct{})
	for w := range writers {
		l := a
		if w%2 == 1 {
			l = b
		}
		wg.Go(func() {
			for i := range jobs {
				id := fmt.Sprintf("<w%d-%d@x>", w, i)
				_, _, err := l.Mutate(ctx, id, func(*gmailrelay.Job) (gmailrelay.Change, error) {
					return gmailrelay.Change{
						Job: &gmailrelay.Job{MessageID: id, Channel: "default", State: gmailrelay.StateForwarding, Attempts: 1},
						Lines: []gmailrelay.Line{
							{Kind: gmailrelay.KindReceived, Attempt: 1},
							{Kind: gmailrelay.KindForwarding, Attempt: 1, State: gmailrelay.StateForwarding},
						},
					}, nil
				})
				if err != nil {
					t.Errorf("Mutate %s: %v", id, err)
				}
			}
		})
	}
	go func() { wg.Wait(); close(done) }()
	var seen []uint64
	after := uint64(0)
	tail := func() {
		for {
			lines, next, err := a.Lines(ctx, after, 7)
			if err != nil {
				t.Fatal(err)
			}
			for _, ln := range lines {
				seen = append(seen, ln.Seq)
				after = ln.Seq
			}
			if next == 0 {
				return
			}
		}
	}
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
		}
		tail()
	}
	tail()
	want := writers * jobs * 2
	if len(seen) != want {
		t.Fatalf("tail saw %d lines, want %d", len(seen), want)
	}
	for i, s := range seen {
		if s != uint64(i+1) {
			t.Fatalf("tail line %d has seq %d, want %d (a gap or a line out of order)", i, s, i+1)
		}
	}
}
