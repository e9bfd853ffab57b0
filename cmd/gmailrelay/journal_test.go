package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay/acceptlog"
	"github.com/gmailrelay/gmailrelay/acceptlog/logtest"
	"github.com/gmailrelay/gmailrelay/internal/testenv"
)

// A relay started on a file its last process left without a clean stop
// replays the log's journal, serves the writes it held, and says so in a
// warning (the operator learns the last stop was not clean).
func TestServeWarnsWhenItReplaysTheJournal(t *testing.T) {
	live := filepath.Join(t.TempDir(), "live.db")
	l, err := acceptlog.Open(live, acceptlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const id = "<job-replayed@example.com>"
	logtest.SentJob(t, l, id, time.Now())
	// What a kill -9 leaves: the file and its journal as they are now.
	crashed := filepath.Join(t.TempDir(), "r.db")
	for _, suffix := range []string{"", "-journal"} {
		b, err := os.ReadFile(live + suffix)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(crashed+suffix, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
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
	if !strings.Contains(logs.String(), `"level":"warn"`) || !strings.Contains(logs.String(), "replayed 2 commits from journal "+crashed+"-journal") {
		t.Errorf("no warning about the replayed journal in:\n%s", logs.String())
	}
	if _, err := rs.log.Get(context.Background(), id); err != nil {
		t.Errorf("the job the journal held: %v", err)
	}
}
