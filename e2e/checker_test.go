package e2e_test

import (
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/e2e"
	"github.com/gmailrelay/gmailrelay/gmailfake"
)

// jobFrom builds a job from lines (Seq and MessageID filled in) whose
// state is the fold of those lines, numbering seqs from *seq.
func jobFrom(id, channel string, seq *uint64, lines ...gmailrelay.Line) e2e.Job {
	j := e2e.Job{Job: gmailrelay.Job{MessageID: id, Channel: channel}}
	for _, l := range lines {
		*seq++
		l.Seq, l.MessageID = *seq, id
		if l.Kind == gmailrelay.KindEffect {
			j.Effects++
		}
		if l.Kind == gmailrelay.KindReceived {
			j.Attempts++
		}
		j.Lines = append(j.Lines, l)
	}
	j.State = gmailrelay.Fold(j.Lines)
	if j.State == gmailrelay.StateUnknown {
		j.NextCheckAt = time.Unix(1, 0)
	}
	return j
}

// Line shorthands.
var (
	lReceived   = gmailrelay.Line{Kind: gmailrelay.KindReceived}
	lForwarding = gmailrelay.Line{Kind: gmailrelay.KindForwarding, State: gmailrelay.StateForwarding}
	lEffect     = gmailrelay.Line{Kind: gmailrelay.KindEffect, State: gmailrelay.StateSent}
	lAmbiguous  = gmailrelay.Line{Kind: gmailrelay.KindAmbiguous, State: gmailrelay.StateUnknown}
	lMiss       = gmailrelay.Line{Kind: gmailrelay.KindSearch}
	lNotSent    = gmailrelay.Line{Kind: gmailrelay.KindNotSent, State: gmailrelay.StateFailed, Retryable: true}
	lDupReview  = gmailrelay.Line{Kind: gmailrelay.KindReview, State: gmailrelay.StateReview, Reason: "duplicate"}
	lResolved   = gmailrelay.Line{Kind: gmailrelay.KindResolved, Reason: "retry"}
)

func reason(l gmailrelay.Line, r gmailrelay.Reason) gmailrelay.Line { l.Reason = r; return l }

// observe assembles an observation whose global log is the jobs' lines.
func observe(jobs []e2e.Job, msgs map[string]int, history ...e2e.Op) e2e.Observation {
	o := e2e.Observation{Jobs: jobs, History: history, ReviewChannels: map[string]bool{"billing": true}}
	for _, j := range jobs {
		o.Log = append(o.Log, j.Lines...)
	}
	for id, n := range msgs {
		for range n {
			o.Messages = append(o.Messages, gmailfake.Message{MessageID: id})
		}
	}
	return o
}

func TestCheck(t *testing.T) {
	const a, b = "<a@x>", "<b@x>"
	tests := []struct {
		name string
		// build returns the jobs, the emulator's count per id and the history.
		build func(seq *uint64) ([]e2e.Job, map[string]int, []e2e.Op)
		want  []string // rules violated, in the checker's order; nil = clean
	}{
		{
			name: "sent once by response",
			build: func(seq *uint64) ([]e2e.Job, map[string]int, []e2e.Op) {
				return []e2e.Job{jobFrom(a, "default", seq, lReceived, lForwarding, lEffect)}, map[string]int{a: 1},
					[]e2e.Op{{MessageID: a, Outcome: e2e.OK, Status: 200}}
			},
		},
		{
			name: "ambiguous found by search",
			build: func(seq *uint64) ([]e2e.Job, map[string]int, []e2e.Op) {
				return []e2e.Job{jobFrom(a, "default", seq, lReceived, lForwarding, lAmbiguous, lEffect)}, map[string]int{a: 1}, nil
			},
		},
		{
			name: "sweeper resend after misses, failed, then retried",
			build: func(seq *uint64) ([]e2e.Job, map[string]int, []e2e.Op) {
				return []e2e.Job{jobFrom(a, "default", seq, lReceived, lForwarding, lAmbiguous, lMiss, lMiss,
					reason(lReceived, "sweeper_resend"), lNotSent, reason(lReceived, "sweeper_retry"), lForwarding, lEffect)}, map[string]int{a: 1}, nil
			},
		},
		{
			name: "duplicate in review is allowed",
			build: func(seq *uint64) ([]e2e.Job, map[string]int, []e2e.Op) {
				return []e2e.Job{jobFrom(a, "default", seq, lReceived, lForwarding, lEffect, lDupReview)}, map[string]int{a: 2},
					[]e2e.Op{{MessageID: a, Outcome: e2e.OK, Status: 200}}
			},
		},
		{
			name: "human retry on a review channel",
			build: func(seq *uint64) ([]e2e.Job, map[string]int, []e2e.Op) {
				return []e2e.Job{jobFrom(a, "billing", seq, lReceived, lForwarding, lAmbiguous, lMiss, lDupReview, lResolved,
					reason(lReceived, "resolved_retry"), lForwarding, lEffect)}, map[string]int{a: 1}, nil
			},
		},
		{
			name: "caller retry resends an ambiguous job",
			build: func(seq *uint64) ([]e2e.Job, map[string]int, []e2e.Op) {
				return []e2e.Job{jobFrom(a, "default", seq, lReceived, lForwarding, lAmbiguous, lReceived, lForwarding, lEffect)}, map[string]int{a: 2}, nil
			},
			want: []string{e2e.RuleDuplicate, e2e.RuleNoBlindResend, e2e.RuleSentOnce},
		},
		{
			name: "sweeper resend on a review channel",
			build: func(seq *uint64) ([]e2e.Job, map[string]int, []e2e.Op) {
				return []e2e.Job{jobFrom(a, "billing", seq, lReceived, lForwarding, lAmbiguous, lMiss,
					reason(lReceived, "sweeper_resend"), lForwarding, lEffect)}, map[string]int{a: 1}, nil
			},
			want: []string{e2e.RuleNoBlindResend},
		},
		{
			name: "sweeper resend without a search",
			build: func(seq *uint64) ([]e2e.Job, map[string]int, []e2e.Op) {
				return []e2e.Job{jobFrom(a, "default", seq, lReceived, lForwarding, lAmbiguous,
					reason(lReceived, "sweeper_resend"), lForwarding, lEffect)}, map[string]int{a: 1}, nil
			},
			want: []string{e2e.RuleNoBlindResend},
		},
		{
			name: "acknowledged send missing from the log and the mailbox",
			build: func(seq *uint64) ([]e2e.Job, map[string]int, []e2e.Op) {
				return nil, nil, []e2e.Op{{MessageID: a, Outcome: e2e.OK, Status: 200}, {MessageID: b, Status: 202, Outcome: e2e.Info}}
			},
			want: []string{e2e.RuleAckedKept, e2e.RuleAckedKept},
		},
		{
			name: "sent with no message at the emulator",
			build: func(seq *uint64) ([]e2e.Job, map[string]int, []e2e.Op) {
				return []e2e.Job{jobFrom(a, "default", seq, lReceived, lForwarding, lEffect)}, nil, nil
			},
			want: []string{e2e.RuleSentOnce},
		},
		{
			name: "failed but delivered, and an orphan message",
			build: func(seq *uint64) ([]e2e.Job, map[string]int, []e2e.Op) {
				return []e2e.Job{jobFrom(a, "default", seq, lReceived, lForwarding, lNotSent)}, map[string]int{a: 1, b: 1}, nil
			},
			want: []string{e2e.RuleFailedNotDelivered, e2e.RuleNoOrphan},
		},
		{
			name: "stuck forwarding",
			build: func(seq *uint64) ([]e2e.Job, map[string]int, []e2e.Op) {
				return []e2e.Job{jobFrom(a, "default", seq, lReceived, lForwarding)}, nil, nil
			},
			want: []string{e2e.RuleNotStuck},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var seq uint64
			jobs, msgs, hist := tc.build(&seq)
			rep := e2e.Check(observe(jobs, msgs, hist...))
			var got []string
			for _, v := range rep.Violations {
				got = append(got, v.Rule)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("violations = %v, want rules %v", rep.Violations, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("violation %d = %s, want %s (all: %v)", i, got[i], tc.want[i], rep.Violations)
				}
			}
			if rep.OK() != (len(tc.want) == 0) {
				t.Errorf("OK() = %v with %d violations", rep.OK(), len(got))
			}
		})
	}
}

func TestCheckLogConsistency(t *testing.T) {
	var seq uint64
	j := jobFrom("<a@x>", "default", &seq, lReceived, lForwarding, lEffect)
	o := observe([]e2e.Job{j}, map[string]int{"<a@x>": 1})
	o.Log = o.Log[:2] // the global log lost a line the job has
	if rep := e2e.Check(o); !rep.Has(e2e.RuleLogConsistent) {
		t.Errorf("violations = %v, want %s", rep.Violations, e2e.RuleLogConsistent)
	}
	j.State = gmailrelay.StateFailed // not the fold of its lines
	if rep := e2e.Check(observe([]e2e.Job{j}, map[string]int{"<a@x>": 1})); !rep.Has(e2e.RuleLogConsistent) {
		t.Errorf("violations = %v, want %s", rep.Violations, e2e.RuleLogConsistent)
	}
}

func TestCheckSummary(t *testing.T) {
	var seq uint64
	jobs := []e2e.Job{
		jobFrom("<a@x>", "default", &seq, lReceived, lForwarding, lEffect),
		jobFrom("<b@x>", "default", &seq, lReceived, lForwarding, lEffect, lDupReview),
		jobFrom("<c@x>", "default", &seq, lReceived, lForwarding, lEffect),
	}
	rep := e2e.Check(observe(jobs, map[string]int{"<a@x>": 1, "<b@x>": 2, "<c@x>": 3}))
	got := rep.Summary
	want := e2e.Summary{Jobs: 3, Attempts: 3, Sent: 2, Review: 1, Duplicates: 1, DuplicatesInReview: 1}
	if got != want {
		t.Errorf("summary = %+v, want %+v", got, want)
	}
}
