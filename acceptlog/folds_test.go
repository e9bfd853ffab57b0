package acceptlog_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/acceptlog"
)

// createQueued writes a new queued job id with one line.
func createQueued(t *testing.T, l gmailrelay.Store, id string) error {
	t.Helper()
	_, _, err := l.Mutate(context.Background(), id, func(*gmailrelay.Job) (gmailrelay.Change, error) {
		return gmailrelay.Change{Job: &gmailrelay.Job{MessageID: id, Channel: "default", State: gmailrelay.StateQueued, CreatedAt: t0},
			Raw:   []byte("raw of " + id),
			Lines: []gmailrelay.Line{{Kind: gmailrelay.KindReceived, State: gmailrelay.StateQueued, Channel: "default"}}}, nil
	})
	return err
}

// format2Log writes a closed log of format 2 (no fold index) holding ids,
// written as a gmailrelay of that format did (case twins let through),
// and returns its path.
func format2Log(t *testing.T, ids ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "accept.db")
	defer acceptlog.SetSkipFoldIndex(acceptlog.SetSkipFoldIndex(true))
	l, err := acceptlog.Open(path, acceptlog.Options{Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if err := createQueued(t, l, id); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := acceptlog.ToFormat2(path); err != nil {
		t.Fatal(err)
	}
	return path
}

// A log of format 2 holding case twins (written before job identity
// ignored case) reads and checks as it is; Open builds the fold index
// (saying so) without rewriting a job: the twin that sorts first holds
// the fold, both twins still read and change, and a third twin is
// refused naming the holder; the file checks clean after.
func TestOpenBuildsTheFoldIndexOfAFormat2Log(t *testing.T) {
	ctx := context.Background()
	const upper, lower, third = "<JOB-ABC@x>", "<job-abc@x>", "<Job-Abc@x>"
	path := format2Log(t, lower, upper, "<other@x>")

	ro, err := acceptlog.OpenReadOnly(path)
	if err != nil {
		t.Fatalf("OpenReadOnly of a format-2 log: %v", err)
	}
	if err := ro.CheckFull(ctx); err != nil {
		t.Errorf("check of a format-2 log: %v", err)
	}
	ro.Close()
	jobsBefore := jobRecords(t, path)

	l, logged := openLoggedExt(t, path)
	if !strings.Contains(logged.String(), "fold index") {
		t.Errorf("Open logged %q, want a note on the fold index", logged.String())
	}
	for _, id := range []string{upper, lower} {
		if j, err := l.Get(ctx, id); err != nil || j.MessageID != id {
			t.Errorf("Get(%s) after the upgrade: %+v, %v", id, j, err)
		}
	}
	err = createQueued(t, l, third)
	var ce *gmailrelay.CaseTwinError
	if !errors.As(err, &ce) || ce.Existing != upper {
		t.Fatalf("a third twin: %v; want a CaseTwinError naming %s (sorts first)", err, upper)
	}
	if err := l.Check(ctx); err != nil {
		t.Errorf("check after the upgrade: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if after := jobRecords(t, path); !mapsEqual(jobsBefore, after) {
		t.Error("the upgrade rewrote job records")
	}
	// Open again: nothing left to upgrade, nothing logged.
	l, logged = openLoggedExt(t, path)
	defer l.Close()
	if logged.Len() != 0 {
		t.Errorf("a second Open logged %q", logged.String())
	}
	if err := createQueued(t, l, third); !errors.Is(err, gmailrelay.ErrCaseTwin) {
		t.Errorf("a third twin after reopening: %v", err)
	}
	if err := createQueued(t, l, "<new@x>"); err != nil {
		t.Errorf("a new job: %v", err)
	}
}

// A log whose format is later than this version's is refused, unchanged:
// this version would not keep that format's indexes.
func TestOpenRefusesANewerFormat(t *testing.T) {
	path := logWithJobs(t, 1)
	if err := acceptlog.SetFormat(path, "4"); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(path)
	wantOpenRefused(t, path, "newer gmailrelay")
	if _, err := acceptlog.OpenReadOnly(path); err == nil || !strings.Contains(err.Error(), "newer gmailrelay") {
		t.Errorf("OpenReadOnly of format 4: %v", err)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
		t.Error("the refused file changed")
	}
}

// Check names a fold index entry that is missing, stray or names another
// job than the first of its fold.
func TestCheckNamesFoldIndexDamage(t *testing.T) {
	path := filepath.Join(t.TempDir(), "accept.db")
	l, err := acceptlog.Open(path, acceptlog.Options{Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"<a@x>", "<b@x>"} {
		if err := createQueued(t, l, id); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	err = acceptlog.Tamper(path, func(tp *acceptlog.Tamperer) error {
		if err := tp.Delete("folds", []byte("<a@x>")); err != nil {
			return err
		}
		if err := tp.Put("folds", []byte("<b@x>"), []byte("<B@x>")); err != nil {
			return err
		}
		return tp.Put("folds", []byte("<c@x>"), []byte("<c@x>"))
	})
	if err != nil {
		t.Fatal(err)
	}
	ro, err := acceptlog.OpenReadOnly(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	err = ro.Check(context.Background())
	for _, want := range []string{"missing entry <a@x>", "entry <b@x> names <B@x>", "stray entry <c@x>"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Check = %v, want it to say %q", err, want)
		}
	}
}

func TestFoldMessageID(t *testing.T) {
	for in, want := range map[string]string{
		"<job-abc@x>":          "<job-abc@x>",
		"<JOB-ABC@X.Example>":  "<job-abc@x.example>",
		"<K\u212aelvin@x>":     "<k\u212aelvin@x>", // only ASCII letters fold
		"<ÄÖ-Zz@[10.0.0.1]>":   "<ÄÖ-zz@[10.0.0.1]>",
		"":                     "",
		"<@AZaz09!#$%&'*+/=?>": "<@azaz09!#$%&'*+/=?>",
	} {
		if got := gmailrelay.FoldMessageID(in); got != want {
			t.Errorf("FoldMessageID(%q) = %q, want %q", in, got, want)
		}
	}
}

// jobRecords returns the raw bytes of every job record in the closed log
// at path, by Message-ID.
func jobRecords(t *testing.T, path string) map[string]string {
	t.Helper()
	l, err := acceptlog.OpenReadOnly(path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	out := map[string]string{}
	jobs, _, err := l.List(context.Background(), gmailrelay.ListOptions{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		out[j.MessageID] = fmt.Sprintf("%+v", j)
	}
	return out
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// openLoggedExt opens the log at path and returns what it logged.
func openLoggedExt(t *testing.T, path string) (*acceptlog.Log, *strings.Builder) {
	t.Helper()
	var logged strings.Builder
	l, err := acceptlog.Open(path, acceptlog.Options{Now: func() time.Time { return t0 }, Logf: func(format string, args ...any) {
		fmt.Fprintf(&logged, format+"\n", args...)
	}})
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	return l, &logged
}
