package pglog_test

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/acceptlog/logtest"
	"github.com/gmailrelay/gmailrelay/api"
	"github.com/gmailrelay/gmailrelay/faultmodes"
	"github.com/gmailrelay/gmailrelay/internal/testclock"
	"github.com/gmailrelay/gmailrelay/pglog"
	"github.com/gmailrelay/gmailrelay/policy"
	"github.com/gmailrelay/gmailrelay/relay"
	"github.com/gmailrelay/gmailrelay/sweeper"
)

// dueJob writes a job that is unknown and due at t (forwarding, then
// ambiguous), through the transition table like the relay does.
func dueJob(t *testing.T, l gmailrelay.Store, id string, at time.Time) {
	t.Helper()
	ctx := context.Background()
	logtest.Forward(t, l, id, "me", time.Time{})
	_, _, err := l.Mutate(ctx, id, func(cur *gmailrelay.Job) (gmailrelay.Change, error) {
		j := *cur
		j.State, j.NextCheckAt, j.AmbiguousAt = gmailrelay.StateUnknown, at, at
		return gmailrelay.Change{Job: &j, Lines: []gmailrelay.Line{{Kind: gmailrelay.KindAmbiguous, Attempt: 1,
			State: gmailrelay.StateUnknown, Reason: gmailrelay.ReasonTimeout}}}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Two replicas asking for the due jobs at once split them: Due claims what
// it returns (FOR UPDATE SKIP LOCKED), so their lists are disjoint and
// together hold every due job. A replica gets its own claims again; the
// other gets them once the claim has run out on the log's clock, or at
// once when the job was written meanwhile.
func TestDueClaimsSplitJobsBetweenReplicas(t *testing.T) {
	clock := testclock.New()
	a, b := twoReplicas(t, clock.Now)
	ctx := context.Background()
	const n = 100
	for i := range n {
		dueJob(t, a, fmt.Sprintf("<due-%03d@x>", i), clock.Now().Add(-time.Second))
	}
	lists := make([][]gmailrelay.Job, 4)
	var wg sync.WaitGroup
	for i := range lists {
		l := a
		if i%2 == 1 {
			l = b
		}
		wg.Go(func() {
			jobs, err := l.Due(ctx, clock.Now(), 30)
			if err != nil {
				t.Error(err)
			}
			lists[i] = jobs
		})
	}
	wg.Wait()
	owner := map[string]int{}
	for i, jobs := range lists {
		for _, j := range jobs {
			if prev, ok := owner[j.MessageID]; ok && prev%2 != i%2 {
				t.Errorf("%s listed by both replicas (calls %d and %d)", j.MessageID, prev, i)
			}
			owner[j.MessageID] = i
		}
	}
	// The rest go to whoever asks next; then nothing is left unclaimed.
	rest, err := b.Due(ctx, clock.Now(), 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range rest {
		if prev, ok := owner[j.MessageID]; ok && prev%2 == 0 {
			t.Errorf("%s: B got A's claimed job", j.MessageID)
		}
		owner[j.MessageID] = 1
	}
	if len(owner) != n {
		t.Fatalf("the replicas claimed %d distinct jobs, want %d", len(owner), n)
	}
	var mineA []string
	for id, i := range owner {
		if i%2 == 0 {
			mineA = append(mineA, id)
		}
	}
	if again, _ := a.Due(ctx, clock.Now(), 0); len(again) != len(mineA) {
		t.Errorf("A asked again: %d jobs, want its own %d claims", len(again), len(mineA))
	}
	if len(mineA) == 0 {
		t.Fatal("A claimed nothing: the split was not exercised")
	}
	// A write ends A's claim on one job: B may take it at once.
	if _, _, err := a.Mutate(ctx, mineA[0], func(cur *gmailrelay.Job) (gmailrelay.Change, error) {
		j := *cur
		j.Checks++
		return gmailrelay.Change{Job: &j}, nil
	}); err != nil {
		t.Fatal(err)
	}
	got, _ := b.Due(ctx, clock.Now(), 0)
	if len(got) != n-len(mineA)+1 {
		t.Errorf("B after A wrote one of its jobs: %d due, want %d (its own and the released one)", len(got), n-len(mineA)+1)
	}
	clock.Advance(3 * time.Minute)
	if got, _ := b.Due(ctx, clock.Now(), 0); len(got) != n {
		t.Errorf("B after A's claims ran out: %d due, want %d", len(got), n)
	}
}

// Two replicas' sweepers passing over 100 due jobs at once, 25 jobs a pass,
// until none is due: every job is searched exactly once (one search line
// each, and the emulator saw one list call per batch of 5: emulator
// results).
func TestTwoReplicasSweepersSearchEachDueJobOnce(t *testing.T) {
	s := newSite(t)
	ctx := context.Background()
	pol := policy.Default()
	pol.MsgIDDomain = "claim.example"
	pol.VerifyHandle = policy.VerifyNever
	newService := func(f *faultmodes.Set) *pgRelay {
		o := replicaOptions(relay.Config{Provider: s.gm, Policy: pol})
		o.Faults = f
		r := relayOf(s.env.Replica(o))
		r.faults = f
		return r
	}
	faults := faultmodes.New(faultmodes.Options{Now: s.clock.Now})
	if _, err := faults.Add(faultmodes.Spec{Mode: faultmodes.ForwardThenDropResponse}); err != nil {
		t.Fatal(err)
	}
	a, b := newService(faults), newService(nil)
	srv := httptest.NewServer(api.New(a.apiConfig()))
	defer srv.Close()
	const n = 100
	for i := range n {
		resp, err := http.Post(srv.URL+"/v1/send", "application/json",
			strings.NewReader(fmt.Sprintf(`{"key":"cus_1:claim:%d","to":"a@example.org","subject":"s","body":"b"}`, i)))
		if err == nil { // a dropped answer is an EOF: that is the fault
			resp.Body.Close()
		}
	}
	if jobs, _ := a.log.ByState(ctx, gmailrelay.StateUnknown, 0); len(jobs) != n {
		t.Fatalf("%d unknown jobs after dropped answers, want %d", len(jobs), n)
	}
	s.clock.Advance(pol.Channels[policy.DefaultChannel].Grace + time.Second)
	sweepers := []*sweeper.Sweeper{}
	for _, svc := range []*pgRelay{a, b} {
		cfg := svc.sweeperConfig()
		cfg.Limit, cfg.BatchSize = 25, 5
		sweepers = append(sweepers, sweeper.New(cfg))
	}
	for round := 0; ; round++ {
		if round > 20 {
			t.Fatal("jobs still due after 20 rounds")
		}
		var wg sync.WaitGroup
		for _, sw := range sweepers {
			wg.Go(func() {
				if _, err := sw.RunOnce(ctx); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if due, _ := a.log.ByState(ctx, gmailrelay.StateUnknown, 0); len(due) == 0 {
			break
		}
	}
	searches := map[string]int{}
	for after := uint64(0); ; {
		lines, next, err := a.log.Lines(ctx, after, 1000)
		if err != nil {
			t.Fatal(err)
		}
		for _, ln := range lines {
			if ln.Kind == gmailrelay.KindSearch {
				searches[ln.MessageID]++
			}
		}
		if next == 0 {
			break
		}
		after = next
	}
	twice := 0
	for _, c := range searches {
		if c != 1 {
			twice++
		}
	}
	if len(searches) != n || twice != 0 {
		t.Errorf("%d jobs searched, %d of them more than once; want %d searched once each", len(searches), twice, n)
	}
	// The search lines alone would not show a double search (the later
	// replica's outcome is stale and not logged): Gmail's list calls do.
	// Each pass searches its 25 jobs in batches of 5.
	lists := s.emu.Stats().Calls["list"]
	if lists != n/5 {
		t.Errorf("emulator results: %d list calls for %d due jobs in batches of 5, want %d (a job searched by both replicas)", lists, n, n/5)
	}
	t.Logf("emulator results: 2 replicas' sweepers, %d due jobs: %d searched, %d list calls", n, len(searches), lists)
}

// Two replicas' delivery loops split the outbox by mailbox: ClaimQueued
// claims a mailbox's whole queue for one pass, so another replica's pass
// skips it (counting its jobs busy) until the claim is released; a
// mailbox the caller does not serve is never claimed; nothing is renewed
// between passes.
func TestClaimQueuedSplitsTheOutboxBetweenReplicas(t *testing.T) {
	clock := testclock.New()
	a, b := twoReplicas(t, clock.Now)
	ctx := context.Background()
	const n = 10
	for i := range n {
		queuedJob(t, a, fmt.Sprintf("<support-%02d@x>", i), "support")
		queuedJob(t, a, fmt.Sprintf("<billing-%02d@x>", i), "billing")
	}
	logtest.Create(t, a, "<sent@x>", "default", gmailrelay.StateSent)
	all := serving("support", "billing")
	ca := claimQueued(t, a, all)
	if len(ca.Jobs) != 2*n || ca.Busy != 0 || ca.Unserved != 0 {
		t.Fatalf("A claims %d queued jobs (%d busy, %d unserved); want all %d (and not the sent one)", len(ca.Jobs), ca.Busy, ca.Unserved, 2*n)
	}
	if cb := claimQueued(t, b, all); len(cb.Jobs) != 0 || cb.Busy != 2*n || cb.Unserved != 0 {
		t.Errorf("B while A's pass holds both mailboxes: %d jobs, %d busy, %d unserved; want none, %d busy", len(cb.Jobs), cb.Busy, cb.Unserved, 2*n)
	}
	ca.Release()
	ca.Release() // again: nothing
	// B serves billing only: its pass claims billing, and A's pass
	// meanwhile gets support alone.
	cb := claimQueued(t, b, serving("billing"))
	if got := mailboxesOf(cb.Jobs); len(cb.Jobs) != n || got != "billing" || cb.Unserved != n || cb.Busy != 0 {
		t.Errorf("B serving billing: %d jobs of %q, %d unserved, %d busy; want %d of billing, %d unserved", len(cb.Jobs), got, cb.Unserved, cb.Busy, n, n)
	}
	ca = claimQueued(t, a, all)
	if got := mailboxesOf(ca.Jobs); len(ca.Jobs) != n || got != "support" || ca.Busy != n || ca.Unserved != 0 {
		t.Errorf("A while B holds billing: %d jobs of %q, %d busy, %d unserved; want %d of support, %d busy", len(ca.Jobs), got, ca.Busy, ca.Unserved, n, n)
	}
	// A pass's end releases: B serving support alone takes it at once.
	ca.Release()
	cb.Release()
	cb = claimQueued(t, b, serving("support"))
	if got := mailboxesOf(cb.Jobs); len(cb.Jobs) != n || got != "support" {
		t.Errorf("B serving support after A's pass: %d jobs of %q; want %d of support", len(cb.Jobs), got, n)
	}
	// A job written while claimed is read as written: the queue is read
	// after the claim.
	cb.Release()
	ca = claimQueued(t, a, all)
	ca.Release()
	if _, _, err := b.Mutate(ctx, "<billing-00@x>", func(cur *gmailrelay.Job) (gmailrelay.Change, error) {
		j := *cur
		j.State = gmailrelay.StateAbandoned
		return gmailrelay.Change{Job: &j, Lines: []gmailrelay.Line{{Kind: gmailrelay.KindResolved, State: gmailrelay.StateAbandoned, Reason: gmailrelay.ReasonCancelled}}}, nil
	}); err != nil {
		t.Fatal(err)
	}
	ca = claimQueued(t, a, all)
	defer ca.Release()
	if len(ca.Jobs) != 2*n-1 {
		t.Errorf("A after one job was abandoned: %d jobs, want %d", len(ca.Jobs), 2*n-1)
	}
}

// serving is a ClaimQueued mailbox func for a replica whose policy has
// names.
func serving(names ...string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		return name, slices.Contains(names, name)
	}
}

func claimQueued(t *testing.T, l *pglog.Log, mailbox func(string) (string, bool)) gmailrelay.QueueClaim {
	t.Helper()
	c, err := l.ClaimQueued(context.Background(), mailbox)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Release)
	return c
}

// mailboxesOf returns the jobs' mailboxes, sorted and joined by commas.
func mailboxesOf(jobs []gmailrelay.Job) string {
	seen := map[string]bool{}
	for _, j := range jobs {
		seen[j.Mailbox] = true
	}
	return strings.Join(slices.Sorted(maps.Keys(seen)), ",")
}

// queuedJob writes a new queued job of mailbox.
func queuedJob(t *testing.T, l gmailrelay.Store, id, mailbox string) {
	t.Helper()
	_, _, err := l.Mutate(context.Background(), id, func(cur *gmailrelay.Job) (gmailrelay.Change, error) {
		return gmailrelay.Change{
			Job:   &gmailrelay.Job{MessageID: id, Channel: "default", Mailbox: mailbox, State: gmailrelay.StateQueued},
			Lines: []gmailrelay.Line{{Kind: gmailrelay.KindReceived, State: gmailrelay.StateQueued, Channel: "default"}},
		}, nil
	})
	if err != nil {
		t.Fatalf("create %s: %v", id, err)
	}
}
