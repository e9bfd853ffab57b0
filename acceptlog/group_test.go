package acceptlog

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// openWaiting opens a log whose group commit waits an hour for company:
// a test that finishes at all proves the wait was skipped or cut short.
func openWaiting(t *testing.T) *Log {
	t.Helper()
	l, err := Open(filepath.Join(t.TempDir(), "accept.db"), Options{GroupWait: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// within fails the test when fn has not returned after d: the waits under
// test are an hour long, so d only bounds how long a broken build hangs.
func within(t *testing.T, d time.Duration, what string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s: still waiting after %s (the group commit waited for company it should not)", what, d)
	}
}

func receive(id string) func(*Job) (Change, error) {
	return func(cur *Job) (Change, error) {
		if cur != nil {
			return Change{}, nil
		}
		j := Job{MessageID: id, Channel: "default", State: StateForwarding, Attempts: 1}
		return Change{Job: &j, Lines: []Line{{Kind: KindReceived, Attempt: 1}, {Kind: KindForwarding, Attempt: 1, State: StateForwarding}}}, nil
	}
}

// A lone writer never waits for company: its groups hold one Mutate, so
// the next leader has no reason to expect more; nor does a writer alone
// again companyMemory groups after the last group with company.
func TestGroupWaitSkippedForALoneWriter(t *testing.T) {
	l := openWaiting(t)
	ctx := context.Background()
	within(t, time.Minute, "ten Mutates one after another", func() {
		for i := range 10 {
			if _, _, err := l.Mutate(ctx, fmt.Sprintf("<lone-%d@x>", i), receive(fmt.Sprintf("<lone-%d@x>", i))); err != nil {
				t.Error(err)
			}
		}
	})
	l.group.mu.Lock()
	l.group.company, l.group.since = 2, companyMemory+1
	l.group.mu.Unlock()
	within(t, time.Minute, "a Mutate long after the last company", func() {
		if _, _, err := l.Mutate(ctx, "<late@x>", receive("<late@x>")); err != nil {
			t.Error(err)
		}
	})
}

// After a group of two (three groups ago), the next leader waits for
// company, and stops waiting as soon as twice that number have queued:
// four concurrent Mutates commit together, in one group, long before the
// hour is up.
func TestGroupWaitEndsWhenTwiceTheLastGroupQueued(t *testing.T) {
	l := openWaiting(t)
	ctx := context.Background()
	l.group.mu.Lock()
	l.group.company, l.group.since = 2, 3
	l.group.mu.Unlock()
	before := l.Commits()
	within(t, time.Minute, "four concurrent Mutates after a group of two", func() {
		var wg sync.WaitGroup
		for i := range 4 {
			wg.Go(func() {
				id := fmt.Sprintf("<company-%d@x>", i)
				if _, _, err := l.Mutate(ctx, id, receive(id)); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
	})
	if got := l.Commits() - before; got != 1 {
		t.Errorf("commits for four Mutates that waited for each other = %d, want 1", got)
	}
	l.group.mu.Lock()
	defer l.group.mu.Unlock()
	if l.group.company != 4 || l.group.since != 0 || l.group.full != nil {
		t.Errorf("after the group: company %d since %d, full set %v; want 4, 0 and no wait pending", l.group.company, l.group.since, l.group.full != nil)
	}
}

// A negative GroupWait turns the wait off: after a group of two, a lone
// Mutate commits at once.
func TestGroupWaitOff(t *testing.T) {
	l, err := Open(filepath.Join(t.TempDir(), "accept.db"), Options{GroupWait: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if l.groupWait > 0 {
		t.Fatalf("GroupWait -1 gave a wait of %s, want none", l.groupWait)
	}
	l.group.mu.Lock()
	l.group.company = 2
	l.group.mu.Unlock()
	if _, _, err := l.Mutate(context.Background(), "<off@x>", receive("<off@x>")); err != nil {
		t.Fatal(err)
	}
}
