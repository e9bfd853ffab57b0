package main

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// backup --url saves a running relay's log and checks the copy; backup
// --data refuses the same file while the relay holds it, and copies it once
// the relay has stopped; compact shrinks a copy.
func TestBackupCommands(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "r.db")
	const admin = "admin-token-0123456789"
	rs := startTestRelay(t, "--data", data, "--admin-token", admin, "--api-token", "api-token-0123456789")
	defer rs.close(context.Background())
	req, _ := http.NewRequest("POST", rs.URL+"/v1/send", strings.NewReader(`{"key":"k1","to":"a@example.org","subject":"s","body":"b"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+admin)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("send: %v %v", err, resp)
	}
	resp.Body.Close()

	run := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := run(context.Background(), args, &out, &errb)
		return code, out.String(), errb.String()
	}
	online := filepath.Join(dir, "online.db")
	if code, out, errs := run("backup", "--url", rs.URL, "--token", admin, "--to", online); code != 0 || !strings.Contains(out, "1 jobs") || !strings.Contains(out, "check ok") {
		t.Fatalf("backup --url: exit %d, %q %q; want 0 and a summary with 1 job, check ok", code, out, errs)
	}
	if code, _, errs := run("backup", "--url", rs.URL, "--token", "wrong", "--to", filepath.Join(dir, "x.db")); code != 1 || !strings.Contains(errs, "401") {
		t.Errorf("backup --url with a wrong token: exit %d, %q; want 1 naming the 401", code, errs)
	}
	if _, err := os.Stat(filepath.Join(dir, "x.db")); !os.IsNotExist(err) {
		t.Errorf("a refused backup left a file: %v", err)
	}
	if code, _, errs := run("backup", "--data", data, "--to", filepath.Join(dir, "locked.db")); code != 1 || !strings.Contains(errs, "--url") {
		t.Errorf("backup --data of a served log: exit %d, %q; want 1 pointing at --url", code, errs)
	}
	rs.close(context.Background())
	offline := filepath.Join(dir, "offline.db")
	if code, out, errs := run("backup", "--data", data, "--to", offline); code != 0 || !strings.Contains(out, "1 jobs") {
		t.Fatalf("backup --data: exit %d, %q %q", code, out, errs)
	}
	if code, out, errs := run("compact", "--data", offline, "--to", filepath.Join(dir, "compact.db")); code != 0 || !strings.Contains(out, "bytes") {
		t.Fatalf("compact: exit %d, %q %q", code, out, errs)
	}
	for _, args := range [][]string{
		{"backup", "--to", filepath.Join(dir, "y.db")},
		{"backup", "--url", rs.URL, "--data", data, "--to", filepath.Join(dir, "y.db")},
		{"backup", "--data", data},
		{"backup", "--url", "ftp://x", "--to", filepath.Join(dir, "y.db")},
		{"compact", "--data", data},
		{"compact", "--nope"},
	} {
		code, _, errs := run(args...)
		want := 2
		if args[1] == "--url" && strings.HasPrefix(args[2], "ftp") {
			want = 1
		}
		if code != want || errs == "" {
			t.Errorf("%v: exit %d, %q; want %d with a message", args, code, errs, want)
		}
	}
}

// A backup killed mid-way left OUT.tmp behind, and every later run to OUT
// failed on it ("file exists"). Each run now writes a temporary file of its
// own, so later runs (backup --url, backup --data, compact) succeed, and a
// temporary file another run left — or may still be writing — is never
// touched.
func TestBackupSucceedsBesideAStaleTemp(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "r.db")
	const admin = "admin-token-0123456789"
	rs := startTestRelay(t, "--data", data, "--admin-token", admin, "--api-token", "api-token-0123456789")
	defer rs.close(context.Background())
	run := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := run(context.Background(), args, &out, &errb)
		return code, out.String(), errb.String()
	}
	plant := func(out string) []string {
		t.Helper()
		stale := []string{out + ".tmp", out + ".123456.tmp"}
		for _, p := range stale {
			if err := os.WriteFile(p, []byte("half a backup"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return stale
	}
	untouched := func(stale []string) {
		t.Helper()
		for _, p := range stale {
			if b, err := os.ReadFile(p); err != nil || string(b) != "half a backup" {
				t.Errorf("%s: %q %v; another run's temporary file was touched", p, b, err)
			}
		}
	}
	online := filepath.Join(dir, "online.db")
	stale := plant(online)
	if code, out, errs := run("backup", "--url", rs.URL, "--token", admin, "--to", online); code != 0 || !strings.Contains(out, "check ok") {
		t.Fatalf("backup --url beside a stale temp: exit %d, %q %q; want 0, check ok", code, out, errs)
	}
	untouched(stale)
	rs.close(context.Background())
	offline := filepath.Join(dir, "offline.db")
	stale = plant(offline)
	if code, out, errs := run("backup", "--data", data, "--to", offline); code != 0 || !strings.Contains(out, "check ok") {
		t.Fatalf("backup --data beside a stale temp: exit %d, %q %q; want 0, check ok", code, out, errs)
	}
	untouched(stale)
	compact := filepath.Join(dir, "compact.db")
	stale = plant(compact)
	if code, _, errs := run("compact", "--data", offline, "--to", compact); code != 0 {
		t.Fatalf("compact beside a stale temp: exit %d, %q; want 0", code, errs)
	}
	untouched(stale)
	left, _ := filepath.Glob(filepath.Join(dir, "*.tmp"))
	if len(left) != 6 {
		t.Errorf("temporary files now %v; want only the 6 planted ones (a run leaves none of its own)", left)
	}
	if code, _, errs := run("backup", "--data", data, "--to", offline); code != 1 || !strings.Contains(errs, "exists") {
		t.Errorf("backup over an existing copy: exit %d, %q; want 1, exists", code, errs)
	}
}
