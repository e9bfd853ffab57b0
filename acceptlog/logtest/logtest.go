// Package logtest is the conformance suite of the acceptance log's
// contract (acceptlog.Store): folds, refusals, the table of transitions,
// indexes, paging, due, by-state, mailbox records, prune, reopening. Every
// backend runs it from its own tests: acceptlog against the bbolt file,
// pglog against PostgreSQL.
package logtest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay/acceptlog"
)

// Backend is one implementation of the log under test.
type Backend struct {
	// Open opens a fresh, empty log whose lines with a zero Time are
	// stamped by now, and registers the cleanups that Check it (failing
	// the test on any violation) and close it. reopen opens the same log
	// again, after the test closed the first (with the same cleanups).
	Open func(t *testing.T, now func() time.Time) (log acceptlog.Store, reopen func() acceptlog.Store)
	// GroupCommit: concurrent Mutates share commits (the bbolt log), so
	// the suite checks there are fewer commits than Mutates.
	GroupCommit bool
}

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func (b Backend) open(t *testing.T) acceptlog.Store {
	t.Helper()
	l, _ := b.Open(t, func() time.Time { return t0 })
	return l
}

func (b Backend) openReopen(t *testing.T) (acceptlog.Store, func() acceptlog.Store) {
	t.Helper()
	return b.Open(t, func() time.Time { return t0 })
}

// Run runs every test of the suite against b, each as a subtest with a
// fresh log.
func Run(t *testing.T, b Backend) {
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, Backend)
	}{
		{"MutateCreateUpdateAndLineOrder", testMutateCreateUpdateAndLineOrder},
		{"MutateCallbackErrorWritesNothing", testMutateCallbackErrorWritesNothing},
		{"MutateRejectsInvalidChanges", testMutateRejectsInvalidChanges},
		{"MutateConcurrentSameIDSerialises", testMutateConcurrentSameIDSerialises},
		{"MutateConcurrentDifferentIDsAllLand", testMutateConcurrentDifferentIDsAllLand},
		{"ReopenKeepsEverything", testReopenKeepsEverything},
		{"Due", testDue},
		{"ByStateAndListPaging", testByStateAndListPaging},
		{"ListLimitDefaultAndMax", testListLimitDefaultAndMax},
		{"LinesPaging", testLinesPaging},
		{"Stats", testStats},
		{"Raw", testRaw},
		{"Mailbox", testMailbox},
		{"GetAndJobLinesNotFound", testGetAndJobLinesNotFound},
		{"PruneKeepsTheRecordAndDropsDetail", testPruneKeepsTheRecordAndDropsDetail},
		{"PruneLimitAndOrder", testPruneLimitAndOrder},
		{"PrunableStates", testPrunableStates},
		{"CheckAcceptsPrunedJobsWithGaps", testCheckAcceptsPrunedJobsWithGaps},
		{"MutateRefusesEveryTransitionOutsideTheTable", testMutateRefusesEveryTransitionOutsideTheTable},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, b) })
	}
}

func create(t *testing.T, l acceptlog.Store, id, channel string, s acceptlog.State) acceptlog.Job {
	t.Helper()
	j, _, err := l.Mutate(context.Background(), id, func(cur *acceptlog.Job) (acceptlog.Change, error) {
		if cur != nil {
			return acceptlog.Change{}, fmt.Errorf("job %s exists", id)
		}
		return acceptlog.Change{
			Job:   &acceptlog.Job{MessageID: id, Channel: channel, State: s, CreatedAt: t0},
			Lines: []acceptlog.Line{{Kind: acceptlog.KindReceived, State: s, Channel: channel}},
		}, nil
	})
	if err != nil {
		t.Fatalf("create %s: %v", id, err)
	}
	return j
}

func transition(t *testing.T, l acceptlog.Store, id string, s acceptlog.State, edit func(*acceptlog.Job)) acceptlog.Job {
	t.Helper()
	j, _, err := l.Mutate(context.Background(), id, func(cur *acceptlog.Job) (acceptlog.Change, error) {
		if cur == nil {
			return acceptlog.Change{}, acceptlog.ErrNotFound
		}
		cur.State = s
		if edit != nil {
			edit(cur)
		}
		return acceptlog.Change{Job: cur, Lines: []acceptlog.Line{{Kind: acceptlog.KindState, State: s, Reason: "test"}}}, nil
	})
	if err != nil {
		t.Fatalf("transition %s to %s: %v", id, s, err)
	}
	return j
}

func ids(jobs []acceptlog.Job) []string {
	out := []string{}
	for _, j := range jobs {
		out = append(out, j.MessageID)
	}
	return out
}

func testMutateCreateUpdateAndLineOrder(t *testing.T, be Backend) {
	ctx := context.Background()
	l := be.open(t)
	const a, b = "<a@x>", "<b@x>"
	later := t0.Add(time.Minute)

	job, lines, err := l.Mutate(ctx, a, func(cur *acceptlog.Job) (acceptlog.Change, error) {
		if cur != nil {
			t.Errorf("cur = %+v, want nil for a new job", cur)
		}
		return acceptlog.Change{
			Job: &acceptlog.Job{MessageID: a, Channel: "default", State: acceptlog.StateForwarding, Attempts: 1},
			Lines: []acceptlog.Line{
				{Kind: acceptlog.KindReceived, Seq: 99},
				{Kind: acceptlog.KindForwarding, Attempt: 1, State: acceptlog.StateForwarding, Time: later},
			},
		}, nil
	})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if got, want := job.State, acceptlog.StateForwarding; got != want {
		t.Errorf("created state = %q, want %q", got, want)
	}
	want := []acceptlog.Line{
		{Seq: 1, Time: t0, MessageID: a, Kind: acceptlog.KindReceived},
		{Seq: 2, Time: later, MessageID: a, Kind: acceptlog.KindForwarding, Attempt: 1, State: acceptlog.StateForwarding},
	}
	if !reflect.DeepEqual(lines, want) {
		t.Errorf("written lines = %+v, want %+v", lines, want)
	}

	create(t, l, b, "billing", acceptlog.StateFailed) // seq 3

	job, lines, err = l.Mutate(ctx, a, func(cur *acceptlog.Job) (acceptlog.Change, error) {
		if cur == nil || cur.State != acceptlog.StateForwarding {
			return acceptlog.Change{}, fmt.Errorf("cur = %+v, want the forwarding job", cur)
		}
		cur.State = acceptlog.StateSent
		cur.GmailID = "g1"
		cur.Effects++
		return acceptlog.Change{Job: cur, Lines: []acceptlog.Line{
			{Kind: acceptlog.KindEffect, Attempt: 1, Source: acceptlog.SourceResponse, GmailID: "g1", State: acceptlog.StateSent},
		}}, nil
	})
	if err != nil {
		t.Fatalf("update: %v", err)
	}
	if got, want := job.GmailID, "g1"; got != want {
		t.Errorf("updated gmail id = %q, want %q", got, want)
	}
	if got, want := lines[0].Seq, uint64(4); got != want {
		t.Errorf("effect seq = %d, want %d", got, want)
	}

	stored, err := l.Get(ctx, a)
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	if !reflect.DeepEqual(stored, job) {
		t.Errorf("Get = %+v, want what Mutate returned %+v", stored, job)
	}
	jl, err := l.JobLines(ctx, a)
	if err != nil {
		t.Fatalf("job lines: %v", err)
	}
	var seqs []uint64
	for _, ln := range jl {
		seqs = append(seqs, ln.Seq)
	}
	if got, want := seqs, []uint64{1, 2, 4}; !reflect.DeepEqual(got, want) {
		t.Errorf("job lines seqs = %v, want %v", got, want)
	}
	all, next, err := l.Lines(ctx, 0, 0)
	if err != nil {
		t.Fatalf("lines: %v", err)
	}
	var owners []string
	for _, ln := range all {
		owners = append(owners, ln.MessageID)
	}
	if got, want := owners, []string{a, a, b, a}; !reflect.DeepEqual(got, want) || next != 0 {
		t.Errorf("global lines = %v next %d, want %v next 0", got, next, want)
	}

	// A nil Change.Job leaves the job and may still append stateless lines.
	job, lines, err = l.Mutate(ctx, a, func(cur *acceptlog.Job) (acceptlog.Change, error) {
		return acceptlog.Change{Lines: []acceptlog.Line{{Kind: acceptlog.KindSearch, Hits: 1, SentHits: 1}}}, nil
	})
	if err != nil {
		t.Fatalf("append search line: %v", err)
	}
	if job.State != acceptlog.StateSent || len(lines) != 1 || lines[0].Seq != 5 {
		t.Errorf("nil-job change returned %+v, %+v; want the sent job and line 5", job, lines)
	}
	// A no-op on a missing job returns the zero Job and no error.
	job, lines, err = l.Mutate(ctx, "<none@x>", func(cur *acceptlog.Job) (acceptlog.Change, error) {
		return acceptlog.Change{}, nil
	})
	if err != nil || !reflect.DeepEqual(job, acceptlog.Job{}) || lines != nil {
		t.Errorf("no-op on missing job = %+v, %v, %v; want zero job, no lines, nil", job, lines, err)
	}
}

func testMutateCallbackErrorWritesNothing(t *testing.T, be Backend) {
	ctx := context.Background()
	l := be.open(t)
	create(t, l, "<a@x>", "default", acceptlog.StateFailed)
	before, err := l.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	errBusy := errors.New("busy")
	for _, id := range []string{"<a@x>", "<new@x>"} {
		_, _, err := l.Mutate(ctx, id, func(cur *acceptlog.Job) (acceptlog.Change, error) {
			// Build a full change and still refuse: none of it may land.
			return acceptlog.Change{
				Job:     &acceptlog.Job{MessageID: id, State: acceptlog.StateSent},
				Lines:   []acceptlog.Line{{Kind: acceptlog.KindEffect, State: acceptlog.StateSent}},
				Raw:     []byte("x"),
				Mailbox: &acceptlog.Mailbox{Name: "m", Rewrites: 1},
			}, errBusy
		})
		if got, want := err, errBusy; got != want {
			t.Errorf("Mutate(%s) error = %v, want the callback's error unchanged", id, got)
		}
	}
	after, err := l.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(after, before) {
		t.Errorf("stats changed by refused mutates: %+v -> %+v", before, after)
	}
	if _, err := l.Get(ctx, "<new@x>"); !errors.Is(err, acceptlog.ErrNotFound) {
		t.Errorf("Get(new) error = %v, want ErrNotFound", err)
	}
	if j, _ := l.Get(ctx, "<a@x>"); j.State != acceptlog.StateFailed {
		t.Errorf("existing job state = %q, want it unchanged (failed)", j.State)
	}
	if _, err := l.Raw(ctx, "<a@x>"); !errors.Is(err, acceptlog.ErrNotFound) {
		t.Errorf("Raw error = %v, want ErrNotFound", err)
	}
	if mb, _ := l.Mailbox(ctx, "m"); mb.Rewrites != 0 {
		t.Errorf("mailbox = %+v, want it unwritten", mb)
	}
}

func testMutateRejectsInvalidChanges(t *testing.T, be Backend) {
	const id = "<a@x>"
	job := func(s acceptlog.State, attempts int) *acceptlog.Job {
		return &acceptlog.Job{MessageID: id, State: s, Attempts: attempts}
	}
	line := func(k acceptlog.Kind, s acceptlog.State, attempt int) acceptlog.Line {
		return acceptlog.Line{Kind: k, State: s, Attempt: attempt}
	}
	tests := []struct {
		name   string
		id     string
		exists bool // the job exists (failed, 1 attempt) before the change
		change acceptlog.Change
	}{
		{"last line state differs from job", id, true, acceptlog.Change{Job: job(acceptlog.StateSent, 1),
			Lines: []acceptlog.Line{line(acceptlog.KindEffect, acceptlog.StateSent, 1), line(acceptlog.KindState, acceptlog.StateUnknown, 1)}}},
		{"state change without a line", id, true, acceptlog.Change{Job: job(acceptlog.StateSent, 1)}},
		{"new job without a state line", id, false, acceptlog.Change{Job: job(acceptlog.StateForwarding, 0),
			Lines: []acceptlog.Line{line(acceptlog.KindReceived, "", 0)}}},
		{"state line without job", id, true, acceptlog.Change{Lines: []acceptlog.Line{line(acceptlog.KindState, acceptlog.StateFailed, 0)}}},
		{"lines for a missing job", id, false, acceptlog.Change{Lines: []acceptlog.Line{line(acceptlog.KindSearch, "", 0)}}},
		{"raw for a missing job", id, false, acceptlog.Change{Raw: []byte("x")}},
		{"job for another id", id, true, acceptlog.Change{Job: &acceptlog.Job{MessageID: "<b@x>", State: acceptlog.StateFailed, Attempts: 1}}},
		{"invalid job state", id, false, acceptlog.Change{Job: job("bogus", 0),
			Lines: []acceptlog.Line{line(acceptlog.KindReceived, "bogus", 0)}}},
		{"unknown line kind", id, true, acceptlog.Change{Lines: []acceptlog.Line{line("gossip", "", 0)}}},
		{"line for another id", id, true, acceptlog.Change{Lines: []acceptlog.Line{{Kind: acceptlog.KindSearch, MessageID: "<b@x>"}}}},
		{"line attempt beyond job attempts", id, true, acceptlog.Change{Lines: []acceptlog.Line{line(acceptlog.KindSearch, "", 2)}}},
		{"attempts decrease", id, true, acceptlog.Change{Job: job(acceptlog.StateFailed, 0)}},
		{"mailbox without name", id, true, acceptlog.Change{Mailbox: &acceptlog.Mailbox{}}},
		{"empty message id", "", false, acceptlog.Change{}},
		{"NUL in message id", "<a\x00@x>", false, acceptlog.Change{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			l := be.open(t)
			if tc.exists {
				transition(t, l, create(t, l, id, "default", acceptlog.StateForwarding).MessageID, acceptlog.StateFailed,
					func(j *acceptlog.Job) { j.Attempts = 1 })
			}
			before, err := l.Stats(ctx)
			if err != nil {
				t.Fatal(err)
			}
			_, _, err = l.Mutate(ctx, tc.id, func(*acceptlog.Job) (acceptlog.Change, error) { return tc.change, nil })
			if !errors.Is(err, acceptlog.ErrInvalidChange) {
				t.Fatalf("Mutate error = %v, want ErrInvalidChange", err)
			}
			after, err := l.Stats(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(after, before) {
				t.Errorf("rejected change wrote something: stats %+v -> %+v", before, after)
			}
		})
	}
}

func testMutateConcurrentSameIDSerialises(t *testing.T, be Backend) {
	ctx := context.Background()
	l := be.open(t)
	const id, n = "<a@x>", 50
	create(t, l, id, "default", acceptlog.StateForwarding)
	commitsBefore := l.Commits()

	start := make(chan struct{})
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			<-start
			_, _, err := l.Mutate(ctx, id, func(cur *acceptlog.Job) (acceptlog.Change, error) {
				cur.Attempts++
				return acceptlog.Change{Job: cur, Lines: []acceptlog.Line{{
					Kind: acceptlog.KindForwarding, Attempt: cur.Attempts, State: acceptlog.StateForwarding,
				}}}, nil
			})
			errs <- err
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent Mutate: %v", err)
		}
	}
	j, err := l.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := j.Attempts, n; got != want {
		t.Errorf("attempts after %d concurrent increments = %d, want %d", n, got, want)
	}
	lines, err := l.JobLines(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	for i, ln := range lines[1:] {
		if got, want := ln.Attempt, i+1; got != want {
			t.Errorf("line %d attempt = %d, want %d (lines in commit order)", ln.Seq, got, want)
		}
	}
	if got := l.Commits() - commitsBefore; be.GroupCommit && got >= n {
		t.Errorf("%d concurrent Mutates took %d commits, want fewer (group commit)", n, got)
	}
}

func testMutateConcurrentDifferentIDsAllLand(t *testing.T, be Backend) {
	ctx := context.Background()
	l := be.open(t)
	const n = 50
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			id := fmt.Sprintf("<%02d@x>", i)
			_, _, err := l.Mutate(ctx, id, func(cur *acceptlog.Job) (acceptlog.Change, error) {
				return acceptlog.Change{
					Job:   &acceptlog.Job{MessageID: id, Channel: "default", State: acceptlog.StateForwarding},
					Lines: []acceptlog.Line{{Kind: acceptlog.KindReceived, State: acceptlog.StateForwarding}},
				}, nil
			})
			if err != nil {
				t.Errorf("Mutate %s: %v", id, err)
			}
		})
	}
	close(start)
	wg.Wait()
	jobs, err := l.ByState(ctx, acceptlog.StateForwarding, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(jobs), n; got != want {
		t.Errorf("forwarding jobs = %d, want %d", got, want)
	}
	st, err := l.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := st.Lines, uint64(n); got != want {
		t.Errorf("lines = %d, want %d", got, want)
	}
	if got := l.Commits(); be.GroupCommit && got >= n {
		t.Errorf("%d concurrent Mutates took %d commits, want fewer (group commit)", n, got)
	}
}

func testReopenKeepsEverything(t *testing.T, be Backend) {
	ctx := context.Background()
	l, reopen := be.openReopen(t)
	create(t, l, "<a@x>", "default", acceptlog.StateForwarding)
	transition(t, l, "<a@x>", acceptlog.StateUnknown, func(j *acceptlog.Job) {
		j.NextCheckAt = t0.Add(3 * time.Minute)
		j.AmbiguousAt = t0
	})
	create(t, l, "<b@x>", "billing", acceptlog.StateSent)
	_, _, err := l.Mutate(ctx, "<b@x>", func(*acceptlog.Job) (acceptlog.Change, error) {
		return acceptlog.Change{Raw: []byte("Message-ID: <b@x>\r\n\r\nhi"), Mailbox: &acceptlog.Mailbox{Name: "me@x", HandleChecked: true}}, nil
	})
	if err != nil {
		t.Fatal(err)
	}

	type snapshot struct {
		Jobs    []acceptlog.Job
		Lines   []acceptlog.Line
		Raw     []byte
		Mailbox acceptlog.Mailbox
		Stats   acceptlog.Stats
		Due     []acceptlog.Job
	}
	snap := func(l acceptlog.Store) snapshot {
		t.Helper()
		var s snapshot
		var err error
		if s.Jobs, _, err = l.List(ctx, acceptlog.ListOptions{}); err != nil {
			t.Fatal(err)
		}
		if s.Lines, _, err = l.Lines(ctx, 0, 0); err != nil {
			t.Fatal(err)
		}
		if s.Raw, err = l.Raw(ctx, "<b@x>"); err != nil {
			t.Fatal(err)
		}
		if s.Mailbox, err = l.Mailbox(ctx, "me@x"); err != nil {
			t.Fatal(err)
		}
		if s.Stats, err = l.Stats(ctx); err != nil {
			t.Fatal(err)
		}
		if s.Due, err = l.Due(ctx, t0.Add(time.Hour), 0); err != nil {
			t.Fatal(err)
		}
		return s
	}
	before := snap(l)
	if err := l.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Errorf("second close = %v, want nil", err)
	}
	if _, err := l.Get(ctx, "<a@x>"); !errors.Is(err, acceptlog.ErrClosed) {
		t.Errorf("Get after Close error = %v, want ErrClosed", err)
	}
	if _, _, err := l.Mutate(ctx, "<a@x>", func(*acceptlog.Job) (acceptlog.Change, error) { return acceptlog.Change{}, nil }); !errors.Is(err, acceptlog.ErrClosed) {
		t.Errorf("Mutate after Close error = %v, want ErrClosed", err)
	}

	l2 := reopen()
	if got := snap(l2); !reflect.DeepEqual(got, before) {
		t.Errorf("after reopen:\n got %+v\nwant %+v", got, before)
	}
	_, lines, err := l2.Mutate(ctx, "<a@x>", func(*acceptlog.Job) (acceptlog.Change, error) {
		return acceptlog.Change{Lines: []acceptlog.Line{{Kind: acceptlog.KindSearch}}}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := lines[0].Seq, uint64(len(before.Lines)+1); got != want {
		t.Errorf("first seq after reopen = %d, want %d (sequence survives)", got, want)
	}
}

func testDue(t *testing.T, be Backend) {
	ctx := context.Background()
	l := be.open(t)
	at := map[string]time.Duration{"<a@x>": 3 * time.Minute, "<b@x>": time.Minute, "<c@x>": 2 * time.Minute, "<d@x>": time.Hour}
	for id, d := range at {
		create(t, l, id, "default", acceptlog.StateForwarding)
		transition(t, l, id, acceptlog.StateUnknown, func(j *acceptlog.Job) { j.NextCheckAt = t0.Add(d); j.AmbiguousAt = t0 })
	}
	create(t, l, "<e@x>", "default", acceptlog.StateUnknown) // nothing scheduled

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
	transition(t, l, "<b@x>", acceptlog.StateSent, func(j *acceptlog.Job) { j.NextCheckAt = time.Time{} })
	transition(t, l, "<a@x>", acceptlog.StateUnknown, func(j *acceptlog.Job) { j.NextCheckAt = t0.Add(30 * time.Second) })
	if got, want := due(t0.Add(10*time.Minute), 0), []string{"<a@x>", "<c@x>"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Due after clear and move = %v, want %v", got, want)
	}
}

func testByStateAndListPaging(t *testing.T, be Backend) {
	ctx := context.Background()
	l := be.open(t)
	for i, s := range []acceptlog.State{
		acceptlog.StateUnknown, acceptlog.StateSent, acceptlog.StateUnknown, acceptlog.StateReview,
		acceptlog.StateUnknown, acceptlog.StateSent, acceptlog.StateUnknown,
	} {
		ch := "default"
		if i%2 == 1 {
			ch = "billing"
		}
		create(t, l, fmt.Sprintf("<%d@x>", i), ch, s)
	}

	byState, err := l.ByState(ctx, acceptlog.StateUnknown, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ids(byState), []string{"<0@x>", "<2@x>", "<4@x>", "<6@x>"}; !reflect.DeepEqual(got, want) {
		t.Errorf("ByState(unknown) = %v, want %v", got, want)
	}
	byState, err = l.ByState(ctx, acceptlog.StateUnknown, 3)
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
		opts acceptlog.ListOptions
		want [][]string // pages
	}{
		{"all in pages of 3", acceptlog.ListOptions{Limit: 3}, [][]string{
			{"<0@x>", "<1@x>", "<2@x>"}, {"<3@x>", "<4@x>", "<5@x>"}, {"<6@x>"}}},
		{"exact multiple ends with empty next", acceptlog.ListOptions{State: acceptlog.StateSent, Limit: 2}, [][]string{
			{"<1@x>", "<5@x>"}}},
		{"state in pages of 3", acceptlog.ListOptions{State: acceptlog.StateUnknown, Limit: 3}, [][]string{
			{"<0@x>", "<2@x>", "<4@x>"}, {"<6@x>"}}},
		{"channel", acceptlog.ListOptions{Channel: "billing", Limit: 2}, [][]string{
			{"<1@x>", "<3@x>"}, {"<5@x>"}}},
		{"state and channel", acceptlog.ListOptions{State: acceptlog.StateUnknown, Channel: "default", Limit: 1}, [][]string{
			{"<0@x>"}, {"<2@x>"}, {"<4@x>"}, {"<6@x>"}}},
		{"after", acceptlog.ListOptions{After: "<4@x>"}, [][]string{{"<5@x>", "<6@x>"}}},
		{"no match", acceptlog.ListOptions{State: acceptlog.StateAbandoned}, [][]string{{}}},
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
	if _, _, err := l.List(ctx, acceptlog.ListOptions{State: "bogus"}); err == nil {
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
			_, _, err := l.Mutate(ctx, id, func(*acceptlog.Job) (acceptlog.Change, error) {
				return acceptlog.Change{
					Job:   &acceptlog.Job{MessageID: id, State: acceptlog.StateSent},
					Lines: []acceptlog.Line{{Kind: acceptlog.KindReceived, State: acceptlog.StateSent}},
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
		jobs, next, err := l.List(ctx, acceptlog.ListOptions{Limit: tc.limit})
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
	create(t, l, "<a@x>", "default", acceptlog.StateForwarding)
	for range 4 {
		_, _, err := l.Mutate(ctx, "<a@x>", func(*acceptlog.Job) (acceptlog.Change, error) {
			return acceptlog.Change{Lines: []acceptlog.Line{{Kind: acceptlog.KindSearch}}}, nil
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

	create(t, l, "<a@x>", "default", acceptlog.StateForwarding)
	create(t, l, "<b@x>", "billing", acceptlog.StateForwarding)
	create(t, l, "<c@x>", "billing", acceptlog.StateForwarding)
	transition(t, l, "<a@x>", acceptlog.StateUnknown, func(j *acceptlog.Job) { j.AmbiguousAt = t0.Add(2 * time.Minute) })
	transition(t, l, "<b@x>", acceptlog.StateUnknown, func(j *acceptlog.Job) { j.AmbiguousAt = t0.Add(time.Minute) })
	transition(t, l, "<c@x>", acceptlog.StateSent, nil)

	got, err := l.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := acceptlog.Stats{
		Jobs:      3,
		Lines:     6,
		ByState:   map[acceptlog.State]int{acceptlog.StateUnknown: 2, acceptlog.StateSent: 1},
		ByChannel: map[string]map[acceptlog.State]int{"default": {acceptlog.StateUnknown: 1}, "billing": {acceptlog.StateUnknown: 1, acceptlog.StateSent: 1}},
		ByKind:    map[acceptlog.Kind]int{acceptlog.KindReceived: 3, acceptlog.KindState: 3},
		ByReason:  map[acceptlog.Kind]map[string]int{acceptlog.KindState: {"test": 3}},
		// b became unknown later but was ambiguous earlier.
		OldestUnknown: t0.Add(time.Minute),
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("stats\n got %+v\nwant %+v", got, want)
	}

	transition(t, l, "<b@x>", acceptlog.StateSent, nil)
	got, err = l.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := got.OldestUnknown, t0.Add(2*time.Minute); !got.Equal(want) {
		t.Errorf("oldest unknown after b sent = %v, want %v", got, want)
	}
	if got, want := got.ByChannel["billing"], map[acceptlog.State]int{acceptlog.StateSent: 2}; !reflect.DeepEqual(got, want) {
		t.Errorf("billing counts = %v, want %v (no zero entries)", got, want)
	}
}

func testRaw(t *testing.T, be Backend) {
	ctx := context.Background()
	l := be.open(t)
	create(t, l, "<a@x>", "default", acceptlog.StateForwarding)
	if _, err := l.Raw(ctx, "<a@x>"); !errors.Is(err, acceptlog.ErrNotFound) {
		t.Errorf("Raw before any store error = %v, want ErrNotFound", err)
	}
	for _, raw := range []string{"first", "second"} {
		_, _, err := l.Mutate(ctx, "<a@x>", func(*acceptlog.Job) (acceptlog.Change, error) {
			return acceptlog.Change{Raw: []byte(raw)}, nil
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
	if want := (acceptlog.Mailbox{Name: "me@x"}); got != want {
		t.Errorf("unknown mailbox = %+v, want %+v", got, want)
	}
	// A mailbox may be written without any job.
	want := acceptlog.Mailbox{Name: "me@x", HandleChecked: true, HandleUntrusted: true, Rewrites: 2}
	_, _, err = l.Mutate(ctx, "<a@x>", func(*acceptlog.Job) (acceptlog.Change, error) {
		return acceptlog.Change{Mailbox: &want}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, err = l.Mailbox(ctx, "me@x"); err != nil || got != want {
		t.Errorf("Mailbox = %+v, %v; want %+v", got, err, want)
	}
	if other, _ := l.Mailbox(ctx, "you@x"); other != (acceptlog.Mailbox{Name: "you@x"}) {
		t.Errorf("other mailbox = %+v, want zero", other)
	}
}

func testGetAndJobLinesNotFound(t *testing.T, be Backend) {
	ctx := context.Background()
	l := be.open(t)
	if _, err := l.Get(ctx, "<none@x>"); !errors.Is(err, acceptlog.ErrNotFound) {
		t.Errorf("Get error = %v, want ErrNotFound", err)
	}
	if _, err := l.JobLines(ctx, "<none@x>"); !errors.Is(err, acceptlog.ErrNotFound) {
		t.Errorf("JobLines error = %v, want ErrNotFound", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := l.Get(cctx, "<none@x>"); !errors.Is(err, context.Canceled) {
		t.Errorf("Get on cancelled ctx error = %v, want context.Canceled", err)
	}
}

func sentJob(t *testing.T, l acceptlog.Store, id string, at time.Time) {
	t.Helper()
	ctx := context.Background()
	_, _, err := l.Mutate(ctx, id, func(cur *acceptlog.Job) (acceptlog.Change, error) {
		j := acceptlog.Job{MessageID: id, Key: "key-" + id, Channel: "default", Mailbox: "default",
			Fingerprint: "fp-" + id, State: acceptlog.StateForwarding, Attempts: 1, CreatedAt: at, UpdatedAt: at}
		return acceptlog.Change{Job: &j, Raw: []byte("Message-ID: " + id + "\r\n\r\nbody"), Lines: []acceptlog.Line{
			{Kind: acceptlog.KindReceived, Attempt: 1, Channel: "default", Time: at},
			{Kind: acceptlog.KindForwarding, Attempt: 1, State: acceptlog.StateForwarding, Time: at},
		}}, nil
	})
	if err != nil {
		t.Fatalf("forward %s: %v", id, err)
	}
	_, _, err = l.Mutate(ctx, id, func(cur *acceptlog.Job) (acceptlog.Change, error) {
		cur.State, cur.Effects, cur.GmailID, cur.ThreadID, cur.UpdatedAt = acceptlog.StateSent, 1, "g-"+id, "t-"+id, at
		return acceptlog.Change{Job: cur, Lines: []acceptlog.Line{
			{Kind: acceptlog.KindEffect, Attempt: 1, State: acceptlog.StateSent, Source: acceptlog.SourceResponse, GmailID: "g-" + id, Time: at},
		}}, nil
	})
	if err != nil {
		t.Fatalf("sent %s: %v", id, err)
	}
}

func testPruneKeepsTheRecordAndDropsDetail(t *testing.T, be Backend) {
	ctx := context.Background()
	l := be.open(t)
	old, fresh := "<old@x.example>", "<fresh@x.example>"
	sentJob(t, l, old, t0.Add(-48*time.Hour))
	sentJob(t, l, fresh, t0)
	// Still unknown: never pruned, however old.
	_, _, err := l.Mutate(ctx, "<unknown@x.example>", func(*acceptlog.Job) (acceptlog.Change, error) {
		at := t0.Add(-72 * time.Hour)
		j := acceptlog.Job{MessageID: "<unknown@x.example>", Channel: "default", State: acceptlog.StateUnknown,
			Attempts: 1, CreatedAt: at, UpdatedAt: at, AmbiguousAt: at}
		return acceptlog.Change{Job: &j, Lines: []acceptlog.Line{{Kind: acceptlog.KindAmbiguous, Attempt: 1, State: acceptlog.StateUnknown}}}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	before, _ := l.Stats(ctx)

	res, err := l.Prune(ctx, t0.Add(-24*time.Hour), 0)
	if err != nil {
		t.Fatalf("Prune: %v", err)
	}
	if res.Jobs != 1 || res.Lines != 2 || res.RawBytes == 0 || res.More {
		t.Fatalf("Prune = %+v, want 1 job, 2 lines, some raw bytes, no more", res)
	}
	j, err := l.Get(ctx, old)
	if err != nil {
		t.Fatal(err)
	}
	if j.PrunedAt.IsZero() || j.State != acceptlog.StateSent || j.Key != "key-"+old || j.Fingerprint != "fp-"+old ||
		j.GmailID != "g-"+old || j.Effects != 1 {
		t.Fatalf("pruned job record = %+v, want sent with key, fingerprint, gmail id and effects kept", j)
	}
	lines, _ := l.JobLines(ctx, old)
	if len(lines) != 1 || lines[0].Kind != acceptlog.KindEffect {
		t.Fatalf("pruned job lines = %+v, want only its effect line", lines)
	}
	if _, err := l.Raw(ctx, old); !errors.Is(err, acceptlog.ErrNotFound) {
		t.Fatalf("Raw of pruned job: err %v, want ErrNotFound", err)
	}
	if lines, _ := l.JobLines(ctx, fresh); len(lines) != 3 {
		t.Fatalf("fresh job has %d lines, want 3 (not pruned)", len(lines))
	}
	after, _ := l.Stats(ctx)
	if after.Lines != before.Lines-2 || after.ByKind[acceptlog.KindEffect] != before.ByKind[acceptlog.KindEffect] {
		t.Fatalf("stats lines %d → %d, effects %d → %d; want 2 fewer lines, same effects",
			before.Lines, after.Lines, before.ByKind[acceptlog.KindEffect], after.ByKind[acceptlog.KindEffect])
	}
	// A second pass finds nothing left to do.
	if res, err := l.Prune(ctx, t0.Add(time.Hour*24*365), 0); err != nil || res.Jobs != 1 {
		t.Fatalf("second Prune (now including the fresh job) = %+v, %v; want only the fresh job", res, err)
	}
	if res, _ := l.Prune(ctx, t0.Add(time.Hour*24*365), 0); res.Jobs != 0 {
		t.Fatalf("third Prune = %+v, want nothing", res)
	}
	if err := l.Check(ctx); err != nil {
		t.Fatalf("Check after pruning: %v", err)
	}
}

func testPruneLimitAndOrder(t *testing.T, be Backend) {
	ctx := context.Background()
	l := be.open(t)
	for i, id := range []string{"<c@x.example>", "<a@x.example>", "<b@x.example>"} {
		sentJob(t, l, id, t0.Add(time.Duration(-10+i)*time.Hour))
	}
	res, err := l.Prune(ctx, t0, 2)
	if err != nil || res.Jobs != 2 || !res.More {
		t.Fatalf("Prune limit 2 = %+v, %v; want 2 jobs and more", res, err)
	}
	// Oldest first: c and a, not b.
	if j, _ := l.Get(ctx, "<b@x.example>"); !j.PrunedAt.IsZero() {
		t.Fatalf("the newest job was pruned before an older one")
	}
	if j, _ := l.Get(ctx, "<c@x.example>"); j.PrunedAt.IsZero() {
		t.Fatalf("the oldest job was not pruned")
	}
}

func testPrunableStates(t *testing.T, be Backend) {
	for _, tc := range []struct {
		j    acceptlog.Job
		want bool
	}{
		{acceptlog.Job{State: acceptlog.StateSent}, true},
		{acceptlog.Job{State: acceptlog.StateSent, NextCheckAt: t0}, false}, // verify pass pending
		{acceptlog.Job{State: acceptlog.StateAbandoned}, true},
		{acceptlog.Job{State: acceptlog.StateFailed}, true},
		{acceptlog.Job{State: acceptlog.StateFailed, Retryable: true}, false},
		{acceptlog.Job{State: acceptlog.StateUnknown}, false},
		{acceptlog.Job{State: acceptlog.StateReview}, false},
		{acceptlog.Job{State: acceptlog.StateForwarding}, false},
		{acceptlog.Job{State: acceptlog.StateSent, PrunedAt: t0}, false},
	} {
		if got := tc.j.Prunable(); got != tc.want {
			t.Errorf("Prunable(%s, retryable %v, next check %v, pruned %v) = %v, want %v",
				tc.j.State, tc.j.Retryable, !tc.j.NextCheckAt.IsZero(), !tc.j.PrunedAt.IsZero(), got, tc.want)
		}
	}
}

func testCheckAcceptsPrunedJobsWithGaps(t *testing.T, be Backend) {
	ctx := context.Background()
	l := be.open(t)
	id := "<dup@x.example>"
	at := t0.Add(-48 * time.Hour)
	sentJob(t, l, id, at)
	for _, step := range []struct {
		state acceptlog.State
		kind  acceptlog.Kind
	}{{acceptlog.StateReview, acceptlog.KindReview}, {acceptlog.StateAbandoned, acceptlog.KindResolved}} {
		_, _, err := l.Mutate(ctx, id, func(cur *acceptlog.Job) (acceptlog.Change, error) {
			cur.State, cur.UpdatedAt = step.state, at
			return acceptlog.Change{Job: cur, Lines: []acceptlog.Line{{Kind: step.kind, Attempt: 1, State: step.state, Actor: "test"}}}, nil
		})
		if err != nil {
			t.Fatalf("move to %s: %v", step.state, err)
		}
	}
	if res, err := l.Prune(ctx, t0, 0); err != nil || res.Jobs != 1 {
		t.Fatalf("Prune = %+v, %v", res, err)
	}
	lines, _ := l.JobLines(ctx, id)
	if len(lines) != 2 || lines[0].State != acceptlog.StateSent || lines[1].State != acceptlog.StateAbandoned {
		t.Fatalf("kept lines %+v; want the effect (sent) and the resolved (abandoned) line", lines)
	}
	if err := l.Check(ctx); err != nil {
		t.Fatalf("Check of a pruned job: %v", err)
	}
}

func testMutateRefusesEveryTransitionOutsideTheTable(t *testing.T, be Backend) {
	ctx := context.Background()
	l := be.open(t)
	n := 0
	for _, from := range acceptlog.States {
		for _, to := range acceptlog.States {
			n++
			id := fmt.Sprintf("<t%d@x>", n)
			seed := acceptlog.Job{MessageID: id, State: from, Attempts: 1, CreatedAt: time.Unix(1, 0)}
			if _, _, err := l.Mutate(ctx, id, func(*acceptlog.Job) (acceptlog.Change, error) {
				j := seed
				return acceptlog.Change{Job: &j, Lines: []acceptlog.Line{{Kind: acceptlog.KindState, State: from}}}, nil
			}); err != nil {
				t.Fatalf("seed %s: %v", from, err)
			}
			_, _, err := l.Mutate(ctx, id, func(cur *acceptlog.Job) (acceptlog.Change, error) {
				j := *cur
				line := acceptlog.Move(&j, to, acceptlog.Line{Kind: acceptlog.KindState})
				return acceptlog.Change{Job: &j, Lines: []acceptlog.Line{line}}, nil
			})
			if acceptlog.Allowed(from, to) {
				if err != nil {
					t.Errorf("%s → %s (in the table): %v", from, to, err)
				}
				continue
			}
			if !errors.Is(err, acceptlog.ErrInvalidChange) || !strings.Contains(err.Error(), string(from)+" → "+string(to)) {
				t.Errorf("%s → %s (not in the table): err = %v, want an invalid change naming both states", from, to, err)
			}
			got, gerr := l.Get(ctx, id)
			if gerr != nil || got.State != from {
				t.Errorf("%s → %s refused, but the job is %s (%v)", from, to, got.State, gerr)
			}
		}
	}
}
