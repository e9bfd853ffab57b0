package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay/gmailfake"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestServeFlagsPrecedenceAndEnvTwins(t *testing.T) {
	var errb bytes.Buffer
	c, err := parseServeFlags([]string{"--addr", "127.0.0.1:9999"}, env(map[string]string{
		"GMAILRELAY_ADDR": "127.0.0.1:7777", "GMAILRELAY_QUOTA_PER_MINUTE": "15000", "GMAILRELAY_MSGID_DOMAIN": "mail.example.com",
		"GMAILRELAY_ALLOW_CRASH_FAULTS": "true",
	}), &errb)
	if err != nil {
		t.Fatal(err)
	}
	if c.Addr != "127.0.0.1:9999" {
		t.Errorf("addr %s: the flag must win over the environment", c.Addr)
	}
	if c.QuotaPerMinute != 15000 || !c.AllowCrashFaults || c.policy.MsgIDDomain != "mail.example.com" {
		t.Errorf("env twins not applied: %+v", c)
	}
}

func TestServeBadConfigurationExits2(t *testing.T) {
	dir := t.TempDir()
	badPolicy := filepath.Join(dir, "bad.yaml")
	os.WriteFile(badPolicy, []byte("channels:\n  default: {on_unknown: sometimes}\n"), 0o600)
	tests := []struct {
		name, want string
		args       []string
	}{
		{"unknown flag", "flag provided but not defined", []string{"--nope"}},
		{"bad policy", "on_unknown", []string{"--policy", badPolicy}},
		{"missing policy", "no such file", []string{"--policy", filepath.Join(dir, "missing.yaml")}},
		{"public address without token", "api-token", []string{"--addr", "0.0.0.0:8080"}},
		{"public address with a short api token", "--api-token (or GMAILRELAY_API_TOKEN): 1 characters is too short", []string{"--addr", "0.0.0.0:8080", "--api-token", "x"}},
		{"public address with a short admin token", "--admin-token (or GMAILRELAY_ADMIN_TOKEN): 15 characters", []string{"--addr", "0.0.0.0:8080", "--api-token", "0123456789abcdef", "--admin-token", "0123456789abcde"}},
		{"loopback with a short api token", "--api-token (or GMAILRELAY_API_TOKEN): 1 characters is too short", []string{"--addr", "127.0.0.1:0", "--api-token", "x"}},
		{"loopback with a short admin token", "--admin-token (or GMAILRELAY_ADMIN_TOKEN): 15 characters", []string{"--api-token", "0123456789abcdef", "--admin-token", "0123456789abcde"}},
		{"localhost with a 15-character api token", "--api-token (or GMAILRELAY_API_TOKEN): 15 characters", []string{"--addr", "localhost:0", "--api-token", "0123456789abcde"}},
		{"bad log format", "log-format", []string{"--log-format", "xml"}},
		{"bad domain", "msgid-domain", []string{"--msgid-domain", "bad domain"}},
		{"same tokens", "differ", []string{"--api-token", "same-token-0123456789", "--admin-token", "same-token-0123456789"}},
		{"bad clock", "clock", []string{"--clock", "sundial"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantExit2(t, runServe, tt.args, tt.want)
		})
	}
}

// TestServeBadGmailFlagsExit2: a credentials file that is missing or not
// Google credentials of a supported type, and a --gmail-endpoint that is
// not an absolute http(s) URL, are bad flags (exit 2 naming the flag), not
// a start-up failure (exit 1) or a relay that serves anyway. The same holds
// for a mailbox's credentials in the policy.
func TestServeBadGmailFlagsExit2(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	bogus := write("bogus.json", `{"type":"bogus"}`)
	notJSON := write("not.json", "client_id=x")
	user := write("user.json", `{"type":"authorized_user","client_id":"c","client_secret":"s","refresh_token":"r"}`)
	pol := write("p.yaml", "mailboxes:\n  billing: {address: b@x.test, credentials: "+bogus+"}\nchannels:\n  default: {on_unknown: retry}\n")
	base := []string{"--addr", "127.0.0.1:0", "--data", filepath.Join(dir, "r.db"), "--log-level", "error"}
	tests := []struct {
		name, want string
		args       []string
	}{
		{"missing credentials", "--credentials: open " + filepath.Join(dir, "missing.json"), []string{"--credentials", filepath.Join(dir, "missing.json")}},
		{"unsupported credentials type", `--credentials ` + bogus + `: credentials: type "bogus" is not supported`, []string{"--credentials", bogus}},
		{"credentials not JSON", "--credentials " + notJSON + ": credentials: not JSON", []string{"--credentials", notJSON}},
		{"subject with a user token", "--subject needs a service account", []string{"--credentials", user, "--subject", "a@x.test"}},
		{"policy mailbox credentials", "--policy: mailboxes.billing.credentials " + bogus, []string{"--policy", pol}},
		{"endpoint not a URL", `--gmail-endpoint: want an absolute http:// or https:// URL, got "not a url"`, []string{"--gmail-endpoint", "not a url"}},
		{"endpoint without scheme", "--gmail-endpoint", []string{"--gmail-endpoint", "127.0.0.1:8089"}},
		{"endpoint of another scheme", "--gmail-endpoint", []string{"--gmail-endpoint", "ftp://example.com/"}},
		{"endpoint without host", "--gmail-endpoint", []string{"--gmail-endpoint", "http:///gmail"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantExit2(t, runServe, append(append([]string(nil), base...), tt.args...), tt.want)
		})
	}
}

// TestServeSandboxEndToEnd starts the whole service in-process on an
// OS-chosen port, sends, replays, and shuts down gracefully.
func TestServeSandboxEndToEnd(t *testing.T) {
	c, err := parseServeFlags([]string{"--addr", "127.0.0.1:0", "--data", filepath.Join(t.TempDir(), "r.db")}, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !c.sandbox() {
		t.Fatal("no credentials and no endpoint must mean sandbox")
	}
	rs, err := startRelay(context.Background(), c, newLogger(io.Discard, "json", "info"))
	if err != nil {
		t.Fatal(err)
	}
	defer rs.close(context.Background())
	body := `{"key":"cus_1:order.shipped:ord_1","to":"a@example.org","subject":"hi","body":"hello"}`
	var ids []string
	for range 2 {
		resp, err := http.Post(rs.URL+"/v1/send", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var out map[string]any
		json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("send: %d %v", resp.StatusCode, out)
		}
		ids = append(ids, out["gmail_id"].(string))
	}
	if ids[0] != ids[1] {
		t.Errorf("replay gave another gmail id: %v", ids)
	}
	resp, err := http.Get(rs.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	var ready map[string]any
	json.NewDecoder(resp.Body).Decode(&ready)
	resp.Body.Close()
	if resp.StatusCode != 200 || ready["mode"] != "sandbox" || !strings.Contains(ready["warning"].(string), "SANDBOX") {
		t.Errorf("readyz: %d %v, want 200 sandbox with a warning", resp.StatusCode, ready)
	}
	if got := rs.Emulator.Deliveries(""); got != 1 {
		t.Errorf("embedded emulator has %d deliveries, want 1", got)
	}
	var hc bytes.Buffer
	if code := runHealthcheck(context.Background(), []string{"--url", rs.URL + "/healthz", "--timeout", "5s"}, &hc, io.Discard); code != 0 {
		t.Errorf("healthcheck exit %d", code)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rs.close(ctx)
	if code := runHealthcheck(context.Background(), []string{"--url", rs.URL + "/healthz"}, io.Discard, io.Discard); code != 1 {
		t.Errorf("healthcheck of a stopped relay: exit %d, want 1", code)
	}
}

// TestServeTokenRefreshFailureIsLoud: a service account whose token
// endpoint refuses makes sends answer 503 (Gmail not reached, nothing sent)
// and /readyz fail with the reason — never a silent send error.
func TestServeTokenRefreshFailureIsLoud(t *testing.T) {
	tokenSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, `{"error":"invalid_grant","error_description":"account disabled"}`, http.StatusBadRequest)
	}))
	defer tokenSrv.Close()
	emu, emuURL := gmailfake.NewTestServer(t, gmailfake.Options{})
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pemKey := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	sa, _ := json.Marshal(map[string]string{"type": "service_account", "client_email": "relay@project.iam.gserviceaccount.com",
		"private_key": string(pemKey), "private_key_id": "k1", "token_uri": tokenSrv.URL + "/token", "client_id": "1"})
	dir := t.TempDir()
	credPath := filepath.Join(dir, "sa.json")
	os.WriteFile(credPath, sa, 0o600)
	rs := startTestRelay(t, "--credentials", credPath, "--subject", "me@example.com", "--gmail-endpoint", emuURL)
	defer rs.close(context.Background())
	resp, err := http.Post(rs.URL+"/v1/send", "application/json", strings.NewReader(`{"key":"k","to":"a@example.org","text":"x"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("send with a failing token: %d, want 503", resp.StatusCode)
	}
	if got := emu.Deliveries(""); got != 0 {
		t.Errorf("emulator has %d deliveries, want 0", got)
	}
	resp, err = http.Get(rs.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	var ready map[string]any
	json.NewDecoder(resp.Body).Decode(&ready)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(fmt.Sprint(ready["provider"]), "token refresh failing") {
		t.Errorf("readyz: %d %v, want 503 naming the token refresh", resp.StatusCode, ready)
	}
}

// TestServePortTakenWritesNoDataFile: a serve that cannot listen exits 1
// naming the address, before it creates the log's file.
func TestServePortTakenWritesNoDataFile(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	data := filepath.Join(t.TempDir(), "relay.db")
	var stdout, stderr bytes.Buffer
	code := runServe(context.Background(), []string{"--addr", taken.Addr().String(), "--data", data}, &stdout, &stderr)
	if code != 1 {
		t.Errorf("exit code %d, want 1; stderr %q", code, stderr.String())
	}
	if !strings.Contains(stderr.String(), "listen on "+taken.Addr().String()) {
		t.Errorf("stderr %q does not name the address it could not listen on", stderr.String())
	}
	if _, err := os.Stat(data); !os.IsNotExist(err) {
		t.Errorf("data file after a failed start: stat %v, want none", err)
	}
}
