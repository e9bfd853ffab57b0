package acceptlog_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/acceptlog"
	"github.com/gmailrelay/gmailrelay/acceptlog/logtest"
)

// logWithJobs writes a closed log at a new path holding n forwarding jobs,
// each with its raw message, and returns the path.
func logWithJobs(t *testing.T, n int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "accept.db")
	l, err := acceptlog.Open(path, acceptlog.Options{Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		id := fmt.Sprintf("<%03d@x>", i)
		_, _, err := l.Mutate(context.Background(), id, func(*gmailrelay.Job) (gmailrelay.Change, error) {
			j := gmailrelay.Job{MessageID: id, Channel: "default", State: gmailrelay.StateForwarding, Attempts: 1, CreatedAt: t0}
			return gmailrelay.Change{Job: &j, Raw: bytes.Repeat([]byte("m"), 300),
				Lines: []gmailrelay.Line{{Kind: gmailrelay.KindReceived, Attempt: 1, State: gmailrelay.StateForwarding}}}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// editBolt changes the closed log file at path through bbolt directly.
func editBolt(t *testing.T, path string, edit func(tx *bolt.Tx) error) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(edit); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestOpenReadOnlyRefusesWhatIsNotALog: OpenReadOnly names the file and
// why, and leaves it exactly as it was (Open would have made a fresh log
// of an empty file and migrated an older one).
func TestOpenReadOnlyRefusesWhatIsNotALog(t *testing.T) {
	tests := []struct {
		name string
		make func(t *testing.T, path string)
		want string
	}{
		{"missing", func(*testing.T, string) {}, "not a gmailrelay log (no such file)"},
		{"empty", func(t *testing.T, path string) { write(t, path, nil) }, "not a gmailrelay log (empty file)"},
		{"directory", func(t *testing.T, path string) {
			if err := os.Mkdir(path, 0o700); err != nil {
				t.Fatal(err)
			}
		}, "not a gmailrelay log (not a regular file)"},
		{"text", func(t *testing.T, path string) { write(t, path, bytes.Repeat([]byte("not a log\n"), 1000)) }, "not a gmailrelay log (not a bbolt file: no valid meta page"},
		{"bbolt file of something else", func(t *testing.T, path string) {
			editBolt(t, path, func(tx *bolt.Tx) error { _, err := tx.CreateBucket([]byte("other")); return err })
		}, "not a gmailrelay log (a bbolt file without the log's buckets)"},
		{"truncated log", func(t *testing.T, path string) {
			b := readFile(t, logWithJobs(t, 40))
			write(t, path, b[:3*4096])
		}, "pages of 4096 bytes, the file has 12288 bytes (truncated?)"},
		{"older log", func(t *testing.T, path string) {
			write(t, path, readFile(t, logWithJobs(t, 1)))
			if err := acceptlog.ToFormat1(path); err != nil {
				t.Fatal(err)
			}
		}, "written by an older gmailrelay"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "x.db")
			tc.make(t, path)
			before, _ := os.ReadFile(path)
			l, err := acceptlog.OpenReadOnly(path)
			if err == nil {
				l.Close()
				t.Fatal("OpenReadOnly = nil error, want a refusal")
			}
			if !strings.HasPrefix(err.Error(), path+": ") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("OpenReadOnly error = %q, want %q naming the file", err, tc.want)
			}
			after, _ := os.ReadFile(path)
			if !bytes.Equal(before, after) {
				t.Errorf("the file changed: %d bytes before, %d after", len(before), len(after))
			}
			if _, err := os.Stat(path + "-journal"); err == nil {
				t.Error("a journal was created")
			}
		})
	}
}

// TestOpenRefusesTruncatedFile: the relay's Open refuses a truncated file
// before bbolt maps it (bbolt's reads of the missing pages fault: SIGBUS).
func TestOpenRefusesTruncatedFile(t *testing.T) {
	b := readFile(t, logWithJobs(t, 40))
	path := filepath.Join(t.TempDir(), "t.db")
	write(t, path, b[:3*4096])
	wantOpenRefused(t, path, "(truncated?)")
}

// TestCheckRawMessages plants each violation of the raw-message rules.
func TestCheckRawMessages(t *testing.T) {
	tests := []struct {
		name      string
		plant     func(tx *acceptlog.Tamperer) error
		wantCheck string // "" for none
		wantFull  string
	}{
		{"clean", nil, "", ""},
		{"job that may be sent without its message", func(tx *acceptlog.Tamperer) error {
			return tx.Delete("bodies", []byte("<000@x>"))
		}, "", "job <000@x>: in state forwarding, not pruned, and no raw message stored"},
		{"raw message without a job", func(tx *acceptlog.Tamperer) error {
			return tx.Put("bodies", []byte("<ghost@x>"), []byte("m"))
		}, "raw message <ghost@x>: no job", "raw message <ghost@x>: no job"},
		{"pruned job with its message", func(tx *acceptlog.Tamperer) error {
			return tx.Put("bodies", []byte("<001@x>"), []byte("m"))
		}, "job <001@x>: pruned at", "job <001@x>: pruned at"},
		{"abandoned job without its message", func(tx *acceptlog.Tamperer) error {
			return tx.Delete("bodies", []byte("<002@x>"))
		}, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			path := logWithJobs(t, 3)
			l, err := acceptlog.Open(path, acceptlog.Options{Now: func() time.Time { return t0 }})
			if err != nil {
				t.Fatal(err)
			}
			move(t, l, "<001@x>", gmailrelay.StateSent)
			move(t, l, "<002@x>", gmailrelay.StateUnknown)
			move(t, l, "<002@x>", gmailrelay.StateAbandoned)
			if _, _, err := l.Mutate(ctx, "<002@x>", func(cur *gmailrelay.Job) (gmailrelay.Change, error) {
				cur.UpdatedAt = t0.Add(time.Hour) // not pruned below
				return gmailrelay.Change{Job: cur}, nil
			}); err != nil {
				t.Fatal(err)
			}
			if res, err := l.Prune(ctx, t0.Add(time.Minute), 0); err != nil || res.Jobs != 1 {
				t.Fatalf("Prune = %+v, %v; want the sent job pruned", res, err)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			if tc.plant != nil {
				if err := acceptlog.Tamper(path, tc.plant); err != nil {
					t.Fatal(err)
				}
			}
			l, err = acceptlog.OpenReadOnly(path)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			logtest.WantChecks(t, ctx, l, tc.wantCheck, tc.wantFull)
		})
	}
}

// TestCheckDamagedPageIsAnError: a page bbolt cannot make sense of makes
// OpenReadOnly (gmailrelay check) fail naming the file and the page, not
// panic.
func TestCheckDamagedPageIsAnError(t *testing.T) {
	path := logWithJobs(t, 60)
	var root uint64
	var pageSize int
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	pageSize = db.Info().PageSize
	_ = db.View(func(tx *bolt.Tx) error {
		root = uint64(tx.Bucket([]byte("bodies")).Root())
		return nil
	})
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if root == 0 {
		t.Fatal("the bodies bucket is inline: the test needs a bucket of its own pages")
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(bytes.Repeat([]byte{0xff}, pageSize), int64(root)*int64(pageSize)); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	l, err := acceptlog.OpenReadOnly(path)
	if err == nil {
		l.Close()
	}
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "damaged") || !strings.Contains(err.Error(), "bucket bodies: page") {
		t.Errorf("Check of a damaged page = %v, want an error naming %s as damaged", err, path)
	}
}

func move(t *testing.T, l *acceptlog.Log, id string, s gmailrelay.State) {
	t.Helper()
	transitionLine(t, l, id, gmailrelay.Line{Kind: gmailrelay.KindState, State: s})
}

func write(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
