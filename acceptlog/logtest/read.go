package logtest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay"
)

func testDue(t *testing.T, be Backend) {
	ctx := context.Background()
	l := be.open(t)
	at := map[string]time.Duration{"<a@x>": 3 * time.Minute, "<b@x>": time.Minute, "<c@x>": 2 * time.Minute, "<d@x>": time.Hour}
	for id, d := range at {
		Create(t, l, id, "default", gmailrelay.StateForwarding)
		transition(t, l, id, gmailrelay.StateUnknown, func(j *gmailrelay.Job) { j.NextCheckAt = t0.Add(d); j.AmbiguousAt = t0 })
	}
	Create(t, l, "<e@x>", "default", gmailrelay.StateUnknown) // nothing scheduled

	due := func(now time.Time, limit int) []string {
		t.Helper()
		jobs, err := l.Due(ctx, now, limit)
		if err != nil {
			t.Fatal(err)
		}
		return ids(jobs)
	}
	tests := []struct {
		name  string
		now   time.Time
		limit int
		want  []string
	}{
		{"none due yet", t0, 0, []string{}},
		{"boundary is inclusive", t0.Add(2 * time.Minute), 0, []string{"<b@x>", "<c@x>"}},
		{"earliest first", t0.Add(10 * time.Minute), 0, []string{"<b@x>", "<c@x>", "<a@x>"}},
		{"limit", t0.Add(10 * time.Minute), 2, []string{"<b@x>", "<c@x>"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := due(tc.now, tc.limit); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Due = %v, want %v", got, tc.want)
			}
		})
	}

	// Clearing NextCheckAt removes the job; moving it reorders.
	transition(t, l, "<b@x>", gmailrelay.StateSent, func(j *gmailrelay.Job) { j.NextCheckAt = time.Time{} })
	transition(t, l, "<a@x>", gmailrelay.StateUnknown, func(j *gmailrelay.Job) { j.NextCheckAt = t0.Add(30 * time.Second) })
	if got, want := due(t0.Add(10*time.Minute), 0), []string{"<a@x>", "<c@x>"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Due after clear and move = %v, want %v", got, want)
	}
}

func testByStateAndListPaging(t *testing.T, be Backend) {
	ctx := context.Background()
	l := be.open(t)
	for i, s := range []gmailrelay.State{
		gmailrelay.StateUnknown, gmailrelay.StateSent, gmailrelay.StateUnknown, gmailrelay.StateReview,
		gmailrelay.StateUnknown, gmailrelay.StateSent, gmailrelay.StateUnknown,
	} {
		ch := "default"
		if i%2 == 1 {
			ch = "billing"
		}
		Create(t, l, fmt.Sprintf("<%d@x>", i), ch, s)
	}

	byState, err := l.ByState(ctx, gmailrelay.StateUnknown, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ids(byState), []string{"<0@x>", "<2@x>", "<4@x>", "<6@x>"}; !reflect.DeepEqual(got, want) {
		t.Errorf("ByState(unknown) = %v, want %v", got, want)
	}
	byState, err = l.ByState(ctx, gmailrelay.StateUnknown, 3)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(byState), 3; got != want {
		t.Errorf("ByState(unknown, 3) returned %d jobs, want %d", got, want)
	}
	if _, err := l.ByState(ctx, "bogus", 0); err == nil {
		t.Error("ByState(bogus) succeeded, want an error")
	}

	tests := []struct {
		name string
		opts gmailrelay.ListOptions
		want [][]string // pages
	}{
		{"all in pages of 3", gmailrelay.ListOptions{Limit: 3}, [][]string{
			{"<0@x>", "<1@x>", "<2@x>"}, {"<3@x>", "<4@x>", "<5@x>"}, {"<6@x>"}}},
		{"exact multiple ends with empty next", gmailrelay.ListOptions{State: gmailrelay.StateSent, Limit: 2}, [][]string{
			{"<1@x>", "<5@x>"}}},
		{"state in pages of 3", gmailrelay.ListOptions{State: gmailrelay.StateUnknown, Limit: 3}, [][]string{
			{"<0@x>", "<2@x>", "<4@x>"}, {"<6@x>"}}},
		{"channel", gmailrelay.ListOptions{Channel: "billing", Limit: 2}, [][]string{
			{"<1@x>", "<3@x>"}, {"<5@x>"}}},
		{"state and channel", gmailrelay.ListOptions{State: gmailrelay.StateUnknown, Channel: "default", Limit: 1}, [][]string{
			{"<0@x>"}, {"<2@x>"}, {"<4@x>"}, {"<6@x>"}}},
		{"after", gmailrelay.ListOptions{After: "<4@x>"}, [][]string{{"<5@x>", "<6@x>"}}},
		{"no match", gmailrelay.ListOptions{State: gmailrelay.StateAbandoned}, [][]string{{}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			opts := tc.opts
			var got [][]string
			for range 10 {
				jobs, next, err := l.List(ctx, opts)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, ids(jobs))
				if next == "" {
					break
				}
				if want := jobs[len(jobs)-1].MessageID; next != want {
					t.Errorf("next = %q, want the last id %q", next, want)
				}
				opts.After = next
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("pages = %v, want %v", got, tc.want)
			}
		})
	}
	if _, _, err := l.List(ctx, gmailrelay.ListOptions{State: "bogus"}); err == nil {
		t.Error("List(state bogus) succeeded, want an error")
	}
}

func testListLimitDefaultAndMax(t *testing.T, be Backend) {
	ctx := context.Background()
	l := be.open(t)
	const n = 1005
	// One Mutate per job would be slow (an fsync each); group them with
	// concurrency so the test stays fast.
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for i := range n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			id := fmt.Sprintf("<%04d@x>", i)
			_, _, err := l.Mutate(ctx, id, func(*gmailrelay.Job) (gmailrelay.Change, error) {
				return gmailrelay.Change{
					Job:   &gmailrelay.Job{MessageID: id, State: gmailrelay.StateSent},
					Lines: []gmailrelay.Line{{Kind: gmailrelay.KindReceived, State: gmailrelay.StateSent}},
				}, nil
			})
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	for _, tc := range []struct {
		limit, want int
	}{{0, 100}, {-1, 100}, {5000, 1000}, {7, 7}} {
		jobs, next, err := l.List(ctx, gmailrelay.ListOptions{Limit: tc.limit})
		if err != nil {
			t.Fatal(err)
		}
		if len(jobs) != tc.want || next == "" {
			t.Errorf("List(limit %d) = %d jobs, next %q; want %d and a next", tc.limit, len(jobs), next, tc.want)
		}
		lines, lnext, err := l.Lines(ctx, 0, tc.limit)
		if err != nil {
			t.Fatal(err)
		}
		if len(lines) != tc.want || lnext != lines[len(lines)-1].Seq {
			t.Errorf("Lines(limit %d) = %d lines, next %d; want %d and the last seq", tc.limit, len(lines), lnext, tc.want)
		}
	}
}

func testLinesPaging(t *testing.T, be Backend) {
	ctx := context.Background()
	l := be.open(t)
	Create(t, l, "<a@x>", "default", gmailrelay.StateForwarding)
	for range 4 {
		_, _, err := l.Mutate(ctx, "<a@x>", func(*gmailrelay.Job) (gmailrelay.Change, error) {
			return gmailrelay.Change{Lines: []gmailrelay.Line{{Kind: gmailrelay.KindSearch}}}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	var pages [][]uint64
	after := uint64(0)
	for range 10 {
		lines, next, err := l.Lines(ctx, after, 2)
		if err != nil {
			t.Fatal(err)
		}
		var seqs []uint64
		for _, ln := range lines {
			seqs = append(seqs, ln.Seq)
		}
		pages = append(pages, seqs)
		if next == 0 {
			break
		}
		after = next
	}
	if want := [][]uint64{{1, 2}, {3, 4}, {5}}; !reflect.DeepEqual(pages, want) {
		t.Errorf("pages = %v, want %v", pages, want)
	}
	lines, next, err := l.Lines(ctx, 5, 2)
	if err != nil || len(lines) != 0 || next != 0 {
		t.Errorf("Lines after the last = %v, %d, %v; want none, 0, nil", lines, next, err)
	}
}

func testStats(t *testing.T, be Backend) {
	ctx := context.Background()
	l := be.open(t)
	empty, err := l.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if empty.Jobs != 0 || empty.Lines != 0 || empty.ByState == nil || !empty.OldestUnknown.IsZero() {
		t.Errorf("empty stats = %+v, want zeros and non-nil maps", empty)
	}

	Create(t, l, "<a@x>", "default", gmailrelay.StateForwarding)
	Create(t, l, "<b@x>", "billing", gmailrelay.StateForwarding)
	Create(t, l, "<c@x>", "billing", gmailrelay.StateForwarding)
	transition(t, l, "<a@x>", gmailrelay.StateUnknown, func(j *gmailrelay.Job) { j.AmbiguousAt = t0.Add(2 * time.Minute) })
	transition(t, l, "<b@x>", gmailrelay.StateUnknown, func(j *gmailrelay.Job) { j.AmbiguousAt = t0.Add(time.Minute) })
	transition(t, l, "<c@x>", gmailrelay.StateSent, nil)

	got, err := l.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := gmailrelay.Stats{
		Jobs:      3,
		Lines:     6,
		ByState:   map[gmailrelay.State]int{gmailrelay.StateUnknown: 2, gmailrelay.StateSent: 1},
		ByChannel: map[string]map[gmailrelay.State]int{"default": {gmailrelay.StateUnknown: 1}, "billing": {gmailrelay.StateUnknown: 1, gmailrelay.StateSent: 1}},
		ByKind:    map[gmailrelay.Kind]int{gmailrelay.KindReceived: 3, gmailrelay.KindState: 3},
		ByReason:  map[gmailrelay.Kind]map[string]int{gmailrelay.KindState: {"test": 3}},
		// b became unknown later but was ambiguous earlier.
		OldestUnknown: t0.Add(time.Minute),
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("stats\n got %+v\nwant %+v", got, want)
	}

	transition(t, l, "<b@x>", gmailrelay.StateSent, nil)
	got, err = l.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := got.OldestUnknown, t0.Add(2*time.Minute); !got.Equal(want) {
		t.Errorf("oldest unknown after b sent = %v, want %v", got, want)
	}
	if got, want := got.ByChannel["billing"], map[gmailrelay.State]int{gmailrelay.StateSent: 2}; !reflect.DeepEqual(got, want) {
		t.Errorf("billing counts = %v, want %v (no zero entries)", got, want)
	}
}

func testRaw(t *testing.T, be Backend) {
	ctx := context.Background()
	l := be.open(t)
	Create(t, l, "<a@x>", "default", gmailrelay.StateForwarding)
	if _, err := l.Raw(ctx, "<a@x>"); !errors.Is(err, gmailrelay.ErrNotFound) {
		t.Errorf("Raw before any store error = %v, want ErrNotFound", err)
	}
	for _, raw := range []string{"first", "second"} {
		_, _, err := l.Mutate(ctx, "<a@x>", func(*gmailrelay.Job) (gmailrelay.Change, error) {
			return gmailrelay.Change{Raw: []byte(raw)}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		got, err := l.Raw(ctx, "<a@x>")
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != raw {
			t.Errorf("Raw = %q, want %q", got, raw)
		}
	}
}

func testMailbox(t *testing.T, be Backend) {
	ctx := context.Background()
	l := be.open(t)
	got, err := l.Mailbox(ctx, "me@x")
	if err != nil {
		t.Fatal(err)
	}
	if want := (gmailrelay.Mailbox{Name: "me@x"}); got != want {
		t.Errorf("unknown mailbox = %+v, want %+v", got, want)
	}
	// A mailbox may be written without any job.
	want := gmailrelay.Mailbox{Name: "me@x", HandleChecked: true, HandleUntrusted: true, Rewrites: 2}
	_, _, err = l.Mutate(ctx, "<a@x>", func(*gmailrelay.Job) (gmailrelay.Change, error) {
		return gmailrelay.Change{Mailbox: &want}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, err = l.Mailbox(ctx, "me@x"); err != nil || got != want {
		t.Errorf("Mailbox = %+v, %v; want %+v", got, err, want)
	}
	if other, _ := l.Mailbox(ctx, "you@x"); other != (gmailrelay.Mailbox{Name: "you@x"}) {
		t.Errorf("other mailbox = %+v, want zero", other)
	}
}

func testGetAndJobLinesNotFound(t *testing.T, be Backend) {
	ctx := context.Background()
	l := be.open(t)
	if _, err := l.Get(ctx, "<none@x>"); !errors.Is(err, gmailrelay.ErrNotFound) {
		t.Errorf("Get error = %v, want ErrNotFound", err)
	}
	if _, err := l.JobLines(ctx, "<none@x>"); !errors.Is(err, gmailrelay.ErrNotFound) {
		t.Errorf("JobLines error = %v, want ErrNotFound", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := l.Get(cctx, "<none@x>"); !errors.Is(err, context.Canceled) {
		t.Errorf("Get on cancelled ctx error = %v, want context.Canceled", err)
	}
}
