package pglog_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmailrelay/gmailrelay/acceptlog"
	"github.com/gmailrelay/gmailrelay/acceptlog/logtest"
	"github.com/gmailrelay/gmailrelay/api"
	"github.com/gmailrelay/gmailrelay/faultmodes"
	"github.com/gmailrelay/gmailrelay/internal/testclock"
	"github.com/gmailrelay/gmailrelay/policy"
	"github.com/gmailrelay/gmailrelay/relay"
	"github.com/gmailrelay/gmailrelay/sweeper"
)

// dueJob writes a job that is unknown and due at t (forwarding, then
// ambiguous), through the transition table like the relay does.
func dueJob(t *testing.T, l acceptlog.Store, id string, at time.Time) {
	t.Helper()
	ctx := context.Background()
	logtest.Forward(t, l, id, "me", time.Time{})
	_, _, err := l.Mutate(ctx, id, func(cur *acceptlog.Job) (acceptlog.Change, error) {
		j := *cur
		j.State, j.NextCheckAt, j.AmbiguousAt = acceptlog.StateUnknown, at, at
		return acceptlog.Change{Job: &j, Lines: []acceptlog.Line{{Kind: acceptlog.KindAmbiguous, Attempt: 1,
			State: acceptlog.StateUnknown, Reason: acceptlog.ReasonTimeout}}}, nil
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
	lists := make([][]acceptlog.Job, 4)
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
	if _, _, err := a.Mutate(ctx, mineA[0], func(cur *acceptlog.Job) (acceptlog.Change, error) {
		j := *cur
		j.Checks++
		return acceptlog.Change{Job: &j}, nil
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
	url := databaseURL(t)
	schema := freshSchema(t, url)
	ctx := context.Background()
	clock := testclock.New()
	emu, gm := emulatorGmail(t, clock)
	pol := policy.Default()
	pol.MsgIDDomain = "claim.example"
	pol.VerifyHandle = policy.VerifyNever
	newService := func(f *faultmodes.Set) *relay.Service {
		svc, err := relay.New(ctx, relay.Config{Log: open(t, url, schema, clock.Now), Provider: gm, Policy: pol, Faults: f, Quota: relay.NewQuota(1_000_000, clock.Now),
			Now: clock.Now, SendTimeout: 10 * time.Second, Logger: zerolog.Nop()})
		if err != nil {
			t.Fatal(err)
		}
		return svc
	}
	faults := faultmodes.New(faultmodes.Options{Now: clock.Now})
	if _, err := faults.Add(faultmodes.Spec{Mode: faultmodes.ForwardThenDropResponse}); err != nil {
		t.Fatal(err)
	}
	a, b := newService(faults), newService(nil)
	srv := httptest.NewServer(api.New(api.Config{Service: a, MsgIDDomain: pol.MsgIDDomain, Logger: zerolog.Nop()}))
	defer srv.Close()
	const n = 100
	for i := range n {
		resp, err := http.Post(srv.URL+"/v1/send", "application/json",
			strings.NewReader(fmt.Sprintf(`{"key":"cus_1:claim:%d","to":"a@example.org","subject":"s","body":"b"}`, i)))
		if err == nil { // a dropped answer is an EOF: that is the fault
			resp.Body.Close()
		}
	}
	if jobs, _ := a.Log().ByState(ctx, acceptlog.StateUnknown, 0); len(jobs) != n {
		t.Fatalf("%d unknown jobs after dropped answers, want %d", len(jobs), n)
	}
	clock.Advance(pol.Channels[policy.DefaultChannel].Grace + time.Second)
	sweepers := []*sweeper.Sweeper{}
	for _, svc := range []*relay.Service{a, b} {
		cfg := sweeper.ConfigFor(svc)
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
		if due, _ := a.Log().ByState(ctx, acceptlog.StateUnknown, 0); len(due) == 0 {
			break
		}
	}
	searches := map[string]int{}
	for after := uint64(0); ; {
		lines, next, err := a.Log().Lines(ctx, after, 1000)
		if err != nil {
			t.Fatal(err)
		}
		for _, ln := range lines {
			if ln.Kind == acceptlog.KindSearch {
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
	lists := emu.Stats().Calls["list"]
	if lists != n/5 {
		t.Errorf("emulator results: %d list calls for %d due jobs in batches of 5, want %d (a job searched by both replicas)", lists, n, n/5)
	}
	t.Logf("emulator results: 2 replicas' sweepers, %d due jobs: %d searched, %d list calls", n, len(searches), lists)
}

// Two replicas' delivery loops split the outbox: ClaimQueued hands each
// queued job to one live replica; a write of the job or its claimer's
// Close releases it to the other.
func TestClaimQueuedSplitsTheOutboxBetweenReplicas(t *testing.T) {
	clock := testclock.New()
	a, b := twoReplicas(t, clock.Now)
	ctx := context.Background()
	const n = 10
	for i := range n {
		logtest.Create(t, a, fmt.Sprintf("<queued-%02d@x>", i), "default", acceptlog.StateQueued)
	}
	logtest.Create(t, a, "<sent@x>", "default", acceptlog.StateSent)
	mine, err := a.ClaimQueued(ctx)
	if err != nil || len(mine) != n {
		t.Fatalf("A claims %d queued jobs, %v; want all %d (and not the sent one)", len(mine), err, n)
	}
	if got, err := b.ClaimQueued(ctx); err != nil || len(got) != 0 {
		t.Fatalf("B while A holds the claims: %d jobs, %v; want none", len(got), err)
	}
	if again, _ := a.ClaimQueued(ctx); len(again) != n {
		t.Errorf("A asked again: %d jobs, want its own %d", len(again), n)
	}
	if _, _, err := a.Mutate(ctx, mine[0].MessageID, func(cur *acceptlog.Job) (acceptlog.Change, error) {
		j := *cur
		j.UpdatedAt = clock.Now()
		return acceptlog.Change{Job: &j}, nil
	}); err != nil {
		t.Fatal(err)
	}
	if got, _ := b.ClaimQueued(ctx); len(got) != 1 || got[0].MessageID != mine[0].MessageID {
		t.Errorf("B after A wrote %s: %v, want that one job", mine[0].MessageID, ids(got))
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if got, _ := b.ClaimQueued(ctx); len(got) != n {
		t.Errorf("B after A closed: %d jobs, want all %d", len(got), n)
	}
}

func ids(jobs []acceptlog.Job) []string {
	out := make([]string, len(jobs))
	for i, j := range jobs {
		out[i] = j.MessageID
	}
	return out
}
