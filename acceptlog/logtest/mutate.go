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

	"github.com/gmailrelay/gmailrelay"
)

// AtOnce runs fn in n goroutines released together and returns when all
// have returned; goroutine i gets i and the Message-ID "<ii@x>" (two digits).
func AtOnce(n int, fn func(i int, id string)) {
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			fn(i, fmt.Sprintf("<%02d@x>", i))
		})
	}
	close(start)
	wg.Wait()
}

// Create writes a new job in state s with a received line carrying s.
func Create(t *testing.T, l gmailrelay.Store, id, channel string, s gmailrelay.State) gmailrelay.Job {
	t.Helper()
	j, _, err := l.Mutate(context.Background(), id, func(cur *gmailrelay.Job) (gmailrelay.Change, error) {
		if cur != nil {
			return gmailrelay.Change{}, fmt.Errorf("job %s exists", id)
		}
		return gmailrelay.Change{
			Job:   &gmailrelay.Job{MessageID: id, Channel: channel, State: s, CreatedAt: t0},
			Lines: []gmailrelay.Line{{Kind: gmailrelay.KindReceived, State: s, Channel: channel}},
		}, nil
	})
	if err != nil {
		t.Fatalf("create %s: %v", id, err)
	}
	return j
}

func transition(t *testing.T, l gmailrelay.Store, id string, s gmailrelay.State, edit func(*gmailrelay.Job)) gmailrelay.Job {
	t.Helper()
	j, _, err := l.Mutate(context.Background(), id, func(cur *gmailrelay.Job) (gmailrelay.Change, error) {
		if cur == nil {
			return gmailrelay.Change{}, gmailrelay.ErrNotFound
		}
		cur.State = s
		if edit != nil {
			edit(cur)
		}
		return gmailrelay.Change{Job: cur, Lines: []gmailrelay.Line{{Kind: gmailrelay.KindState, State: s, Reason: "test"}}}, nil
	})
	if err != nil {
		t.Fatalf("transition %s to %s: %v", id, s, err)
	}
	return j
}

func ids(jobs []gmailrelay.Job) []string {
	out := []string{}
	for _, j := range jobs {
		out = append(out, j.MessageID)
	}
	return out
}

// testMutateCreateUpdateAndLineOrder creates job a (lines 1, 2), job b
// (line 3), updates a (line 4), then appends a stateless line to a
// (line 5), checking at each step what Mutate returns and what the log
// then holds.
func testMutateCreateUpdateAndLineOrder(t *testing.T, be Backend) {
	l := be.open(t)
	const a, b = "<a@x>", "<b@x>"
	mutateCreate(t, l, a)
	Create(t, l, b, "billing", gmailrelay.StateFailed) // seq 3
	job := mutateUpdate(t, l, a)
	checkStoredAfterUpdate(t, l, job, a, b)
	mutateWithoutJob(t, l, a)
}

// mutateCreate creates job id with two lines: Mutate numbers them 1 and 2
// and stamps the first, which has no time, with the log's clock.
func mutateCreate(t *testing.T, l gmailrelay.Store, id string) {
	t.Helper()
	later := t0.Add(time.Minute)
	job, lines, err := l.Mutate(context.Background(), id, func(cur *gmailrelay.Job) (gmailrelay.Change, error) {
		if cur != nil {
			t.Errorf("cur = %+v, want nil for a new job", cur)
		}
		return gmailrelay.Change{
			Job: &gmailrelay.Job{MessageID: id, Channel: "default", State: gmailrelay.StateForwarding, Attempts: 1},
			Lines: []gmailrelay.Line{
				{Kind: gmailrelay.KindReceived, Seq: 99},
				{Kind: gmailrelay.KindForwarding, Attempt: 1, State: gmailrelay.StateForwarding, Time: later},
			},
		}, nil
	})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if got, want := job.State, gmailrelay.StateForwarding; got != want {
		t.Errorf("created state = %q, want %q", got, want)
	}
	want := []gmailrelay.Line{
		{Seq: 1, Time: t0, MessageID: id, Kind: gmailrelay.KindReceived},
		{Seq: 2, Time: later, MessageID: id, Kind: gmailrelay.KindForwarding, Attempt: 1, State: gmailrelay.StateForwarding},
	}
	if !reflect.DeepEqual(lines, want) {
		t.Errorf("written lines = %+v, want %+v", lines, want)
	}
}

// mutateUpdate moves the forwarding job id to sent with an effect line
// (seq 4) and returns the job Mutate returned.
func mutateUpdate(t *testing.T, l gmailrelay.Store, id string) gmailrelay.Job {
	t.Helper()
	job, lines, err := l.Mutate(context.Background(), id, func(cur *gmailrelay.Job) (gmailrelay.Change, error) {
		if cur == nil || cur.State != gmailrelay.StateForwarding {
			return gmailrelay.Change{}, fmt.Errorf("cur = %+v, want the forwarding job", cur)
		}
		cur.State = gmailrelay.StateSent
		cur.GmailID = "g1"
		cur.Effects++
		return gmailrelay.Change{Job: cur, Lines: []gmailrelay.Line{
			{Kind: gmailrelay.KindEffect, Attempt: 1, Source: gmailrelay.SourceResponse, GmailID: "g1", State: gmailrelay.StateSent},
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
	return job
}

// checkStoredAfterUpdate checks that Get returns job (a's, as Mutate
// returned it), that a's lines are 1, 2 and 4, and that the log's lines
// in order belong to a, a, b, a.
func checkStoredAfterUpdate(t *testing.T, l gmailrelay.Store, job gmailrelay.Job, a, b string) {
	t.Helper()
	ctx := context.Background()
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
}

// mutateWithoutJob checks the two changes without a Job: one that appends
// a stateless line to the sent job id (seq 5), and a no-op on a job that
// does not exist.
func mutateWithoutJob(t *testing.T, l gmailrelay.Store, id string) {
	t.Helper()
	ctx := context.Background()
	// A nil Change.Job leaves the job and may still append stateless lines.
	job, lines, err := l.Mutate(ctx, id, func(cur *gmailrelay.Job) (gmailrelay.Change, error) {
		return gmailrelay.Change{Lines: []gmailrelay.Line{{Kind: gmailrelay.KindSearch, Hits: 1, SentHits: 1}}}, nil
	})
	if err != nil {
		t.Fatalf("append search line: %v", err)
	}
	if job.State != gmailrelay.StateSent || len(lines) != 1 || lines[0].Seq != 5 {
		t.Errorf("nil-job change returned %+v, %+v; want the sent job and line 5", job, lines)
	}
	// A no-op on a missing job returns the zero Job and no error.
	job, lines, err = l.Mutate(ctx, "<none@x>", func(cur *gmailrelay.Job) (gmailrelay.Change, error) {
		return gmailrelay.Change{}, nil
	})
	if err != nil || !reflect.DeepEqual(job, gmailrelay.Job{}) || lines != nil {
		t.Errorf("no-op on missing job = %+v, %v, %v; want zero job, no lines, nil", job, lines, err)
	}
}

func testMutateCallbackErrorWritesNothing(t *testing.T, be Backend) {
	ctx := context.Background()
	l := be.open(t)
	Create(t, l, "<a@x>", "default", gmailrelay.StateFailed)
	before, err := l.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	errBusy := errors.New("busy")
	for _, id := range []string{"<a@x>", "<new@x>"} {
		_, _, err := l.Mutate(ctx, id, func(cur *gmailrelay.Job) (gmailrelay.Change, error) {
			// Build a full change and still refuse: none of it may land.
			return gmailrelay.Change{
				Job:     &gmailrelay.Job{MessageID: id, State: gmailrelay.StateSent},
				Lines:   []gmailrelay.Line{{Kind: gmailrelay.KindEffect, State: gmailrelay.StateSent}},
				Raw:     []byte("x"),
				Mailbox: &gmailrelay.Mailbox{Name: "m", Rewrites: 1},
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
	if _, err := l.Get(ctx, "<new@x>"); !errors.Is(err, gmailrelay.ErrNotFound) {
		t.Errorf("Get(new) error = %v, want ErrNotFound", err)
	}
	if j, _ := l.Get(ctx, "<a@x>"); j.State != gmailrelay.StateFailed {
		t.Errorf("existing job state = %q, want it unchanged (failed)", j.State)
	}
	if _, err := l.Raw(ctx, "<a@x>"); !errors.Is(err, gmailrelay.ErrNotFound) {
		t.Errorf("Raw error = %v, want ErrNotFound", err)
	}
	if mb, _ := l.Mailbox(ctx, "m"); mb.Rewrites != 0 {
		t.Errorf("mailbox = %+v, want it unwritten", mb)
	}
}

func testMutateRejectsInvalidChanges(t *testing.T, be Backend) {
	const id = "<a@x>"
	job := func(s gmailrelay.State, attempts int) *gmailrelay.Job {
		return &gmailrelay.Job{MessageID: id, State: s, Attempts: attempts}
	}
	line := func(k gmailrelay.Kind, s gmailrelay.State, attempt int) gmailrelay.Line {
		return gmailrelay.Line{Kind: k, State: s, Attempt: attempt}
	}
	tests := []struct {
		name   string
		id     string
		exists bool // the job exists (failed, 1 attempt) before the change
		change gmailrelay.Change
	}{
		{"last line state differs from job", id, true, gmailrelay.Change{Job: job(gmailrelay.StateSent, 1),
			Lines: []gmailrelay.Line{line(gmailrelay.KindEffect, gmailrelay.StateSent, 1), line(gmailrelay.KindState, gmailrelay.StateUnknown, 1)}}},
		{"state change without a line", id, true, gmailrelay.Change{Job: job(gmailrelay.StateSent, 1)}},
		{"new job without a state line", id, false, gmailrelay.Change{Job: job(gmailrelay.StateForwarding, 0),
			Lines: []gmailrelay.Line{line(gmailrelay.KindReceived, "", 0)}}},
		{"state line without job", id, true, gmailrelay.Change{Lines: []gmailrelay.Line{line(gmailrelay.KindState, gmailrelay.StateFailed, 0)}}},
		{"lines for a missing job", id, false, gmailrelay.Change{Lines: []gmailrelay.Line{line(gmailrelay.KindSearch, "", 0)}}},
		{"raw for a missing job", id, false, gmailrelay.Change{Raw: []byte("x")}},
		{"job for another id", id, true, gmailrelay.Change{Job: &gmailrelay.Job{MessageID: "<b@x>", State: gmailrelay.StateFailed, Attempts: 1}}},
		{"invalid job state", id, false, gmailrelay.Change{Job: job("bogus", 0),
			Lines: []gmailrelay.Line{line(gmailrelay.KindReceived, "bogus", 0)}}},
		{"unknown line kind", id, true, gmailrelay.Change{Lines: []gmailrelay.Line{line("gossip", "", 0)}}},
		{"line for another id", id, true, gmailrelay.Change{Lines: []gmailrelay.Line{{Kind: gmailrelay.KindSearch, MessageID: "<b@x>"}}}},
		{"line attempt beyond job attempts", id, true, gmailrelay.Change{Lines: []gmailrelay.Line{line(gmailrelay.KindSearch, "", 2)}}},
		{"attempts decrease", id, true, gmailrelay.Change{Job: job(gmailrelay.StateFailed, 0)}},
		{"mailbox without name", id, true, gmailrelay.Change{Mailbox: &gmailrelay.Mailbox{}}},
		{"empty message id", "", false, gmailrelay.Change{}},
		{"NUL in message id", "<a\x00@x>", false, gmailrelay.Change{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			l := be.open(t)
			if tc.exists {
				transition(t, l, Create(t, l, id, "default", gmailrelay.StateForwarding).MessageID, gmailrelay.StateFailed,
					func(j *gmailrelay.Job) { j.Attempts = 1 })
			}
			before, err := l.Stats(ctx)
			if err != nil {
				t.Fatal(err)
			}
			_, _, err = l.Mutate(ctx, tc.id, func(*gmailrelay.Job) (gmailrelay.Change, error) { return tc.change, nil })
			if !errors.Is(err, gmailrelay.ErrInvalidChange) {
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
	Create(t, l, id, "default", gmailrelay.StateForwarding)
	commitsBefore := l.Commits()

	errs := make(chan error, n)
	AtOnce(n, func(int, string) {
		_, _, err := l.Mutate(ctx, id, func(cur *gmailrelay.Job) (gmailrelay.Change, error) {
			cur.Attempts++
			return gmailrelay.Change{Job: cur, Lines: []gmailrelay.Line{{
				Kind: gmailrelay.KindForwarding, Attempt: cur.Attempts, State: gmailrelay.StateForwarding,
			}}}, nil
		})
		errs <- err
	})
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
	AtOnce(n, func(_ int, id string) {
		_, _, err := l.Mutate(ctx, id, func(cur *gmailrelay.Job) (gmailrelay.Change, error) {
			return gmailrelay.Change{
				Job:   &gmailrelay.Job{MessageID: id, Channel: "default", State: gmailrelay.StateForwarding},
				Lines: []gmailrelay.Line{{Kind: gmailrelay.KindReceived, State: gmailrelay.StateForwarding}},
			}, nil
		})
		if err != nil {
			t.Errorf("Mutate %s: %v", id, err)
		}
	})
	jobs, err := l.ByState(ctx, gmailrelay.StateForwarding, 0)
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
	Create(t, l, "<a@x>", "default", gmailrelay.StateForwarding)
	transition(t, l, "<a@x>", gmailrelay.StateUnknown, func(j *gmailrelay.Job) {
		j.NextCheckAt = t0.Add(3 * time.Minute)
		j.AmbiguousAt = t0
	})
	Create(t, l, "<b@x>", "billing", gmailrelay.StateSent)
	_, _, err := l.Mutate(ctx, "<b@x>", func(*gmailrelay.Job) (gmailrelay.Change, error) {
		return gmailrelay.Change{Raw: []byte("Message-ID: <b@x>\r\n\r\nhi"), Mailbox: &gmailrelay.Mailbox{Name: "me@x", HandleChecked: true}}, nil
	})
	if err != nil {
		t.Fatal(err)
	}

	type snapshot struct {
		Jobs    []gmailrelay.Job
		Lines   []gmailrelay.Line
		Raw     []byte
		Mailbox gmailrelay.Mailbox
		Stats   gmailrelay.Stats
		Due     []gmailrelay.Job
	}
	snap := func(l gmailrelay.Store) snapshot {
		t.Helper()
		var s snapshot
		var err error
		if s.Jobs, _, err = l.List(ctx, gmailrelay.ListOptions{}); err != nil {
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
	if _, err := l.Get(ctx, "<a@x>"); !errors.Is(err, gmailrelay.ErrClosed) {
		t.Errorf("Get after Close error = %v, want ErrClosed", err)
	}
	if _, _, err := l.Mutate(ctx, "<a@x>", func(*gmailrelay.Job) (gmailrelay.Change, error) { return gmailrelay.Change{}, nil }); !errors.Is(err, gmailrelay.ErrClosed) {
		t.Errorf("Mutate after Close error = %v, want ErrClosed", err)
	}

	l2 := reopen()
	if got := snap(l2); !reflect.DeepEqual(got, before) {
		t.Errorf("after reopen:\n got %+v\nwant %+v", got, before)
	}
	_, lines, err := l2.Mutate(ctx, "<a@x>", func(*gmailrelay.Job) (gmailrelay.Change, error) {
		return gmailrelay.Change{Lines: []gmailrelay.Line{{Kind: gmailrelay.KindSearch}}}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := lines[0].Seq, uint64(len(before.Lines)+1); got != want {
		t.Errorf("first seq after reopen = %d, want %d (sequence survives)", got, want)
	}
}

func testMutateRefusesEveryTransitionOutsideTheTable(t *testing.T, be Backend) {
	ctx := context.Background()
	l := be.open(t)
	n := 0
	for _, from := range gmailrelay.States {
		for _, to := range gmailrelay.States {
			n++
			id := fmt.Sprintf("<t%d@x>", n)
			seed := gmailrelay.Job{MessageID: id, State: from, Attempts: 1, CreatedAt: time.Unix(1, 0)}
			if _, _, err := l.Mutate(ctx, id, func(*gmailrelay.Job) (gmailrelay.Change, error) {
				j := seed
				return gmailrelay.Change{Job: &j, Lines: []gmailrelay.Line{{Kind: gmailrelay.KindState, State: from}}}, nil
			}); err != nil {
				t.Fatalf("seed %s: %v", from, err)
			}
			_, _, err := l.Mutate(ctx, id, func(cur *gmailrelay.Job) (gmailrelay.Change, error) {
				j := *cur
				line := gmailrelay.Move(&j, to, gmailrelay.Line{Kind: gmailrelay.KindState})
				return gmailrelay.Change{Job: &j, Lines: []gmailrelay.Line{line}}, nil
			})
			if gmailrelay.Allowed(from, to) {
				if err != nil {
					t.Errorf("%s → %s (in the table): %v", from, to, err)
				}
				continue
			}
			if !errors.Is(err, gmailrelay.ErrInvalidChange) || !strings.Contains(err.Error(), string(from)+" → "+string(to)) {
				t.Errorf("%s → %s (not in the table): err = %v, want an invalid change naming both states", from, to, err)
			}
			got, gerr := l.Get(ctx, id)
			if gerr != nil || got.State != from {
				t.Errorf("%s → %s refused, but the job is %s (%v)", from, to, got.State, gerr)
			}
		}
	}
}

// testMutateChecksEachStepOfItsLines: a change whose lines move a job
// through two states is checked step by step: forwarding → sent → review
// (an outcome and the duplicate review it leads to, in one transaction)
// is taken although forwarding → review is not in the table, and a step
// outside the table anywhere in the lines (unknown → queued → forwarding)
// is refused, naming it, with nothing written.
func testMutateChecksEachStepOfItsLines(t *testing.T, be Backend) {
	ctx := context.Background()
	l := be.open(t)
	seed := func(id string, st gmailrelay.State) {
		t.Helper()
		if _, _, err := l.Mutate(ctx, id, func(*gmailrelay.Job) (gmailrelay.Change, error) {
			j := gmailrelay.Job{MessageID: id, State: st, Attempts: 1, CreatedAt: time.Unix(1, 0)}
			return gmailrelay.Change{Job: &j, Lines: []gmailrelay.Line{{Kind: gmailrelay.KindState, State: st}}}, nil
		}); err != nil {
			t.Fatalf("seed %s: %v", st, err)
		}
	}
	through := func(id string, steps ...gmailrelay.State) error {
		_, _, err := l.Mutate(ctx, id, func(cur *gmailrelay.Job) (gmailrelay.Change, error) {
			j := *cur
			var lines []gmailrelay.Line
			for _, st := range steps {
				lines = append(lines, gmailrelay.Move(&j, st, gmailrelay.Line{Kind: gmailrelay.KindState}))
			}
			return gmailrelay.Change{Job: &j, Lines: lines}, nil
		})
		return err
	}
	seed("<steps-ok@x>", gmailrelay.StateForwarding)
	if err := through("<steps-ok@x>", gmailrelay.StateSent, gmailrelay.StateReview); err != nil {
		t.Errorf("forwarding → sent → review: %v", err)
	}
	seed("<steps-bad@x>", gmailrelay.StateUnknown)
	err := through("<steps-bad@x>", gmailrelay.StateQueued, gmailrelay.StateForwarding)
	if !errors.Is(err, gmailrelay.ErrInvalidChange) || !strings.Contains(err.Error(), "unknown → queued") {
		t.Errorf("unknown → queued → forwarding: err = %v, want an invalid change naming unknown → queued", err)
	}
	if j, _ := l.Get(ctx, "<steps-bad@x>"); j.State != gmailrelay.StateUnknown {
		t.Errorf("refused change left the job %s, want unknown", j.State)
	}
}
