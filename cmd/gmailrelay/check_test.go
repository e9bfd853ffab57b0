package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	bolt "go.etcd.io/bbolt"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/acceptlog"
	"github.com/gmailrelay/gmailrelay/acceptlog/logtest"
	"github.com/gmailrelay/gmailrelay/pglog"
)

func seedLog(t *testing.T, plant func(l *acceptlog.Log)) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "accept.db")
	l, err := acceptlog.Open(path, acceptlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	id := "<a@x>"
	if _, _, err := l.Mutate(ctx, id, func(*gmailrelay.Job) (gmailrelay.Change, error) {
		j := gmailrelay.Job{MessageID: id, State: gmailrelay.StateSent, Attempts: 1, Effects: 1, Mailbox: "me", CreatedAt: time.Unix(1, 0)}
		return gmailrelay.Change{Job: &j, Raw: []byte("Message-ID: <a@x>\r\n\r\nhi\r\n"), Lines: []gmailrelay.Line{
			{Kind: gmailrelay.KindForwarding, Attempt: 1, State: gmailrelay.StateForwarding},
			{Kind: gmailrelay.KindEffect, Attempt: 1, State: gmailrelay.StateSent}}}, nil
	}); err != nil {
		t.Fatal(err)
	}
	if plant != nil {
		plant(l)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

func runCheckOn(args ...string) (int, string) {
	var out, errb bytes.Buffer
	code := runCheck(context.Background(), args, &out, &errb)
	return code, out.String() + errb.String()
}

func TestCheckCleanLogExitsZero(t *testing.T) {
	code, out := runCheckOn("--data", seedLog(t, nil))
	if code != 0 || !strings.Contains(out, "ok: 1 jobs") {
		t.Errorf("check = %d %q, want 0 and a summary", code, out)
	}
}

func TestCheckBadFlagsOrFileExitTwo(t *testing.T) {
	for _, args := range [][]string{{}, {"--nope"}, {"--data", filepath.Join(t.TempDir(), "missing.db")}} {
		if code, out := runCheckOn(args...); code != 2 {
			t.Errorf("check %v = %d %q, want 2", args, code, out)
		}
	}
}

// plant edits the stored job <a@x> behind the log's back (bbolt directly)
// and, when extra is set, appends a raw line with seq 99.
// The job is read through the log (its records are binary) and written
// back as JSON, the older form the log still reads; a JSON record lists no
// line seqs, so check also finds the job's lines missing from its record.
// With edit nil the record is left as it is.
func plant(t *testing.T, path string, edit func(j map[string]any), extra map[string]any) {
	t.Helper()
	l, err := acceptlog.Open(path, acceptlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	stored, err := l.Get(context.Background(), "<a@x>")
	if cerr := l.Close(); err != nil || cerr != nil {
		t.Fatal(err, cerr)
	}
	storedJSON, err := json.Marshal(stored)
	if err != nil {
		t.Fatal(err)
	}
	// Records written behind the log's back, sealed and counted (the file
	// is not damaged, its rules are broken); JSON records as an older
	// gmailrelay wrote them are still read.
	err = acceptlog.Tamper(path, func(tx *acceptlog.Tamperer) error {
		var j map[string]any
		if err := json.Unmarshal(storedJSON, &j); err != nil {
			return err
		}
		if edit != nil {
			edit(j)
			v, _ := json.Marshal(j)
			if err := tx.Put("jobs", []byte("<a@x>"), v); err != nil {
				return err
			}
		}
		if extra != nil {
			extra["seq"], extra["message_id"] = 99, "<a@x>"
			v, _ := json.Marshal(extra)
			k := make([]byte, 8)
			binary.BigEndian.PutUint64(k, 99)
			return tx.Put("lines", k, v)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestCheckPlantedViolationsExitOne(t *testing.T) {
	cases := map[string]struct {
		edit  func(j map[string]any)
		extra map[string]any
		want  string
	}{
		"effects count":       {edit: func(j map[string]any) { j["effects"] = 3 }, want: "effects 3 but 1 effect lines"},
		"two effects":         {edit: func(j map[string]any) { j["effects"] = 2 }, extra: map[string]any{"kind": "effect", "attempt": 1, "state": "sent"}, want: "duplicate not under review"},
		"state is not a fold": {edit: func(j map[string]any) { j["state"] = "unknown" }, want: "fold"},
		"transition":          {extra: map[string]any{"kind": "state", "attempt": 1, "state": "forwarding"}, edit: func(j map[string]any) { j["state"] = "forwarding" }, want: "not in the table"},
		"index":               {edit: func(j map[string]any) { j["next_check_at"] = "2030-01-01T00:00:00Z" }, want: "due index"},
		"line not in its job": {extra: map[string]any{"kind": "search", "attempt": 1}, want: "job <a@x>: line 99 is not listed in its record"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			path := seedLog(t, nil)
			plant(t, path, tc.edit, tc.extra)
			code, out := runCheckOn("--data", path)
			if code != 1 || !strings.Contains(out, tc.want) {
				t.Errorf("check = %d %q, want 1 naming %q", code, out, tc.want)
			}
		})
	}
}

// TestCheckRefusesWhatIsNotALogAndLeavesItAlone: check exits 2 naming the
// file and why, and the file is exactly as it was: it neither answers
// "ok: 0 jobs" and turns an empty file into a fresh 16 MB log, nor dies of
// SIGBUS on a truncated one.
func TestCheckRefusesWhatIsNotALogAndLeavesItAlone(t *testing.T) {
	cases := []struct {
		name string
		file func(t *testing.T) []byte // nil: no file
		want string
	}{
		{"missing", nil, "not a gmailrelay log (no such file)"},
		{"empty", func(*testing.T) []byte { return []byte{} }, "not a gmailrelay log (empty file)"},
		{"truncated", func(t *testing.T) []byte {
			b, err := os.ReadFile(seedLog(t, nil))
			if err != nil {
				t.Fatal(err)
			}
			return b[:2*4096+100] // two pages: the meta pages, none of the tree
		}, "the log file is damaged: the meta page counts"},
		{"another bbolt file", func(t *testing.T) []byte {
			path := filepath.Join(t.TempDir(), "other.db")
			db, err := bolt.Open(path, 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}, "not a gmailrelay log (a bbolt file without the log's buckets)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "x.db")
			var before []byte
			if tc.file != nil {
				before = tc.file(t)
				if err := os.WriteFile(path, before, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			code, out := runCheckOn("--data", path)
			want := 2
			if tc.name == "truncated" {
				want = 1 // a damaged log, not something else
			}
			if code != want || !strings.Contains(out, path+": "+tc.want) {
				t.Errorf("check = %d %q, want %d and %q naming the file", code, out, want, tc.want)
			}
			// compact opens it the same way: refused, nothing written.
			var cout, cerr bytes.Buffer
			to := filepath.Join(t.TempDir(), "compacted.db")
			if code := runCompact(context.Background(), []string{"--data", path, "--to", to}, &cout, &cerr); code != 1 || !strings.Contains(cerr.String(), tc.want) {
				t.Errorf("compact = %d %q, want 1 and %q", code, cerr.String(), tc.want)
			}
			if _, err := os.Stat(to); err == nil {
				t.Error("compact wrote a copy of what is not a log")
			}
			after, err := os.ReadFile(path)
			if tc.file == nil {
				if err == nil {
					t.Error("check created the missing file")
				}
				return
			}
			if !bytes.Equal(before, after) {
				t.Errorf("check changed the file: %d bytes before, %d after", len(before), len(after))
			}
		})
	}
}

// TestCheckRawMessageRules: a job that may still be sent needs its raw
// message; a raw message needs its job.
func TestCheckRawMessageRules(t *testing.T) {
	cases := map[string]struct {
		edit func(tx *acceptlog.Tamperer) error
		want string
	}{
		"job without its message": {func(tx *acceptlog.Tamperer) error { return tx.Delete("bodies", []byte("<a@x>")) },
			"job <a@x>: in state sent, not pruned, and no raw message stored"},
		"message without its job": {func(tx *acceptlog.Tamperer) error { return tx.Put("bodies", []byte("<b@x>"), []byte("m")) },
			"raw message <b@x>: no job"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			path := seedLog(t, nil)
			if err := acceptlog.Tamper(path, tc.edit); err != nil {
				t.Fatal(err)
			}
			if code, out := runCheckOn("--data", path); code != 1 || !strings.Contains(out, tc.want) {
				t.Errorf("check = %d %q, want 1 naming %q", code, out, tc.want)
			}
		})
	}
}

// TestCheckDatabaseNeitherCreatesNorMigrates: check --database on a schema
// without the log exits 2 and leaves it empty (it does not migrate it
// and answer ok).
func TestCheckDatabaseNeitherCreatesNorMigrates(t *testing.T) {
	dbURL, schema := testDatabase(t)
	code, out := runCheckOn("--database", dbURL)
	if code != 2 || !strings.Contains(out, "not a gmailrelay log: no schema_migrations") {
		t.Errorf("check --database on an empty schema = %d %q, want 2 saying it is not a log", code, out)
	}
	conn, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(context.Background(), "SELECT count(*) FROM information_schema.tables WHERE table_schema = $1", schema).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("check created %d tables in the schema, want none", n)
	}
}

// TestCheckDatabaseJobWithoutItsMessage: on PostgreSQL too, check requires
// a job that may still be sent to have its raw message.
func TestCheckDatabaseJobWithoutItsMessage(t *testing.T) {
	dbURL, _ := testDatabase(t)
	ctx := context.Background()
	l, err := pglog.Open(ctx, dbURL, pglog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	logtest.SentJob(t, l, "<a@x>", time.Unix(1, 0))
	_ = l.Close()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DELETE FROM bodies"); err != nil {
		t.Fatal(err)
	}
	want := "job <a@x>: in state sent, not pruned, and no raw message stored"
	if code, out := runCheckOn("--database", dbURL); code != 1 || !strings.Contains(out, want) {
		t.Errorf("check --database = %d %q, want 1 naming %q", code, out, want)
	}
}
