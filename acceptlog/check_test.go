package acceptlog_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/acceptlog"
	"github.com/gmailrelay/gmailrelay/acceptlog/logtest"
)

// effect appends an effect line moving the job to sent.
func effect(t *testing.T, l *acceptlog.Log, id string) {
	t.Helper()
	transitionLine(t, l, id, gmailrelay.Line{Kind: gmailrelay.KindEffect, State: gmailrelay.StateSent, Source: gmailrelay.SourceSearch})
}

func transitionLine(t *testing.T, l *acceptlog.Log, id string, ln gmailrelay.Line) {
	t.Helper()
	_, _, err := l.Mutate(context.Background(), id, func(cur *gmailrelay.Job) (gmailrelay.Change, error) {
		if ln.State != "" {
			cur.State = ln.State
		}
		if ln.Kind == gmailrelay.KindEffect {
			cur.Effects++
		}
		return gmailrelay.Change{Job: cur, Lines: []gmailrelay.Line{ln}}, nil
	})
	if err != nil {
		t.Fatalf("mutate %s: %v", id, err)
	}
}

// TestCheckEffectRule covers the duplicate-effect invariant, whose breaking
// Mutate allows on purpose (a real duplicate must be recorded).
func TestCheckEffectRule(t *testing.T) {
	tests := []struct {
		name    string
		after   []gmailrelay.Line // after two effect lines
		wantErr bool
	}{
		{"two effects in sent", nil, true},
		{"two effects then review", []gmailrelay.Line{{Kind: gmailrelay.KindReview, State: gmailrelay.StateReview}}, false},
		{"two effects, review, resolved", []gmailrelay.Line{
			{Kind: gmailrelay.KindReview, State: gmailrelay.StateReview},
			{Kind: gmailrelay.KindResolved, State: gmailrelay.StateSent, Actor: "ops"},
		}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			l, err := acceptlog.Open(filepath.Join(t.TempDir(), "accept.db"), acceptlog.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			logtest.Create(t, l, "<a@x>", "default", gmailrelay.StateUnknown)
			effect(t, l, "<a@x>")
			effect(t, l, "<a@x>")
			for _, ln := range tc.after {
				transitionLine(t, l, "<a@x>", ln)
			}
			err = l.Check(ctx)
			if gotErr := err != nil; gotErr != tc.wantErr {
				t.Fatalf("Check = %v, want error %v", err, tc.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), "2 effect lines") {
				t.Errorf("Check error = %q, want it to name the duplicate effect", err)
			}
		})
	}
}

// TestCheckDetectsCorruption damages a closed log through a raw bbolt handle
// and asserts Check, after reopening, reports the damage.
func TestCheckDetectsCorruption(t *testing.T) {
	tests := []struct {
		name    string
		corrupt func(tx *acceptlog.Tamperer) error
		want    []string // substrings of the Check error
	}{
		{
			name: "job state disagrees with its lines",
			corrupt: func(tx *acceptlog.Tamperer) error {
				return rewriteJob(tx, "<a@x>", func(j *gmailrelay.Job) { j.State = gmailrelay.StateSent })
			},
			want: []string{`job <a@x>: state "sent" but its lines fold to "unknown"`, "state index: missing entry", `counter "state\x00sent"`},
		},
		{
			name: "attempts below a line's attempt",
			corrupt: func(tx *acceptlog.Tamperer) error {
				return rewriteJob(tx, "<a@x>", func(j *gmailrelay.Job) { j.Attempts = 0 })
			},
			want: []string{"has attempt 1, job only 0 attempts"},
		},
		{
			name: "effects disagree with effect lines",
			corrupt: func(tx *acceptlog.Tamperer) error {
				return rewriteJob(tx, "<a@x>", func(j *gmailrelay.Job) { j.Effects = 1 })
			},
			want: []string{"job <a@x>: effects 1 but 0 effect lines"},
		},
		{
			name: "due index entry lost",
			corrupt: func(tx *acceptlog.Tamperer) error {
				return tx.Delete("due", dueKey(t0, "<a@x>"))
			},
			want: []string{"due index: missing entry (job <a@x>"},
		},
		{
			name: "state index holds a stray entry",
			corrupt: func(tx *acceptlog.Tamperer) error {
				return tx.Put("state", []byte("review\x00<ghost@x>"), nil)
			},
			want: []string{"state index: stray entry (job <ghost@x> in state review)"},
		},
		{
			name: "line lost from a job",
			corrupt: func(tx *acceptlog.Tamperer) error {
				return tx.Delete("lines", binary.BigEndian.AppendUint64(nil, 2))
			},
			want: []string{"job <a@x>: its record lists line 2, which is not one of its lines", `counter "lines" is 2, recount says 1`, "fold to \"forwarding\""},
		},
		{
			name: "line missing from its job's record",
			corrupt: func(tx *acceptlog.Tamperer) error {
				return rewriteRecord(tx, "<a@x>", func(_ *gmailrelay.Job, seqs []uint64) []uint64 { return seqs[:1] })
			},
			want: []string{"1 violations", "job <a@x>: line 2 is not listed in its record"},
		},
		{
			name: "job record lists a line that does not exist",
			corrupt: func(tx *acceptlog.Tamperer) error {
				return rewriteRecord(tx, "<a@x>", func(_ *gmailrelay.Job, seqs []uint64) []uint64 { return append(seqs, seqs[1]+1) })
			},
			want: []string{"1 violations", "job <a@x>: its record lists line 3, which is not one of its lines"},
		},
		{
			name: "job record's line seqs unreadable",
			corrupt: func(tx *acceptlog.Tamperer) error {
				v, err := tx.Get("jobs", []byte("<a@x>"))
				if err != nil {
					return err
				}
				v = append([]byte(nil), v...)
				v[len(v)-4] = 0 // the last seq's delta (before the zero lease and the zero bounce counts) becomes 0
				return tx.Put("jobs", []byte("<a@x>"), v)
			},
			want: []string{"job <a@x>: its record's line seqs: line seqs: 1 after 1 is not increasing"},
		},
		{
			name: "many violations are counted and each is named",
			corrupt: func(tx *acceptlog.Tamperer) error {
				for i := range 25 {
					if err := tx.Put("state", fmt.Appendf(nil, "sent\x00<ghost%02d@x>", i), nil); err != nil {
						return err
					}
				}
				return nil
			},
			want: []string{"25 violations", "<ghost00@x>", "<ghost19@x>", "<ghost24@x>"},
		},
		{
			name: "counter drift",
			corrupt: func(tx *acceptlog.Tamperer) error {
				return tx.Put("counters", []byte("jobs"), []byte{0, 0, 0, 0, 0, 0, 0, 9})
			},
			want: []string{`counter "jobs" is 9, recount says 1`},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			path := filepath.Join(t.TempDir(), "accept.db")
			l, err := acceptlog.Open(path, acceptlog.Options{})
			if err != nil {
				t.Fatal(err)
			}
			logtest.Create(t, l, "<a@x>", "default", gmailrelay.StateForwarding)
			_, _, err = l.Mutate(ctx, "<a@x>", func(cur *gmailrelay.Job) (gmailrelay.Change, error) {
				cur.State, cur.Attempts, cur.NextCheckAt, cur.AmbiguousAt = gmailrelay.StateUnknown, 1, t0, t0
				return gmailrelay.Change{Job: cur, Lines: []gmailrelay.Line{{Kind: gmailrelay.KindAmbiguous, Attempt: 1, State: gmailrelay.StateUnknown}}}, nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Check(ctx); err != nil {
				t.Fatalf("Check before corruption: %v", err)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}

			if err := acceptlog.Tamper(path, tc.corrupt); err != nil {
				t.Fatalf("corrupt: %v", err)
			}

			l, err = acceptlog.Open(path, acceptlog.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			err = l.Check(ctx)
			if err == nil {
				t.Fatal("Check of a corrupted log = nil, want violations")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Check error does not mention %q:\n%v", w, err)
				}
			}
		})
	}
}

// rewriteJob edits the stored job id behind the log's back, keeping the
// seqs its record lists.
func rewriteJob(tx *acceptlog.Tamperer, id string, edit func(*gmailrelay.Job)) error {
	return rewriteRecord(tx, id, func(j *gmailrelay.Job, seqs []uint64) []uint64 {
		edit(j)
		return seqs
	})
}

func rewriteRecord(tx *acceptlog.Tamperer, id string, edit func(*gmailrelay.Job, []uint64) []uint64) error {
	return tx.EditJob(id, edit)
}

// dueKey is the due index's key of job id due at t (8-byte sortable time,
// then the id).
func dueKey(t time.Time, id string) []byte {
	k := binary.BigEndian.AppendUint64(nil, uint64(t.UnixNano())^(1<<63))
	return append(k, id...)
}
