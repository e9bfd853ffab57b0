package logtest

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/gmailrelay/gmailrelay"
)

// CaseTwinRefused: a new job whose Message-ID differs from an existing
// job's only in ASCII case is refused with a *CaseTwinError naming the
// existing job, and nothing is written (no job, no line, no counter);
// the existing job still changes, a Message-ID differing in more than
// case is a job of its own, and after a reopen the twin is still refused.
func testCaseTwinRefused(t *testing.T, be Backend) {
	ctx := context.Background()
	l, reopen := be.openReopen(t)
	const first, twin, other = "<Job-AbC@Inbound.Example>", "<job-abc@inbound.example>", "<job-abd@inbound.example>"
	Create(t, l, first, "default", gmailrelay.StateQueued)
	before, err := l.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantTwin := func(l gmailrelay.Store, id string) {
		t.Helper()
		called := false
		_, _, err := l.Mutate(ctx, id, func(cur *gmailrelay.Job) (gmailrelay.Change, error) {
			called = true
			return gmailrelay.Change{
				Job:   &gmailrelay.Job{MessageID: id, Channel: "default", State: gmailrelay.StateQueued, CreatedAt: t0},
				Lines: []gmailrelay.Line{{Kind: gmailrelay.KindReceived, State: gmailrelay.StateQueued, Channel: "default"}},
				Raw:   []byte("raw"),
			}, nil
		})
		var ce *gmailrelay.CaseTwinError
		if !errors.As(err, &ce) || !errors.Is(err, gmailrelay.ErrCaseTwin) || ce.Existing != first || ce.MessageID != id {
			t.Fatalf("create %s: %v (called %t); want a CaseTwinError naming %s", id, err, called, first)
		}
		if _, err := l.Get(ctx, id); !errors.Is(err, gmailrelay.ErrNotFound) {
			t.Errorf("Get(%s) after the refusal: %v, want ErrNotFound", id, err)
		}
		if _, err := l.Raw(ctx, id); !errors.Is(err, gmailrelay.ErrNotFound) {
			t.Errorf("Raw(%s) after the refusal: %v, want ErrNotFound", id, err)
		}
		after, err := l.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if after.Jobs != before.Jobs || after.Lines != before.Lines {
			t.Errorf("stats after the refusal: %d jobs %d lines, want %d %d", after.Jobs, after.Lines, before.Jobs, before.Lines)
		}
	}
	wantTwin(l, twin)
	wantTwin(l, "<JOB-ABC@INBOUND.EXAMPLE>")
	// A read-only Mutate of the twin (no job created) is no refusal.
	if _, _, err := l.Mutate(ctx, twin, func(cur *gmailrelay.Job) (gmailrelay.Change, error) {
		return gmailrelay.Change{}, nil
	}); err != nil {
		t.Errorf("a Mutate of %s that creates nothing: %v", twin, err)
	}
	transition(t, l, first, gmailrelay.StateForwarding, nil)
	Create(t, l, other, "default", gmailrelay.StateQueued)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = reopen()
	before, err = l.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantTwin(l, twin)
	if _, _, err := l.Mutate(ctx, "<JOB-ABD@inbound.example>", func(*gmailrelay.Job) (gmailrelay.Change, error) {
		return gmailrelay.Change{Job: &gmailrelay.Job{MessageID: "<JOB-ABD@inbound.example>", Channel: "default", State: gmailrelay.StateQueued},
			Lines: []gmailrelay.Line{{Kind: gmailrelay.KindReceived, State: gmailrelay.StateQueued}}}, nil
	}); !errors.Is(err, gmailrelay.ErrCaseTwin) {
		t.Errorf("a twin of %s: %v, want ErrCaseTwin", other, err)
	}
}

// CaseTwinsAtOnce: two writers creating case twins at the same moment
// end with one job; the other is refused naming it.
func testCaseTwinsAtOnce(t *testing.T, be Backend) {
	ctx := context.Background()
	l := be.open(t)
	for round := range 10 {
		ids := [2]string{"<twin-" + string(rune('a'+round)) + "@x>", "<TWIN-" + string(rune('A'+round)) + "@x>"}
		var created, refused atomic.Int32
		AtOnce(2, func(i int, _ string) {
			id := ids[i]
			_, _, err := l.Mutate(ctx, id, func(cur *gmailrelay.Job) (gmailrelay.Change, error) {
				return gmailrelay.Change{
					Job:   &gmailrelay.Job{MessageID: id, Channel: "default", State: gmailrelay.StateQueued, CreatedAt: t0},
					Lines: []gmailrelay.Line{{Kind: gmailrelay.KindReceived, State: gmailrelay.StateQueued, Channel: "default"}},
				}, nil
			})
			var ce *gmailrelay.CaseTwinError
			switch {
			case err == nil:
				created.Add(1)
			case errors.As(err, &ce) && ce.Existing == ids[1-i]:
				refused.Add(1)
			default:
				t.Errorf("create %s: %v", id, err)
			}
		})
		if created.Load() != 1 || refused.Load() != 1 {
			t.Fatalf("round %d: %d created, %d refused; want 1 and 1", round, created.Load(), refused.Load())
		}
	}
}
