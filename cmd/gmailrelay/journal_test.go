package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gmailrelay/gmailrelay/internal/testenv"
)

// legacyFixture copies the gzipped fixture files name (and name-journal,
// when journal) of acceptlog/testdata/legacy — written by the gmailrelay
// before this one, a kill -9 after 40 jobs — into a new directory.
func legacyFixture(t *testing.T, name string, journal bool) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "r.db")
	files := map[string]string{name: dst}
	if journal {
		files[name+"-journal"] = dst + "-journal"
	}
	for src, to := range files {
		f, err := os.Open(filepath.Join("..", "..", "acceptlog", "testdata", "legacy", src+".gz"))
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
		if err := os.WriteFile(to, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// A relay started on a file an older gmailrelay left without a clean stop
// replays that version's journal once, serves every job it held, says so
// in a warning, and leaves no journal behind.
func TestServeWarnsWhenItReplaysTheJournal(t *testing.T) {
	crashed := legacyFixture(t, "crash.db", true)
	b, err := os.ReadFile(filepath.Join("..", "..", "acceptlog", "testdata", "legacy", "crash.json"))
	if err != nil {
		t.Fatal(err)
	}
	var want map[string]int
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	c, err := parseServeFlags([]string{"--addr", "127.0.0.1:0", "--data", crashed}, env(nil), &testenv.LockedBuffer{})
	if err != nil {
		t.Fatal(err)
	}
	logs := &testenv.LockedBuffer{}
	rs, err := startRelay(context.Background(), c, newLogger(logs, "json", "info"))
	if err != nil {
		t.Fatal(err)
	}
	defer rs.close(context.Background())
	if !strings.Contains(logs.String(), `"level":"warn"`) || !strings.Contains(logs.String(), "replayed the ") || !strings.Contains(logs.String(), crashed+"-journal") {
		t.Errorf("no warning about the replayed journal in:\n%s", logs.String())
	}
	for id, n := range want {
		lines, err := rs.log.JobLines(context.Background(), id)
		if err != nil || len(lines) != n {
			t.Errorf("job %s: %d lines, %v; want the %d the old relay acknowledged", id, len(lines), err, n)
		}
	}
	if len(want) != 40 {
		t.Errorf("the fixture lists %d jobs, want 40", len(want))
	}
	if _, err := os.Stat(crashed + "-journal"); err == nil {
		t.Error("the journal is still there after its replay")
	}
	entries, _ := os.ReadDir(filepath.Dir(crashed))
	var names bytes.Buffer
	for _, e := range entries {
		names.WriteString(e.Name() + " ")
	}
	if len(entries) != 1 {
		t.Errorf("files beside the log: %s, want the log alone", names.String())
	}
}
