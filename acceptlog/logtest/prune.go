package logtest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay"
)

// SentJob writes a job the way the send path does (received + forwarding,
// then effect + sent) with its raw message, last changed at at.
func SentJob(t *testing.T, l gmailrelay.Store, id string, at time.Time) {
	t.Helper()
	ctx := context.Background()
	_, _, err := l.Mutate(ctx, id, func(cur *gmailrelay.Job) (gmailrelay.Change, error) {
		j := gmailrelay.Job{MessageID: id, Key: "key-" + id, Channel: "default", Mailbox: "default",
			Fingerprint: "fp-" + id, State: gmailrelay.StateForwarding, Attempts: 1, CreatedAt: at, UpdatedAt: at}
		return gmailrelay.Change{Job: &j, Raw: []byte("Message-ID: " + id + "\r\n\r\nbody"), Lines: []gmailrelay.Line{
			{Kind: gmailrelay.KindReceived, Attempt: 1, Channel: "default", Time: at},
			{Kind: gmailrelay.KindForwarding, Attempt: 1, State: gmailrelay.StateForwarding, Time: at},
		}}, nil
	})
	if err != nil {
		t.Fatalf("forward %s: %v", id, err)
	}
	_, _, err = l.Mutate(ctx, id, func(cur *gmailrelay.Job) (gmailrelay.Change, error) {
		cur.State, cur.Effects, cur.GmailID, cur.ThreadID, cur.UpdatedAt = gmailrelay.StateSent, 1, "g-"+id, "t-"+id, at
		return gmailrelay.Change{Job: cur, Lines: []gmailrelay.Line{
			{Kind: gmailrelay.KindEffect, Attempt: 1, State: gmailrelay.StateSent, Source: gmailrelay.SourceResponse, GmailID: "g-" + id, Time: at},
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
	SentJob(t, l, old, t0.Add(-48*time.Hour))
	SentJob(t, l, fresh, t0)
	// Still unknown: never pruned, however old.
	_, _, err := l.Mutate(ctx, "<unknown@x.example>", func(*gmailrelay.Job) (gmailrelay.Change, error) {
		at := t0.Add(-72 * time.Hour)
		j := gmailrelay.Job{MessageID: "<unknown@x.example>", Channel: "default", State: gmailrelay.StateUnknown,
			Attempts: 1, CreatedAt: at, UpdatedAt: at, AmbiguousAt: at}
		return gmailrelay.Change{Job: &j, Lines: []gmailrelay.Line{{Kind: gmailrelay.KindAmbiguous, Attempt: 1, State: gmailrelay.StateUnknown}}}, nil
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
	if j.PrunedAt.IsZero() || j.State != gmailrelay.StateSent || j.Key != "key-"+old || j.Fingerprint != "fp-"+old ||
		j.GmailID != "g-"+old || j.Effects != 1 {
		t.Fatalf("pruned job record = %+v, want sent with key, fingerprint, gmail id and effects kept", j)
	}
	lines, _ := l.JobLines(ctx, old)
	if len(lines) != 1 || lines[0].Kind != gmailrelay.KindEffect {
		t.Fatalf("pruned job lines = %+v, want only its effect line", lines)
	}
	if _, err := l.Raw(ctx, old); !errors.Is(err, gmailrelay.ErrNotFound) {
		t.Fatalf("Raw of pruned job: err %v, want ErrNotFound", err)
	}
	if lines, _ := l.JobLines(ctx, fresh); len(lines) != 3 {
		t.Fatalf("fresh job has %d lines, want 3 (not pruned)", len(lines))
	}
	after, _ := l.Stats(ctx)
	if after.Lines != before.Lines-2 || after.ByKind[gmailrelay.KindEffect] != before.ByKind[gmailrelay.KindEffect] {
		t.Fatalf("stats lines %d → %d, effects %d → %d; want 2 fewer lines, same effects",
			before.Lines, after.Lines, before.ByKind[gmailrelay.KindEffect], after.ByKind[gmailrelay.KindEffect])
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
		SentJob(t, l, id, t0.Add(time.Duration(-10+i)*time.Hour))
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
		j    gmailrelay.Job
		want bool
	}{
		{gmailrelay.Job{State: gmailrelay.StateSent}, true},
		{gmailrelay.Job{State: gmailrelay.StateSent, NextCheckAt: t0}, false}, // verify pass pending
		{gmailrelay.Job{State: gmailrelay.StateAbandoned}, true},
		{gmailrelay.Job{State: gmailrelay.StateFailed}, true},
		{gmailrelay.Job{State: gmailrelay.StateFailed, Retryable: true}, false},
		{gmailrelay.Job{State: gmailrelay.StateUnknown}, false},
		{gmailrelay.Job{State: gmailrelay.StateReview}, false},
		{gmailrelay.Job{State: gmailrelay.StateForwarding}, false},
		{gmailrelay.Job{State: gmailrelay.StateSent, PrunedAt: t0}, false},
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
	SentJob(t, l, id, at)
	for _, step := range []struct {
		state gmailrelay.State
		kind  gmailrelay.Kind
	}{{gmailrelay.StateReview, gmailrelay.KindReview}, {gmailrelay.StateAbandoned, gmailrelay.KindResolved}} {
		_, _, err := l.Mutate(ctx, id, func(cur *gmailrelay.Job) (gmailrelay.Change, error) {
			cur.State, cur.UpdatedAt = step.state, at
			return gmailrelay.Change{Job: cur, Lines: []gmailrelay.Line{{Kind: step.kind, Attempt: 1, State: step.state, Actor: "test"}}}, nil
		})
		if err != nil {
			t.Fatalf("move to %s: %v", step.state, err)
		}
	}
	if res, err := l.Prune(ctx, t0, 0); err != nil || res.Jobs != 1 {
		t.Fatalf("Prune = %+v, %v", res, err)
	}
	lines, _ := l.JobLines(ctx, id)
	if len(lines) != 2 || lines[0].State != gmailrelay.StateSent || lines[1].State != gmailrelay.StateAbandoned {
		t.Fatalf("kept lines %+v; want the effect (sent) and the resolved (abandoned) line", lines)
	}
	if err := l.Check(ctx); err != nil {
		t.Fatalf("Check of a pruned job: %v", err)
	}
}

// FullChecker is a log whose check has the full form too (the stored
// message rules acceptlog.Log.CheckFull adds).
type FullChecker interface {
	Check(ctx context.Context) error
	CheckFull(ctx context.Context) error
}

// WantChecks fails t unless l's Check and CheckFull each pass (want "")
// or fail naming want.
func WantChecks(t *testing.T, ctx context.Context, l FullChecker, wantCheck, wantFull string) {
	t.Helper()
	for _, c := range []struct {
		name  string
		check func(context.Context) error
		want  string
	}{{"Check", l.Check, wantCheck}, {"CheckFull", l.CheckFull, wantFull}} {
		err := c.check(ctx)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s = %v, want nil", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s = %v, want it to name %q", c.name, err, c.want)
		}
	}
}

// testPruneKeepsTheAlarmCounters: a job whose verify found two copies (a
// review line, duplicate) in a mailbox whose handle Gmail rewrote (a
// handle line, rewritten), marked sent by a human, later found delivered
// twice by its own attempts (duplicate_delivery) and marked sent again,
// keeps those three lines
// when pruned: the relay's duplicates-found and handle-failures totals are
// counted from them and must never go down.
func testPruneKeepsTheAlarmCounters(t *testing.T, be Backend) {
	ctx := context.Background()
	l := be.open(t)
	id := "<dup@x.example>"
	SentJob(t, l, id, t0.Add(-48*time.Hour))
	for _, edit := range []func(j *gmailrelay.Job) []gmailrelay.Line{
		func(j *gmailrelay.Job) []gmailrelay.Line {
			return []gmailrelay.Line{{Kind: gmailrelay.KindHandle, Attempt: 1, Reason: gmailrelay.ReasonHandleRewritten},
				gmailrelay.Move(j, gmailrelay.StateReview, gmailrelay.Line{Kind: gmailrelay.KindReview, Attempt: 1, Reason: gmailrelay.ReasonDuplicate})}
		},
		func(j *gmailrelay.Job) []gmailrelay.Line {
			return []gmailrelay.Line{gmailrelay.Move(j, gmailrelay.StateSent, gmailrelay.Line{Kind: gmailrelay.KindResolved, Attempt: 1, Reason: gmailrelay.ReasonMarkSent, Actor: "ui"})}
		},
		func(j *gmailrelay.Job) []gmailrelay.Line {
			return []gmailrelay.Line{gmailrelay.Move(j, gmailrelay.StateReview, gmailrelay.Line{Kind: gmailrelay.KindReview, Attempt: 1, Reason: gmailrelay.ReasonDuplicateDelivery})}
		},
		func(j *gmailrelay.Job) []gmailrelay.Line {
			j.Verified, j.NextCheckAt = true, time.Time{}
			return []gmailrelay.Line{gmailrelay.Move(j, gmailrelay.StateSent, gmailrelay.Line{Kind: gmailrelay.KindResolved, Attempt: 1, Reason: gmailrelay.ReasonMarkSent, Actor: "ui"})}
		},
	} {
		if _, _, err := l.Mutate(ctx, id, func(cur *gmailrelay.Job) (gmailrelay.Change, error) {
			j := *cur
			lines := edit(&j)
			j.UpdatedAt = t0.Add(-48 * time.Hour)
			return gmailrelay.Change{Job: &j, Lines: lines}, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	before, _ := l.Stats(ctx)
	if res, err := l.Prune(ctx, t0.Add(-24*time.Hour), 0); err != nil || res.Jobs != 1 {
		t.Fatalf("Prune = %+v, %v; want the job pruned", res, err)
	}
	after, _ := l.Stats(ctx)
	for _, c := range []struct {
		kind   gmailrelay.Kind
		reason gmailrelay.Reason
	}{{gmailrelay.KindReview, gmailrelay.ReasonDuplicate}, {gmailrelay.KindReview, gmailrelay.ReasonDuplicateDelivery},
		{gmailrelay.KindHandle, gmailrelay.ReasonHandleRewritten}} {
		b, a := before.ByReason[c.kind][string(c.reason)], after.ByReason[c.kind][string(c.reason)]
		if b != 1 || a != b {
			t.Errorf("%s lines with reason %s: %d before pruning, %d after; want 1 and 1", c.kind, c.reason, b, a)
		}
	}
	if err := l.Check(ctx); err != nil {
		t.Fatalf("Check after pruning: %v", err)
	}
}
