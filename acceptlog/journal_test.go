package acceptlog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// A record decodes to the ops it was built from; anything else read from a
// journal either decodes to ops that encode back to the same ops or is
// refused, and never panics.
func FuzzJournalRecord(f *testing.F) {
	var r opRecorder
	r.reset()
	r.put(wJobs, []byte("<a@b>"), []byte("job"))
	r.delete(wState, []byte("k"))
	r.sequence(wLines, 42)
	r.put(wCounters, []byte("x"), nil)
	f.Add(bytes.Clone(r.record()))
	f.Add([]byte{})
	f.Add([]byte{3, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		for len(b) > 0 {
			payload, n, ok := nextRecord(b)
			if !ok {
				return
			}
			b = b[n:]
			var ops []journalOp
			if err := decodeOps(payload, writeBucketNames[:], func(op journalOp) error { ops = append(ops, op); return nil }); err != nil {
				continue
			}
			var re opRecorder
			re.reset()
			for _, op := range ops {
				switch op.kind {
				case opPut:
					re.put(op.bucket, op.key, op.value)
				case opDelete:
					re.delete(op.bucket, op.key)
				case opSequence:
					re.sequence(op.bucket, op.seq)
				}
			}
			p2, _, ok := nextRecord(re.record())
			if len(ops) == 0 {
				continue // an empty payload is not a record
			}
			if !ok {
				t.Fatalf("re-encoded record does not read back")
			}
			var ops2 []journalOp
			if err := decodeOps(p2, writeBucketNames[:], func(op journalOp) error { ops2 = append(ops2, op); return nil }); err != nil {
				t.Fatalf("re-encoded ops: %v", err)
			}
			if !reflect.DeepEqual(normOps(ops), normOps(ops2)) {
				t.Fatalf("ops %v re-decode as %v", ops, ops2)
			}
		}
	})
}

// normOps makes empty and nil slices alike.
func normOps(ops []journalOp) []journalOp {
	out := make([]journalOp, len(ops))
	for i, op := range ops {
		op.key, op.value = append([]byte{}, op.key...), append([]byte{}, op.value...)
		out[i] = op
	}
	return out
}

// A header is read back as written, and a header cut short or with any
// byte changed is not a header.
func FuzzJournalHeader(f *testing.F) {
	meta, txid := testMetaPage()
	f.Add(encodeJournalHeader(journalHeader{version: journalVersion, pageSize: len(meta), txid: txid, meta: meta}), 0, byte(0))
	f.Add(encodeJournalHeader(journalHeader{version: journalVersion, pageSize: len(meta), txid: txid, meta: meta}), 100, byte(1))
	f.Fuzz(func(t *testing.T, b []byte, at int, flip byte) {
		h, n, err := decodeJournalHeader(b)
		if err != nil {
			return
		}
		if got := encodeJournalHeader(h); !bytes.Equal(got, b[:n]) {
			t.Fatalf("header re-encodes differently")
		}
		if flip != 0 && at >= 0 && at < n {
			c := bytes.Clone(b)
			c[at] ^= flip
			if _, _, err := decodeJournalHeader(c); err == nil {
				t.Fatalf("header with byte %d flipped still reads", at)
			}
		}
	})
}

// testMetaPage returns a valid bbolt meta page, taken from a real file,
// and its transaction.
func testMetaPage() ([]byte, uint64) {
	path := filepath.Join(os.TempDir(), "acceptlog-meta-"+time.Now().Format("150405.000000000")+".db")
	defer os.Remove(path)
	l, err := Open(path, Options{Synced: true})
	if err != nil {
		panic(err)
	}
	defer l.Close()
	var id uint64
	_ = l.db.View(func(tx *bolt.Tx) error { id = uint64(tx.ID()); return nil })
	p, err := readMetaPage(path, l.db.Info().PageSize, id)
	if err != nil {
		panic(err)
	}
	return p, id
}

// After a kill -9 the page cache holds the file and the journal as they
// were: a copy of both, opened, holds exactly the live log's content, at
// any point between checkpoints (several happen on the way).
func TestJournalProcessCrashKeepsEverything(t *testing.T) {
	setVar(t, &checkpointGroups, 25)
	l, path, clock := newJournalLog(t)
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 4 {
		workload(t, l, clock, "crash"+string(rune('a'+round)), 9, rng)
		dst := filepath.Join(t.TempDir(), "copy.db")
		copyFiles(t, path, dst)
		if _, records, _, _ := readJournal(journalPath(dst)); len(records) == 0 {
			t.Fatalf("round %d: the copied journal has no records: the test would not replay anything", round)
		}
		if d := dumpLog(t, l).diff(openDump(t, dst)); d != "" {
			t.Fatalf("round %d: recovered copy differs from the live log: %s", round, d)
		}
	}
	if l.checkpoints.Load() < 3 {
		t.Errorf("%d checkpoints, want several", l.checkpoints.Load())
	}
	verifyJournal(t, l)
}

// A failure while the journal is written (before its sync) or after it is
// durable (before bbolt's commit) stops every later write, with an error
// naming the cause; what comes back after a crash is what was
// acknowledged, plus, in the second case, the group the error said is
// durable.
func TestJournalFaultStopsWrites(t *testing.T) {
	for _, tc := range []struct {
		stage        string
		want         string // in the error
		failedIsBack bool
	}{
		{"sync", "append to journal", false},
		{"commit", "replayed when the log is opened again", true},
	} {
		t.Run(tc.stage, func(t *testing.T) {
			l, path, clock := newJournalLog(t)
			ctx := context.Background()
			workload(t, l, clock, "before", 5, rand.New(rand.NewPCG(3, 4)))
			acked := dumpLog(t, l)
			injected := errors.New("injected " + tc.stage + " failure")
			l.fault = func(stage string) error {
				if stage == tc.stage {
					return injected
				}
				return nil
			}
			id := "<failed@journal.example>"
			newJob := func(cur *Job) (Change, error) {
				j := Job{MessageID: id, Channel: "default", State: StateForwarding, Attempts: 1}
				return Change{Job: &j, Lines: []Line{{Kind: KindForwarding, Attempt: 1, State: StateForwarding}}}, nil
			}
			_, _, err := l.Mutate(ctx, id, newJob)
			if !errors.Is(err, injected) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Mutate error = %v, want the injected failure and %q", err, tc.want)
			}
			l.fault = nil
			if _, err := l.Get(ctx, id); !errors.Is(err, ErrNotFound) {
				t.Fatalf("Get of the failed job: %v, want ErrNotFound (readers never see what is not committed)", err)
			}
			_, _, err = l.Mutate(ctx, "<later@journal.example>", newJob)
			if !errors.Is(err, injected) || !strings.Contains(err.Error(), "writes refused") {
				t.Fatalf("later Mutate error = %v, want writes refused naming the injected failure", err)
			}
			if _, err := l.PruneSends(ctx, *clock); !errors.Is(err, injected) {
				t.Fatalf("later PruneSends error = %v, want the injected failure", err)
			}

			dst := filepath.Join(t.TempDir(), "copy.db")
			copyFiles(t, path, dst)
			got := openDump(t, dst)
			if err := l.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			if _, err := os.Stat(journalPath(path)); err != nil {
				t.Fatalf("the journal of a failed log must stay for the next Open: %v", err)
			}
			reopened := openDump(t, path)
			if d := got.diff(reopened); d != "" {
				t.Errorf("reopened original differs from the crash copy: %s", d)
			}
			d := acked.diff(got)
			if tc.failedIsBack {
				if d == "" || !strings.Contains(got["jobs"], "failed@journal.example") {
					t.Fatalf("the group made durable before the failed commit is not back: %s", d)
				}
				return
			}
			if d != "" {
				t.Fatalf("recovered content differs from what was acknowledged: %s", d)
			}
		})
	}
}

// A torn or corrupt last record (the group being written when the machine
// stopped, never acknowledged) ends the replay: the state before it comes
// back.
func TestJournalTornTail(t *testing.T) {
	l, path, clock := newJournalLog(t)
	rng := rand.New(rand.NewPCG(5, 6))
	workload(t, l, clock, "torn", 6, rng)
	before := dumpLog(t, l)
	jb, err := os.ReadFile(journalPath(path))
	if err != nil {
		t.Fatal(err)
	}
	workload(t, l, clock, "last", 1, rng) // the forward: one group
	after := dumpLog(t, l)
	whole, err := os.ReadFile(journalPath(path))
	if err != nil {
		t.Fatal(err)
	}
	start, end := recordsEnd(t, jb), recordsEnd(t, whole)
	if end <= start+recordHeaderSize {
		t.Fatal("no record appended")
	}
	// The first group of "last" is its forward; the rest of that call
	// (the outcome) is a second record: cut inside the first.
	_, n, ok := nextRecord(whole[start:])
	if !ok {
		t.Fatal("last record unreadable")
	}
	cuts := []int{1, recordHeaderSize - 1, recordHeaderSize, n - 1}
	for range 5 {
		cuts = append(cuts, 1+rng.IntN(n-1))
	}
	check := func(name string, journal []byte) {
		t.Helper()
		dst := filepath.Join(t.TempDir(), "copy.db")
		copyFiles(t, path, dst)
		if err := os.WriteFile(journalPath(dst), journal, 0o600); err != nil {
			t.Fatal(err)
		}
		if d := before.diff(openDump(t, dst)); d != "" {
			t.Errorf("%s: recovered state is not the one before the torn record: %s", name, d)
		}
	}
	for _, c := range cuts {
		check("cut at "+strconv.Itoa(c), whole[:start+c])
		// The record torn inside the zeros written ahead of it (the
		// file keeps its length; what was not written reads as zeros).
		torn := bytes.Clone(whole)
		clear(torn[start+c : start+n])
		check("torn over zeros at "+strconv.Itoa(c), torn)
	}
	for range 4 {
		b := bytes.Clone(whole[:start+n])
		b[start+rng.IntN(n)] ^= byte(1 + rng.IntN(255))
		check("flipped byte", b)
	}
	// And the whole journal gives everything.
	dst := filepath.Join(t.TempDir(), "whole.db")
	copyFiles(t, path, dst)
	if d := after.diff(openDump(t, dst)); d != "" {
		t.Errorf("whole journal: %s", d)
	}
}

// recordsEnd returns where the valid records of the journal b end (the
// zeros written ahead of them, if any, start there).
func recordsEnd(t *testing.T, b []byte) int {
	t.Helper()
	_, n, err := decodeJournalHeader(b)
	if err != nil {
		t.Fatal(err)
	}
	for {
		_, k, ok := nextRecord(b[n:])
		if !ok {
			return n
		}
		n += k
	}
}

// The journal's records are written over zeros the file already holds,
// so a commit's fdatasync does not change the file's length; a record
// that passes the end brings zeros up to the next chunk, in its own sync.
func TestJournalWritesRecordsOverZeros(t *testing.T) {
	setVar(t, &journalChunk, 64<<10)
	l, path, clock := newJournalLog(t)
	length := func() int64 {
		t.Helper()
		fi, err := os.Stat(journalPath(path))
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	if got := length(); got != journalChunk {
		t.Fatalf("new journal is %d bytes, want one chunk (%d)", got, journalChunk)
	}
	rng := rand.New(rand.NewPCG(11, 12))
	grew := false
	for i := 0; l.j.size < 3*journalChunk; i++ {
		before := length()
		workload(t, l, clock, "z"+strconv.Itoa(i), 1, rng)
		got := length()
		switch {
		case got != l.j.alloc:
			t.Fatalf("journal is %d bytes, the log believes %d", got, l.j.alloc)
		case got%journalChunk != 0 || got <= l.j.size || got > l.j.size+journalChunk:
			t.Fatalf("journal is %d bytes for %d of records, want the next multiple of %d", got, l.j.size, journalChunk)
		case got != before:
			grew = true
		}
		b, err := os.ReadFile(journalPath(path))
		if err != nil {
			t.Fatal(err)
		}
		if end := recordsEnd(t, b); int64(end) != l.j.size {
			t.Fatalf("records end at %d, the log wrote %d", end, l.j.size)
		}
		if bytes.ContainsFunc(b[l.j.size:], func(r rune) bool { return r != 0 }) {
			t.Fatal("bytes after the last record are not zeros")
		}
	}
	if !grew {
		t.Fatal("the journal never grew: the test proved nothing")
	}
	// What a crash leaves (records, then zeros) replays in full.
	want := dumpLog(t, l)
	dst := filepath.Join(t.TempDir(), "copy.db")
	copyFiles(t, path, dst)
	if d := want.diff(openDump(t, dst)); d != "" {
		t.Fatalf("replayed over zeros: %s", d)
	}
}

// A clean Close syncs the file and removes the journal: the file opens
// with any bbolt (and so any gmailrelay) as it is.
func TestJournalCleanCloseRemovesJournal(t *testing.T) {
	l, path, clock := newJournalLog(t)
	workload(t, l, clock, "close", 5, rand.New(rand.NewPCG(7, 8)))
	want := dumpLog(t, l)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(journalPath(path)); !os.IsNotExist(err) {
		t.Fatalf("journal after a clean Close: %v, want none", err)
	}
	if d := want.diff(openDump(t, path)); d != "" {
		t.Fatalf("reopened: %s", d)
	}
}

// The offline tools (BackupFile, Compact) recover a file left with a
// journal before reading it: a backup of a crashed relay's file holds
// every acknowledged write.
func TestOfflineToolsRecoverTheJournal(t *testing.T) {
	l, path, clock := newJournalLog(t)
	workload(t, l, clock, "offline", 8, rand.New(rand.NewPCG(9, 10)))
	want := dumpLog(t, l)
	dir := t.TempDir()
	crashed := filepath.Join(dir, "crashed.db")
	copyFiles(t, path, crashed)
	backup := filepath.Join(dir, "backup.db")
	if _, err := BackupFile(crashed, backup); err != nil {
		t.Fatalf("BackupFile: %v", err)
	}
	if d := want.diff(openDump(t, backup)); d != "" {
		t.Errorf("backup of a crashed file: %s", d)
	}
	crashed2 := filepath.Join(dir, "crashed2.db")
	copyFiles(t, path, crashed2)
	compacted := filepath.Join(dir, "compact.db")
	if _, _, err := Compact(crashed2, compacted); err != nil {
		t.Fatalf("Compact: %v", err)
	}
	if d := want.diff(openDump(t, compacted)); d != "" {
		t.Errorf("compaction of a crashed file: %s", d)
	}
}

// A journal whose checkpoint is newer than the file (a backup restored
// over a crashed relay's file, its journal left behind) is refused, not
// written over the file.
func TestJournalOfAnotherFileIsRefused(t *testing.T) {
	dir := t.TempDir()
	old := filepath.Join(dir, "old.db")
	ol, err := Open(old, Options{Synced: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := ol.Close(); err != nil {
		t.Fatal(err)
	}
	l, path, clock := newJournalLog(t)
	setVar(t, &checkpointGroups, 5)
	workload(t, l, clock, "newer", 10, rand.New(rand.NewPCG(11, 12)))
	restored := filepath.Join(dir, "restored.db")
	copyFiles(t, old, restored)
	jb, err := os.ReadFile(journalPath(path))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(journalPath(restored), jb, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(restored, Options{}); err == nil || !strings.Contains(err.Error(), "remove the journal") {
		t.Fatalf("Open of a file with another file's journal: %v, want a refusal naming the journal", err)
	}
}

// A file written without a journal (an older gmailrelay, or synced mode)
// opens and journals from then on; a journaled file opens in synced mode.
func TestJournalAndSyncedFilesOpenEachOther(t *testing.T) {
	path := filepath.Join(t.TempDir(), "accept.db")
	clock := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	now := func() time.Time { return clock }
	rng := rand.New(rand.NewPCG(13, 14))
	for i, synced := range []bool{true, false, true, false} {
		l, err := Open(path, Options{Now: now, Synced: synced})
		if err != nil {
			t.Fatal(err)
		}
		if (l.j == nil) != synced {
			t.Fatalf("open %d: journal %v, want %v", i, l.j != nil, !synced)
		}
		workload(t, l, &clock, "mode"+strconv.Itoa(i), 4, rng)
		want := dumpLog(t, l)
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		if d := want.diff(openDump(t, path)); d != "" {
			t.Fatalf("open %d: %s", i, d)
		}
	}
}

// A mapping the system refuses (here: larger than bbolt maps at all) does
// not keep the log from opening: it opens without its journal, with
// bbolt's own synced commits, says so, and a journal left by an unclean
// stop is still replayed.
func TestJournalOpensSyncedWhenTheMappingIsRefused(t *testing.T) {
	l, path, clock := newJournalLog(t)
	workload(t, l, clock, "map", 6, rand.New(rand.NewPCG(11, 12)))
	want := dumpLog(t, l)
	crashed := filepath.Join(t.TempDir(), "crashed.db")
	copyFiles(t, path, crashed)
	setVar(t, &minMapping, 1<<50) // past bbolt's largest mapping
	var said []string
	c, err := Open(crashed, Options{Logf: func(format string, args ...any) {
		said = append(said, fmt.Sprintf(format, args...))
	}})
	if err != nil {
		t.Fatalf("open with a refused mapping: %v", err)
	}
	defer c.Close()
	if c.j != nil || !strings.Contains(strings.Join(said, "\n"), "without its journal") {
		t.Fatalf("journal %v, log said %q: want no journal and a message saying so", c.j != nil, said)
	}
	if d := want.diff(dumpLog(t, c)); d != "" {
		t.Fatalf("the replayed log differs: %s", d)
	}
	if _, err := os.Stat(journalPath(crashed)); !os.IsNotExist(err) {
		t.Fatalf("journal after the replay: %v, want none", err)
	}
}
