package acceptlog

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"sort"
	"strings"

	bolt "go.etcd.io/bbolt"
)

// maxReported bounds how many violations Check spells out.
const maxReported = 20

// Check verifies the log's invariants over the whole file (it reads every
// job and line: a test and admin tool, not a hot path):
//   - every job's State is the fold of its lines, its Attempts is at least
//     every line's Attempt and its Effects is its number of effect lines;
//   - a job has at most one effect line, unless it is in StateReview or a
//     resolved line follows its second effect line;
//   - the state, due and unknown indexes hold exactly the entries the jobs
//     imply;
//   - every job's record lists exactly the seqs of its lines, in order;
//   - every change of state its lines make (after the first) is in
//     Transitions;
//   - the counters equal a recount.
//
// It returns nil when all hold, otherwise an error saying how many
// violations it found and describing the first 20.
func (l *Log) Check(ctx context.Context) error {
	var v violations
	err := l.view(ctx, "check", func(tx *bolt.Tx) error {
		return check(tx, &v)
	})
	if err != nil {
		return err
	}
	return v.err()
}

type violations struct {
	n     int
	first []string
}

func (v *violations) add(format string, args ...any) {
	v.n++
	if len(v.first) < maxReported {
		v.first = append(v.first, fmt.Sprintf(format, args...))
	}
}

func (v *violations) err() error {
	if v.n == 0 {
		return nil
	}
	more := ""
	if v.n > len(v.first) {
		more = fmt.Sprintf("\n\t(%d more)", v.n-len(v.first))
	}
	return fmt.Errorf("acceptlog check: %d violations:\n\t%s%s", v.n, strings.Join(v.first, "\n\t"), more)
}

type keySet map[string]struct{}

func (s keySet) add(k []byte) { s[string(k)] = struct{}{} }

func check(tx *bolt.Tx, v *violations) error {
	wantState, wantDue, wantUnknown, wantPrunable := keySet{}, keySet{}, keySet{}, keySet{}
	counts := map[string]int64{}
	// lines by job, oldest first, from the lines bucket itself (not the
	// seqs the job records list, which are checked against it).
	byJob := map[string][]Line{}

	err := tx.Bucket(bucketLines).ForEach(func(k, val []byte) error {
		var ln Line
		if err := decodeLine(val, &ln); err != nil {
			v.add("line %x: undecodable: %v", k, err)
			return nil
		}
		if len(k) != 8 || binary.BigEndian.Uint64(k) != ln.Seq {
			v.add("line %x: key does not match seq %d", k, ln.Seq)
		}
		byJob[ln.MessageID] = append(byJob[ln.MessageID], ln)
		for _, ck := range lineCounters(&ln) {
			counts[ck]++
		}
		return nil
	})
	if err != nil {
		return err
	}

	err = tx.Bucket(bucketJobs).ForEach(func(k, val []byte) error {
		id := string(k)
		var j Job
		seqs, err := decodeJobRecord(val, &j)
		if err != nil {
			v.add("job %s: undecodable: %v", id, err)
			return nil
		}
		counts[counterJobs]++
		for _, ck := range jobCounters(&j) {
			counts[ck]++
		}
		if j.MessageID != id {
			v.add("job %s: stored under key %q", j.MessageID, id)
		}
		if !j.State.Valid() {
			v.add("job %s: unknown state %q", id, j.State)
		}
		ik := keysOf(&j)
		wantState.add(ik.state)
		if ik.due != nil {
			wantDue.add(ik.due)
		}
		if ik.unknown != nil {
			wantUnknown.add(ik.unknown)
		}
		if ik.prunable != nil {
			wantPrunable.add(ik.prunable)
		}
		lines := byJob[id]
		delete(byJob, id)
		checkLineSeqs(v, id, seqs, lines)
		checkJob(v, &j, lines)
		return nil
	})
	if err != nil {
		return err
	}
	orphans := make([]string, 0, len(byJob))
	for id := range byJob {
		orphans = append(orphans, id)
	}
	sort.Strings(orphans)
	for _, id := range orphans {
		v.add("job %s: %d lines but no job", id, len(byJob[id]))
	}

	compareIndex(tx, v, bucketState, wantState, func(k []byte) string {
		s, id, _ := bytes.Cut(k, []byte{0})
		return fmt.Sprintf("job %s in state %s", id, s)
	})
	compareIndex(tx, v, bucketDue, wantDue, func(k []byte) string {
		return fmt.Sprintf("job %s due at %s", k[min(8, len(k)):], timeIDKeyTime(k))
	})
	compareIndex(tx, v, bucketUnknown, wantUnknown, func(k []byte) string {
		return fmt.Sprintf("job %s unknown since %s", k[min(8, len(k)):], timeIDKeyTime(k))
	})
	compareIndex(tx, v, bucketPrunable, wantPrunable, func(k []byte) string {
		return fmt.Sprintf("job %s prunable since %s", k[min(8, len(k)):], timeIDKeyTime(k))
	})

	got, err := readCounters(tx)
	if err != nil {
		v.add("counters: %v", err)
		return nil
	}
	for _, k := range unionKeys(got, counts) {
		if got[k] != counts[k] {
			v.add("counter %q is %d, recount says %d", k, got[k], counts[k])
		}
	}
	return nil
}

// checkJob checks one job against its lines (oldest first).
func checkJob(v *violations, j *Job, lines []Line) {
	if f := Fold(lines); f != j.State {
		v.add("job %s: state %q but its lines fold to %q", j.MessageID, j.State, f)
	}
	effects, resolvedAfterSecond := 0, false
	var prev State
	for _, ln := range lines {
		if ln.State != "" {
			// A pruned job kept only its effect, resolved and last state
			// lines: the steps between them are gone, not wrong.
			if prev != "" && j.PrunedAt.IsZero() && !Allowed(prev, ln.State) {
				v.add("job %s: line %d moves %s → %s, not in the table of allowed transitions", j.MessageID, ln.Seq, prev, ln.State)
			}
			prev = ln.State
		}
		if ln.Attempt > j.Attempts {
			v.add("job %s: line %d has attempt %d, job only %d attempts", j.MessageID, ln.Seq, ln.Attempt, j.Attempts)
		}
		switch ln.Kind {
		case KindEffect:
			effects++
		case KindResolved:
			if effects >= 2 {
				resolvedAfterSecond = true
			}
		}
	}
	if j.Effects != effects {
		v.add("job %s: effects %d but %d effect lines", j.MessageID, j.Effects, effects)
	}
	if effects > 1 && j.State != StateReview && !resolvedAfterSecond {
		v.add("job %s: %d effect lines in state %q (duplicate not under review)", j.MessageID, effects, j.State)
	}
}

// checkLineSeqs checks that the seqs a job's record lists are exactly the
// seqs of its lines (oldest first, from the lines bucket).
func checkLineSeqs(v *violations, id string, seqs seqList, lines []Line) {
	i := 0
	_, err := seqs.each(func(seq uint64) bool {
		for i < len(lines) && lines[i].Seq < seq {
			v.add("job %s: line %d is not listed in its record", id, lines[i].Seq)
			i++
		}
		if i < len(lines) && lines[i].Seq == seq {
			i++
		} else {
			v.add("job %s: its record lists line %d, which is not one of its lines", id, seq)
		}
		return true
	})
	if err != nil {
		v.add("job %s: its record's line seqs: %v", id, err)
		return
	}
	for ; i < len(lines); i++ {
		v.add("job %s: line %d is not listed in its record", id, lines[i].Seq)
	}
}

// compareIndex reports entries missing from bucket name and entries it holds
// that no job implies.
func compareIndex(tx *bolt.Tx, v *violations, name []byte, want keySet, describe func([]byte) string) {
	have := keySet{}
	_ = tx.Bucket(name).ForEach(func(k, _ []byte) error {
		have.add(k)
		if _, ok := want[string(k)]; !ok {
			v.add("%s index: stray entry (%s)", name, describe(k))
		}
		return nil
	})
	missing := make([]string, 0)
	for k := range want {
		if _, ok := have[k]; !ok {
			missing = append(missing, k)
		}
	}
	sort.Strings(missing)
	for _, k := range missing {
		v.add("%s index: missing entry (%s)", name, describe([]byte(k)))
	}
}

func unionKeys(a, b map[string]int64) []string {
	keys := make([]string, 0, len(a)+len(b))
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys
}
