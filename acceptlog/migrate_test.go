package acceptlog

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay"
	bolt "go.etcd.io/bbolt"
)

// A job record lists its lines' seqs; an older gmailrelay kept them in a
// job-lines index instead, and Open converts such a file. The old files
// are made here by hand from a log this code wrote, exactly as the older
// gmailrelay stored them: every job record without the seqs field (the
// binary form ended at PrunedAt) or, for every third job, in the JSON form
// of an older gmailrelay still, and the joblines bucket (message id, 0x00,
// big-endian seq → nothing) holding every line.

// oldLogContent writes a log at a new path through every write path
// (workload, plus a job with dozens of lines written by changes that leave
// the job as it is) and returns its path and every job's lines, read
// through this code.
func oldLogContent(t *testing.T) (string, map[string][]gmailrelay.Line) {
	t.Helper()
	l, path, clock := newJournalLog(t)
	workload(t, l, clock, "old", 12, rand.New(rand.NewPCG(21, 22)))
	ctx := context.Background()
	busy := "<old-0003@journal.example>"
	for i := range 30 {
		_, _, err := l.Mutate(ctx, busy, func(*gmailrelay.Job) (gmailrelay.Change, error) {
			return gmailrelay.Change{Lines: []gmailrelay.Line{{Kind: gmailrelay.KindSearch, Query: fmt.Sprintf("look %d", i)}}}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	want := map[string][]gmailrelay.Line{}
	jobs, _, err := l.List(ctx, gmailrelay.ListOptions{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		if want[j.MessageID], err = l.JobLines(ctx, j.MessageID); err != nil {
			t.Fatal(err)
		}
	}
	if len(want[busy]) < 30 {
		t.Fatalf("busy job has %d lines", len(want[busy]))
	}
	if err := l.Check(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return path, want
}

// makeOld turns the closed log at path into the form the code before step 2
// wrote; index says which lines go into the joblines bucket.
func makeOld(t *testing.T, path string, index func(seq uint64) bool) {
	t.Helper()
	if err := ToFormat1(path); err != nil {
		t.Fatal(err)
	}
	db := openBoltT(t, path, nil)
	defer db.Close()
	err := db.Update(func(tx *bolt.Tx) error {
		jobs := tx.Bucket(bucketJobs)
		recs := map[string][]byte{}
		i := 0
		err := jobs.ForEach(func(k, v []byte) error {
			var j gmailrelay.Job
			if err := decodeJob(v, &j); err != nil {
				return err
			}
			old := encodeJob(&j, nil)
			old = old[:len(old)-2] // no seqs field, no lease: the record ended at PrunedAt
			if i%3 == 0 {
				var err error
				if old, err = json.Marshal(&j); err != nil {
					return err
				}
			}
			recs[string(k)] = old
			i++
			return nil
		})
		if err != nil {
			return err
		}
		for k, v := range recs {
			if err := jobs.Put([]byte(k), v); err != nil {
				return err
			}
		}
		idx, err := tx.CreateBucket(bucketJobLinesV1)
		if err != nil {
			return err
		}
		return tx.Bucket(bucketLines).ForEach(func(k, v []byte) error {
			var ln gmailrelay.Line
			if err := decodeLine(v, &ln); err != nil {
				return err
			}
			if !index(ln.Seq) {
				return nil
			}
			key := binary.BigEndian.AppendUint64(append([]byte(ln.MessageID), 0), ln.Seq)
			return idx.Put(key, nil)
		})
	})
	if err != nil {
		t.Fatalf("make the file old: %v", err)
	}
}

// jobRecords returns every stored job record and whether the joblines
// bucket exists.
func jobRecords(t *testing.T, path string) (map[string]string, bool) {
	t.Helper()
	db := openBoltT(t, path, &bolt.Options{ReadOnly: true})
	defer db.Close()
	recs := map[string]string{}
	hasIndex := false
	err := db.View(func(tx *bolt.Tx) error {
		hasIndex = tx.Bucket(bucketJobLinesV1) != nil
		return tx.Bucket(bucketJobs).ForEach(func(k, v []byte) error {
			recs[string(k)] = string(v)
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return recs, hasIndex
}

// openLogged opens the log at path and returns what it logged.
func openLogged(t *testing.T, path string) (*Log, *strings.Builder) {
	t.Helper()
	var logged strings.Builder
	l, err := Open(path, Options{Now: func() time.Time { return t0 }, Logf: func(format string, args ...any) {
		fmt.Fprintf(&logged, format+"\n", args...)
	}})
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	return l, &logged
}

// wantLines fails t unless every job of l has the lines want says.
func wantLines(t *testing.T, l *Log, want map[string][]gmailrelay.Line) {
	t.Helper()
	ctx := context.Background()
	for id, lines := range want {
		got, err := l.JobLines(ctx, id)
		if err != nil {
			t.Fatalf("JobLines %s: %v", id, err)
		}
		if !reflect.DeepEqual(got, lines) {
			t.Errorf("JobLines %s: %d lines, want %d\n got %+v\nwant %+v", id, len(got), len(lines), got, lines)
		}
	}
}

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func TestOpenMovesTheJobLinesIndexIntoTheJobs(t *testing.T) {
	for _, tc := range []struct {
		name  string
		index func(seq uint64) bool
	}{
		{"old file", func(uint64) bool { return true }},
		// An older gmailrelay that reopened a migrated file created the
		// index again, empty, and indexed only its own new lines: the seqs
		// come from the lines, not from the index.
		{"index of a downgrade", func(seq uint64) bool { return seq%4 == 0 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			path, want := oldLogContent(t)
			makeOld(t, path, tc.index)
			if recs, hasIndex := jobRecords(t, path); !hasIndex || !strings.HasPrefix(recs["<old-0000@journal.example>"], "{") {
				t.Fatalf("the file is not old: index %v, records %q", hasIndex, recs)
			}

			l, logged := openLogged(t, path)
			if !strings.Contains(logged.String(), fmt.Sprintf("moved into the %d job records", len(want))) {
				t.Errorf("Open logged %q, want the migration of %d jobs", logged, len(want))
			}
			if err := l.Check(ctx); err != nil {
				t.Fatalf("Check after the migration: %v", err)
			}
			wantLines(t, l, want)
			// The migrated records take the log's writes: a line for a job
			// migrated from JSON, the retention pass.
			id := "<old-0000@journal.example>"
			_, lines, err := l.Mutate(ctx, id, func(*gmailrelay.Job) (gmailrelay.Change, error) {
				return gmailrelay.Change{Lines: []gmailrelay.Line{{Kind: gmailrelay.KindSearch, Query: "after"}}}, nil
			})
			if err != nil {
				t.Fatal(err)
			}
			want[id] = append(want[id], lines...)
			wantLines(t, l, want)
			if _, err := l.Prune(ctx, t0.Add(24*time.Hour), 0); err != nil {
				t.Fatal(err)
			}
			if err := l.Check(ctx); err != nil {
				t.Fatalf("Check after a prune of migrated jobs: %v", err)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			recs, hasIndex := jobRecords(t, path)
			if hasIndex {
				t.Error("the joblines bucket is still there")
			}
			for k, v := range recs {
				if v[0] != recordV2 {
					t.Errorf("job %s not in recordV2", k)
				}
			}

			// A second Open changes nothing and says nothing.
			l, logged = openLogged(t, path)
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			if logged.Len() != 0 {
				t.Errorf("second Open logged %q", logged)
			}
			if again, _ := jobRecords(t, path); !reflect.DeepEqual(again, recs) {
				t.Error("second Open rewrote job records")
			}
		})
	}
}

// A migration that cannot read the file fails Open and leaves the file as
// it was: the next Open tries again.
func TestFailedMigrationLeavesTheFile(t *testing.T) {
	path, _ := oldLogContent(t)
	makeOld(t, path, func(uint64) bool { return true })
	db := openBoltT(t, path, nil)
	err := db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketLines).Put(binary.BigEndian.AppendUint64(nil, 1<<40), []byte{0x7f})
	})
	if cerr := db.Close(); err != nil || cerr != nil {
		t.Fatal(err, cerr)
	}
	before, _ := jobRecords(t, path)
	if _, err := Open(path, Options{}); err == nil || !strings.Contains(err.Error(), "move the job-lines index into the jobs: decode line") {
		t.Fatalf("Open with an undecodable line = %v, want the migration's error", err)
	}
	if after, hasIndex := jobRecords(t, path); !hasIndex || !reflect.DeepEqual(after, before) {
		t.Errorf("the failed migration changed the file (index kept: %v)", hasIndex)
	}
}

// A journal left by the gmailrelay before step 2 (version 1, whose bucket 2
// is the job-lines index) is replayed into its old file, which Open then
// migrates: an upgrade after a crash loses nothing. A journal of a version
// this code does not know is refused, naming the version.
func TestOldJournalIsReplayedThenMigrated(t *testing.T) {
	ctx := context.Background()
	path, want := oldLogContent(t)
	makeOld(t, path, func(uint64) bool { return true })

	// The old code's journal: a checkpoint at the file as it is, then one
	// commit, lost from the file, that added a search line to a job
	// (the line, its joblines entry, the lines' sequence, the counters).
	id := "<old-0005@journal.example>"
	db := openBoltT(t, path, nil)
	var txid, seq uint64
	var rec opRecorder
	rec.reset()
	err := db.View(func(tx *bolt.Tx) error {
		txid, seq = uint64(tx.ID()), tx.Bucket(bucketLines).Sequence()+1
		ln := gmailrelay.Line{Seq: seq, Time: t0, MessageID: id, Kind: gmailrelay.KindSearch, Query: "journaled"}
		rec.put(1, seqKey(seq), encodeLine(&ln))
		rec.put(2, binary.BigEndian.AppendUint64(append([]byte(id), 0), seq), nil)
		rec.sequence(1, seq)
		want[id] = append(want[id], ln)
		counters := tx.Bucket(bucketCounters)
		for _, k := range lineCounters(&ln) {
			n, _ := decodeCount(counters.Get([]byte(k)))
			rec.put(9, []byte(k), appendCount(nil, n+1))
		}
		return nil
	})
	ps := db.Info().PageSize
	if cerr := db.Close(); err != nil || cerr != nil {
		t.Fatal(err, cerr)
	}
	meta, err := readMetaPage(path, ps, txid)
	if err != nil {
		t.Fatal(err)
	}
	journal := func(version uint32) []byte {
		return append(encodeJournalHeader(journalHeader{version: version, pageSize: ps, txid: txid, meta: meta}), rec.record()...)
	}
	if err := os.WriteFile(journalPath(path), journal(3), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(path, Options{}); err == nil || !strings.Contains(err.Error(), "journal version 3") || !strings.Contains(err.Error(), "another version") {
		t.Fatalf("Open with a version 3 journal = %v, want a refusal naming the version", err)
	}
	if err := os.WriteFile(journalPath(path), journal(1), 0o600); err != nil {
		t.Fatal(err)
	}

	l, logged := openLogged(t, path)
	defer l.Close()
	for _, w := range []string{"replayed the 1 commits", "job-lines index was moved", "given checksums"} {
		if !strings.Contains(logged.String(), w) {
			t.Errorf("Open logged %q, want %q", logged, w)
		}
	}
	if err := l.Check(ctx); err != nil {
		t.Fatalf("Check after the replay and the migration: %v", err)
	}
	wantLines(t, l, want)
	if got := bytes.Count([]byte(logged.String()), []byte("\n")); got != 3 {
		t.Errorf("Open logged %d lines: %q", got, logged)
	}
}
