package acceptlog

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gmailrelay/gmailrelay"
	bolt "go.etcd.io/bbolt"
)

// What an older gmailrelay left — a journal beside its file — is replayed
// only when every record checks out and it belongs to the file; otherwise
// Open and OpenReadOnly refuse it, naming the journal and the damage, and
// neither the file nor the journal changes. The fixtures are in
// testdata/legacy: crash.db and crash.db-journal (a kill -9 after 40 jobs,
// crash.json), clean.db (a clean stop, 60 jobs) and stale-src.db-journal
// (a journal from an earlier crash of that relay).

// legacyFiles gunzips the fixtures files (name in testdata/legacy → name
// in the new directory) and returns the directory.
func legacyFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for src, dst := range files {
		f, err := os.Open(filepath.Join("testdata", "legacy", src+".gz"))
		if err != nil {
			t.Fatal(err)
		}
		zr, err := gzip.NewReader(f)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(zr)
		_ = f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, dst), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// dirState is every file of a directory and its bytes.
func dirState(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	s := map[string][]byte{}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		s[e.Name()] = b
	}
	return s
}

// wantDirUnchanged fails unless dir holds exactly the files of before,
// byte for byte.
func wantDirUnchanged(t *testing.T, dir string, before map[string][]byte, after string) {
	t.Helper()
	now := dirState(t, dir)
	for name, b := range before {
		switch got, ok := now[name]; {
		case !ok:
			t.Errorf("after %s: %s is gone", after, name)
		case !bytes.Equal(got, b):
			t.Errorf("after %s: %s changed (%d bytes, was %d)", after, name, len(got), len(b))
		}
	}
	for name := range now {
		if _, ok := before[name]; !ok {
			t.Errorf("after %s: %s appeared", after, name)
		}
	}
}

// journalRecords returns the offset of each record of the journal b.
func journalRecords(t *testing.T, b []byte) []int {
	t.Helper()
	_, off, err := decodeJournalHeader(b)
	if err != nil {
		t.Fatal(err)
	}
	var offs []int
	for !allZero(b[off:]) {
		_, n, ok := nextRecord(b[off:])
		if !ok {
			t.Fatalf("the fixture's journal: record %d at %d does not check out", len(offs)+1, off)
		}
		offs = append(offs, off)
		off += n
	}
	return offs
}

// wantRefused opens the log at path with Open and then with OpenReadOnly:
// both must fail saying each of says, and leave the directory as it was.
func wantRefused(t *testing.T, path string, says ...string) {
	t.Helper()
	dir := filepath.Dir(path)
	before := dirState(t, dir)
	l, err := Open(path, Options{})
	if err == nil {
		_ = l.Close()
		t.Fatal("Open accepted the file")
	}
	for _, s := range says {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("Open error = %q\nwant it to say %q", err, s)
		}
	}
	wantDirUnchanged(t, dir, before, "a refused Open")
	l, err = OpenReadOnly(path)
	if err == nil {
		_ = l.Close()
		t.Fatal("OpenReadOnly (gmailrelay check) accepted the file")
	}
	for _, s := range says {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("OpenReadOnly error = %q\nwant it to say %q", err, s)
		}
	}
	wantDirUnchanged(t, dir, before, "a refused OpenReadOnly")
}

// TestLegacyJournalDamageIsRefused: a journal with a flipped byte in its
// second record, a bad header, or cut in the middle of a record is not
// replayed up to the damage (which would drop every commit after it):
// the open fails naming the journal, the record and its offset, and
// neither file changes.
func TestLegacyJournalDamageIsRefused(t *testing.T) {
	tests := []struct {
		name   string
		damage func(t *testing.T, j []byte) ([]byte, []string)
	}{
		{"byte flipped in record 2", func(t *testing.T, j []byte) ([]byte, []string) {
			offs := journalRecords(t, j)
			if len(offs) < 3 {
				t.Fatalf("the fixture's journal has %d records, want 3 or more", len(offs))
			}
			at := offs[1] + recordHeaderSize + (offs[2]-offs[1]-recordHeaderSize)/2
			j[at] ^= 0x40
			return j, []string{"record 2 at offset " + fmt.Sprint(offs[1]), "fails its checksum"}
		}},
		{"bad header", func(t *testing.T, j []byte) ([]byte, []string) {
			j[len(journalMagic)+20] ^= 0x01
			return j, []string{"its header (offset 0) does not check out"}
		}},
		{"cut in the middle of a record", func(t *testing.T, j []byte) ([]byte, []string) {
			offs := journalRecords(t, j)
			last := len(offs) / 2
			return j[:offs[last]+recordHeaderSize+3], []string{fmt.Sprintf("record %d at offset %d is cut short", last+1, offs[last])}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := legacyFiles(t, map[string]string{"crash.db": "r.db", "crash.db-journal": "r.db-journal"})
			path := filepath.Join(dir, "r.db")
			j, says := tc.damage(t, readFileT(t, journalPath(path)))
			if err := os.WriteFile(journalPath(path), j, 0o600); err != nil {
				t.Fatal(err)
			}
			wantRefused(t, path, append(says, "journal "+journalPath(path), "nothing was replayed and the log file was not changed")...)
		})
	}
}

// TestLegacyJournalIntactIsReplayed: the same fixture, undamaged, opens
// with every job the old relay acknowledged and no file beside the log
// (the control of TestLegacyJournalDamageIsRefused).
func TestLegacyJournalIntactIsReplayed(t *testing.T) {
	dir := legacyFiles(t, map[string]string{"crash.db": "r.db", "crash.db-journal": "r.db-journal"})
	path := filepath.Join(dir, "r.db")
	var want map[string]int
	if err := json.Unmarshal(readFileT(t, filepath.Join("testdata", "legacy", "crash.json")), &want); err != nil {
		t.Fatal(err)
	}
	wantJobLines(t, path, want)
	if names := slices.Collect(maps.Keys(dirState(t, dir))); len(names) != 1 {
		t.Errorf("files beside the log after the replay: %v", names)
	}
}

// TestLegacyStaleJournalIsRefused: a cleanly stopped file beside a journal
// from an earlier crash (a restored backup, say) is refused as stale
// without a byte of either changing; with the journal moved away the file
// opens, converted, with all its 60 jobs.
func TestLegacyStaleJournalIsRefused(t *testing.T) {
	dir := legacyFiles(t, map[string]string{"clean.db": "r.db", "stale-src.db-journal": "r.db-journal"})
	path := filepath.Join(dir, "r.db")
	wantRefused(t, path, "journal "+journalPath(path), "it is stale", "nothing was replayed and the log file was not changed", "move the journal away")

	if err := os.Rename(journalPath(path), filepath.Join(t.TempDir(), "moved-journal")); err != nil {
		t.Fatal(err)
	}
	l, err := Open(path, Options{})
	if err != nil {
		t.Fatalf("Open without the stale journal: %v", err)
	}
	jobs, _, err := l.List(context.Background(), gmailrelay.ListOptions{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 60 {
		t.Errorf("%d jobs after the conversion, want the 60 of the cleanly stopped file", len(jobs))
	}
	if err := l.CheckFull(context.Background()); err != nil {
		t.Error(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if names := slices.Collect(maps.Keys(dirState(t, dir))); len(names) != 1 {
		t.Errorf("files beside the log: %v", names)
	}
}

// TestOpenRefusesWhatIsNotALog: serve's Open makes a new log only where no
// file exists. An empty file, a text file and a bbolt file without the
// log's buckets are refused as not a log, byte for byte as they were.
func TestOpenRefusesWhatIsNotALog(t *testing.T) {
	tests := []struct {
		name string
		make func(t *testing.T, path string)
		want string
	}{
		{"empty", func(t *testing.T, path string) { writeFileT(t, path, nil) }, "not a gmailrelay log (empty file)"},
		{"text", func(t *testing.T, path string) { writeFileT(t, path, bytes.Repeat([]byte("not a log\n"), 1000)) },
			"not a gmailrelay log (not a bbolt file"},
		{"bbolt file of something else", func(t *testing.T, path string) {
			db := openBoltT(t, path, nil)
			if err := db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket([]byte("other")); return err }); err != nil {
				t.Fatal(err)
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
		}, "not a gmailrelay log (a bbolt file without the log's buckets)"},
		{"empty bbolt file", func(t *testing.T, path string) {
			if err := openBoltT(t, path, nil).Close(); err != nil {
				t.Fatal(err)
			}
		}, "not a gmailrelay log (a bbolt file without the log's buckets)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "x.db")
			tc.make(t, path)
			before := dirState(t, filepath.Dir(path))
			l, err := Open(path, Options{})
			if err == nil {
				_ = l.Close()
				t.Fatal("Open made a log of it")
			}
			if !errors.Is(err, ErrNotALog) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path) {
				t.Errorf("Open error = %q, want ErrNotALog saying %q and naming the file", err, tc.want)
			}
			wantDirUnchanged(t, filepath.Dir(path), before, "a refused Open")
		})
	}
}

// wantJobLines opens the log at path and fails unless it holds exactly
// the jobs of want, each with its number of lines.
func wantJobLines(t *testing.T, path string, want map[string]int) {
	t.Helper()
	l, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	jobs, _, err := l.List(ctx, gmailrelay.ListOptions{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != len(want) {
		t.Errorf("%d jobs, want %d", len(jobs), len(want))
	}
	for id, n := range want {
		lines, err := l.JobLines(ctx, id)
		if err != nil || len(lines) != n {
			t.Errorf("job %s: %d lines, %v; want %d", id, len(lines), err, n)
		}
	}
}

func readFileT(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeFileT(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
