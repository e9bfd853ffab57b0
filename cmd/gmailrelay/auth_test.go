package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay/policy"
)

// fakeGoogle is a tiny OAuth authorization server: the token endpoint
// checks the code and the PKCE verifier's presence and hands out tokens.
func fakeGoogle(t *testing.T) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/token" {
			http.NotFound(w, r)
			return
		}
		_ = r.ParseForm()
		if r.Form.Get("code") != "the-code" || r.Form.Get("code_verifier") == "" {
			http.Error(w, `{"error":"invalid_grant"}`, http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"access_token":"at","refresh_token":"rt-123","token_type":"Bearer","expires_in":3600}`)
	}))
}

// clientSecret starts fakeGoogle for the test and writes an installed
// app's client secret pointing at it into a fresh directory; it returns
// the directory and the secret's path.
func clientSecret(t *testing.T) (dir, secret string) {
	t.Helper()
	g := fakeGoogle(t)
	t.Cleanup(g.Close)
	dir = t.TempDir()
	secret = filepath.Join(dir, "client.json")
	if err := os.WriteFile(secret, []byte(`{"installed":{"client_id":"cid","client_secret":"csec","auth_uri":"`+g.URL+`/auth","token_uri":"`+g.URL+`/token","redirect_uris":["http://localhost"]}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir, secret
}

func TestAuthLoopbackFlowStoresToken0600(t *testing.T) {
	dir, secret := clientSecret(t)
	out := filepath.Join(dir, "sub", "token.json")

	pr, pw := io.Pipe()
	var code int
	var wg sync.WaitGroup
	wg.Add(1)
	var stderr bytes.Buffer
	go func() {
		defer wg.Done()
		code = runAuth(context.Background(), []string{"--client-secret", secret, "--out", out, "--timeout", "30s"}, pw, &stderr)
		pw.Close()
	}()
	// Play the browser: read the printed URL, follow the redirect with a code.
	buf := make([]byte, 4096)
	var printed string
	for !strings.Contains(printed, "Waiting") {
		n, err := pr.Read(buf)
		if err != nil {
			t.Fatalf("read auth output: %v (%s)", err, stderr.String())
		}
		printed += string(buf[:n])
	}
	m := regexp.MustCompile(`https?://\S+`).FindString(printed)
	u, err := url.Parse(m)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	if !strings.Contains(q.Get("scope"), "gmail.send") || !strings.Contains(q.Get("scope"), "gmail.readonly") ||
		q.Get("code_challenge") == "" || q.Get("access_type") != "offline" {
		t.Errorf("auth URL %s lacks scopes, PKCE or offline access", m)
	}
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get(q.Get("redirect_uri") + "?state=wrong&code=the-code")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("wrong state answered %d, want 400", resp.StatusCode)
	}
	go io.Copy(io.Discard, pr)
	wg.Wait()
	if code == 0 {
		t.Fatalf("a redirect with the wrong state must fail the flow")
	}

	// Again, the right way.
	if code, _, printed := authAsBrowser(t, "--client-secret", secret, "--out", out); code != 0 {
		t.Fatalf("auth exit %d: %s", code, printed)
	}
	st, err := os.Stat(out)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("token file mode %v, want 0600", st.Mode().Perm())
	}
	var u2 authorizedUser
	data, _ := os.ReadFile(out)
	if err := json.Unmarshal(data, &u2); err != nil || u2.Type != "authorized_user" || u2.RefreshToken != "rt-123" || u2.ClientID != "cid" {
		t.Errorf("token file %s, want an authorized_user with the refresh token", data)
	}
}

func TestAuthBadFlagsExit2(t *testing.T) {
	var out, errb bytes.Buffer
	for _, args := range [][]string{{}, {"--client-secret", "/nonexistent.json"}, {"--bogus"}} {
		if code := runAuth(context.Background(), args, &out, &errb); code != 2 {
			t.Errorf("auth %v: exit %d, want 2", args, code)
		}
	}
}

// authAsBrowser runs `gmailrelay auth args…` and plays the browser that
// consents: it reads the printed URL and follows the redirect with the
// code fakeGoogle accepts. It returns the exit code, the auth URL and
// what auth printed.
func authAsBrowser(t *testing.T, args ...string) (int, *url.URL, string) {
	t.Helper()
	pr, pw := io.Pipe()
	var code int
	var stderr bytes.Buffer
	done := make(chan struct{})
	go func() {
		defer close(done)
		code = runAuth(context.Background(), append(args, "--timeout", "30s"), pw, &stderr)
		pw.Close()
	}()
	buf := make([]byte, 4096)
	printed := ""
	for !strings.Contains(printed, "Waiting") {
		n, err := pr.Read(buf)
		if err != nil {
			<-done
			return code, nil, printed + stderr.String()
		}
		printed += string(buf[:n])
	}
	u, err := url.Parse(regexp.MustCompile(`https?://\S+`).FindString(printed))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get(q.Get("redirect_uri") + "?state=" + url.QueryEscape(q.Get("state")) + "&code=the-code")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	rest, _ := io.ReadAll(pr)
	<-done
	return code, u, printed + string(rest) + stderr.String()
}

// TestAuthMailboxStoresItsToken: `auth --mailbox NAME` signs in as the
// mailbox's address and stores the token at its credentials path, where
// serve reads it; unknown mailboxes and service-account ones are refused
// with exit 2.
func TestAuthMailboxStoresItsToken(t *testing.T) {
	dir, secret := clientSecret(t)
	billingToken := filepath.Join(dir, "secrets", "billing.json")
	pol := filepath.Join(dir, "policy.yaml")
	os.WriteFile(pol, []byte("mailboxes:\n  billing: {address: billing@shop.test, credentials: "+billingToken+"}\n"+
		"  support: {address: support@shop.test, subject: support@shop.test}\nchannels:\n  default: {on_unknown: retry}\n"), 0o600)

	code, u, out := authAsBrowser(t, "--client-secret", secret, "--mailbox", "billing", "--policy", pol)
	if code != 0 {
		t.Fatalf("auth --mailbox billing: exit %d: %s", code, out)
	}
	if hint := u.Query().Get("login_hint"); hint != "billing@shop.test" {
		t.Errorf("auth URL login_hint = %q, want the mailbox's address", hint)
	}
	var tok authorizedUser
	data, err := os.ReadFile(billingToken)
	if err != nil || json.Unmarshal(data, &tok) != nil || tok.RefreshToken != "rt-123" {
		t.Fatalf("billing's token file: %s, %v; want the authorized user at the policy's credentials path", data, err)
	}
	c := serveConfig{policy: mustPolicy(t, pol)}
	if path, _ := c.mailboxCredentials(c.policy.Mailboxes["billing"]); path != billingToken {
		t.Errorf("serve reads billing's credentials from %q, want %q", path, billingToken)
	}
	for _, tc := range []struct{ mailbox, want string }{
		{"sales", "not a mailbox"},
		{"support", "service account"},
	} {
		var stderr bytes.Buffer
		code := runAuth(context.Background(), []string{"--client-secret", secret, "--mailbox", tc.mailbox, "--policy", pol}, io.Discard, &stderr)
		if code != 2 || !strings.Contains(stderr.String(), tc.want) || !strings.Contains(stderr.String(), tc.mailbox) {
			t.Errorf("auth --mailbox %s: exit %d %q, want 2 naming it (%s)", tc.mailbox, code, stderr.String(), tc.want)
		}
	}
}

func mustPolicy(t *testing.T, path string) *policy.Policy {
	t.Helper()
	p, err := policy.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
