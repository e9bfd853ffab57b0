package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay/internal/testenv"
	"github.com/gmailrelay/gmailrelay/relay"
)

// getJSON GETs url into v and returns the status.
func getJSON(t *testing.T, u string, v any) int {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatalf("GET %s: %d %s: %v", u, resp.StatusCode, raw, err)
	}
	return resp.StatusCode
}

// TestSandboxReconcilesADroppedResponseWithinSeconds is the README's
// walk-through on a real clock: serve with no credentials (sandbox, no
// policy file) names its emulator on /readyz and /v1/stats, that URL
// answers the emulator's ground truth, and a send whose response is
// dropped is sent — found by the sweeper after the sandbox's 10 s grace,
// with nobody calling /admin/sweep — within 30 s, delivered once.
func TestSandboxReconcilesADroppedResponseWithinSeconds(t *testing.T) {
	c, err := parseServeFlags([]string{"--addr", "127.0.0.1:0", "--data", filepath.Join(t.TempDir(), "relay.db")}, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	logs := &testenv.LockedBuffer{}
	rs, err := startRelay(context.Background(), c, newLogger(logs, "json", "info"))
	if err != nil {
		t.Fatal(err)
	}
	defer rs.close(context.Background())
	if !strings.Contains(logs.String(), `"grace":"default channel 10s"`) {
		t.Errorf("the start-up lines do not say the sandbox's 10s grace:\n%s", logs.String())
	}

	var ready, stats struct {
		Sandbox *struct{ Emulator string } `json:"sandbox"`
	}
	if code := getJSON(t, rs.URL+"/readyz", &ready); code != 200 || ready.Sandbox == nil || ready.Sandbox.Emulator != rs.EmulatorURL {
		t.Fatalf("/readyz: %d sandbox %+v, want 200 and sandbox.emulator %s", code, ready.Sandbox, rs.EmulatorURL)
	}
	if code := getJSON(t, rs.URL+"/v1/stats", &stats); code != 200 || stats.Sandbox == nil || stats.Sandbox.Emulator != rs.EmulatorURL {
		t.Fatalf("/v1/stats: %d sandbox %+v, want 200 and sandbox.emulator %s", code, stats.Sandbox, rs.EmulatorURL)
	}
	var emuStats map[string]any
	if code := getJSON(t, ready.Sandbox.Emulator+"/_emulator/stats", &emuStats); code != 200 {
		t.Fatalf("sandbox.emulator/_emulator/stats: %d %v", code, emuStats)
	}

	post := func(path, body string) (*http.Response, error) {
		return http.Post(rs.URL+path, "application/json", strings.NewReader(body))
	}
	resp, err := post("/admin/faults", `{"mode":"forward-then-drop-response","count":1}`)
	if err != nil || resp.StatusCode/100 != 2 {
		t.Fatalf("switching the fault on: %v %v", resp, err)
	}
	resp.Body.Close()
	sent := time.Now()
	if resp, err := post("/v1/send", `{"key":"k2","to":"customer@example.org","subject":"x","body":"y"}`); err == nil {
		resp.Body.Close()
		t.Fatalf("the dropped-response send was answered %d", resp.StatusCode)
	}

	id := relay.MessageID("k2", c.policy.MsgIDDomain)
	jobURL := rs.URL + "/v1/jobs/" + url.PathEscape(strings.Trim(id, "<>"))
	deadline := sent.Add(30 * time.Second)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var job struct{ State string }
	for getJSON(t, jobURL, &job); job.State != "sent"; getJSON(t, jobURL, &job) {
		if time.Now().After(deadline) {
			t.Fatalf("job %s still %q 30 s after the send", id, job.State)
		}
		<-tick.C
	}
	t.Logf("dropped-response send sent %.1f s after it was made", time.Since(sent).Seconds())

	var truth struct{ Deliveries int }
	getJSON(t, rs.EmulatorURL+"/_emulator/messages?rfc822msgid="+url.QueryEscape(id), &truth)
	if truth.Deliveries != 1 {
		t.Errorf("emulator deliveries of %s: %d, want 1", id, truth.Deliveries)
	}
}

// TestSandboxGraceOnlyWhereNoPolicyFileSetsIt: the sandbox shortens the
// default channel's grace to 10 s when the channels are the built-in
// ones, never a channel a policy file declares, and never outside the
// sandbox.
func TestSandboxGraceOnlyWhereNoPolicyFileSetsIt(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	onlyRetention := write("retention.yaml", "retention: 90d\n")
	channels := write("channels.yaml", "channels:\n  default: {on_unknown: retry, grace: 2m}\n")
	tests := []struct {
		name string
		args []string
		want time.Duration
	}{
		{"sandbox, no policy", nil, 10 * time.Second},
		{"sandbox, a policy without channels", []string{"--policy", onlyRetention}, 10 * time.Second},
		{"sandbox, a policy's grace", []string{"--policy", channels}, 2 * time.Minute},
		{"an emulator given by hand", []string{"--gmail-endpoint", "http://127.0.0.1:8089"}, 3 * time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parseServeFlags(append([]string{"--data", filepath.Join(dir, "r.db")}, tt.args...), env(nil), io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if got := c.policy.Channels["default"].Grace; got != tt.want {
				t.Errorf("default channel grace %s, want %s", got, tt.want)
			}
		})
	}
}
