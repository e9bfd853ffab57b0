package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/gmailrelay/gmailrelay/acceptlog"
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
	if _, _, err := l.Mutate(ctx, id, func(*acceptlog.Job) (acceptlog.Change, error) {
		j := acceptlog.Job{MessageID: id, State: acceptlog.StateSent, Attempts: 1, Effects: 1, Mailbox: "me", CreatedAt: time.Unix(1, 0)}
		return acceptlog.Change{Job: &j, Lines: []acceptlog.Line{
			{Kind: acceptlog.KindForwarding, Attempt: 1, State: acceptlog.StateForwarding},
			{Kind: acceptlog.KindEffect, Attempt: 1, State: acceptlog.StateSent}}}, nil
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
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("jobs"))
		var j map[string]any
		if err := json.Unmarshal(storedJSON, &j); err != nil {
			return err
		}
		if edit != nil {
			edit(j)
			v, _ := json.Marshal(j)
			if err := b.Put([]byte("<a@x>"), v); err != nil {
				return err
			}
		}
		if extra != nil {
			extra["seq"], extra["message_id"] = 99, "<a@x>"
			v, _ := json.Marshal(extra)
			k := make([]byte, 8)
			binary.BigEndian.PutUint64(k, 99)
			return tx.Bucket([]byte("lines")).Put(k, v)
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
