package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gmailrelay/gmailrelay/gmailfake"
)

// refreshServer is an OAuth token endpoint for authorized-user
// credentials: each refresh token gets its own access token; "revoked"
// gets Google's invalid_grant, as a revoked or expired grant does.
func refreshServer(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		rt := r.Form.Get("refresh_token")
		if rt == "revoked" || rt == "" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, `{"error":"invalid_grant","error_description":"Token has been expired or revoked."}`)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"access_token":"at-%s","token_type":"Bearer","expires_in":3600}`, rt)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestServeSeveralMailboxesEmulator: a relay of three mailboxes, each with
// its own OAuth credentials, against the emulator requiring each account's
// own token. Sends land in the account of their From; one mailbox whose
// grant was revoked answers 503 naming it while the others send, and
// /readyz says which mailbox is not ready (emulator results).
func TestServeSeveralMailboxesEmulator(t *testing.T) {
	oauth := refreshServer(t)
	accounts := []string{"support@shop.test", "billing@shop.test", "hello@brand.test"}
	emu, emuURL := gmailfake.NewTestServer(t, gmailfake.Options{Accounts: accounts, Tokens: map[string]string{
		"at-rt-support": accounts[0], "at-rt-billing": accounts[1], "at-rt-brand": accounts[2]}})
	dir := t.TempDir()
	cred := func(name, refresh string) string {
		p := filepath.Join(dir, name+".json")
		body := fmt.Sprintf(`{"type":"authorized_user","client_id":"cid","client_secret":"cs","refresh_token":%q,"token_uri":%q}`, refresh, oauth.URL+"/token")
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	pol := fmt.Sprintf(`mailboxes:
  support: {address: %s, credentials: %s}
  billing: {address: %s, credentials: %s}
  brand:   {address: %s, credentials: %s}
channels:
  default: {on_unknown: retry}
`, accounts[0], cred("support", "rt-support"), accounts[1], cred("billing", "revoked"), accounts[2], cred("brand", "rt-brand"))
	polPath := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(polPath, []byte(pol), 0o600); err != nil {
		t.Fatal(err)
	}
	rs := startTestRelay(t, "--policy", polPath, "--gmail-endpoint", emuURL)
	t.Cleanup(func() { rs.close(context.Background()) })

	send := func(key, from string) (int, map[string]any) {
		t.Helper()
		body := fmt.Sprintf(`{"key":%q,"from":%q,"to":"customer@example.net","subject":"s","text":"t"}`, key, from)
		resp, err := http.Post(rs.URL+"/v1/send", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		data, _ := io.ReadAll(resp.Body)
		_ = json.Unmarshal(data, &out)
		return resp.StatusCode, out
	}
	for i, from := range []string{accounts[0], accounts[2]} {
		code, out := send(fmt.Sprintf("k%d", i), from)
		if code != http.StatusOK {
			t.Fatalf("send from %s: %d %v", from, code, out)
		}
		truth := emu.Lookup("", out["message_id"].(string))
		if len(truth.Messages) != 1 || truth.Messages[0].Account != from || truth.Deliveries != 1 {
			t.Errorf("send from %s: emulator truth %+v, want one delivery in %s", from, truth, from)
		}
	}
	code, out := send("k-billing", accounts[1])
	errObj, _ := out["error"].(map[string]any)
	if msg, _ := errObj["message"].(string); code != http.StatusServiceUnavailable || !strings.Contains(msg, "billing") {
		t.Errorf("send through the mailbox with a revoked grant: %d %v, want 503 naming mailbox billing", code, out)
	}
	if n := emu.AccountStats(accounts[1]).Deliveries; n != 0 {
		t.Errorf("billing delivered %d messages", n)
	}
	code, out = send("k-unknown", "someone@else.test")
	if errObj, _ := out["error"].(map[string]any); code != http.StatusBadRequest || errObj["field"] != "from" ||
		!strings.Contains(fmt.Sprint(errObj["message"]), "someone@else.test") {
		t.Errorf("send from an address no mailbox has: %d %v, want 400 on from naming it", code, out)
	}

	resp, err := http.Get(rs.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	var ready struct {
		Ready     bool              `json:"ready"`
		Mailboxes map[string]string `json:"mailboxes"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&ready)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !ready.Ready {
		t.Errorf("/readyz %d %+v: one broken mailbox must not make the relay unready", resp.StatusCode, ready)
	}
	if ready.Mailboxes["support"] != "ready" || ready.Mailboxes["brand"] != "ready" ||
		!strings.Contains(ready.Mailboxes["billing"], "not ready") || !strings.Contains(ready.Mailboxes["billing"], "invalid_grant") {
		t.Errorf("/readyz mailboxes = %v, want support and brand ready, billing not ready with Google's answer", ready.Mailboxes)
	}
}

// A mailbox whose credentials file is missing, or whose subject has no
// key, is a bad policy: serve refuses to start (exit 2), naming the field.
func TestServeRefusesMailboxWithoutUsableCredentials(t *testing.T) {
	dir := t.TempDir()
	for body, want := range map[string]string{
		"  billing: {address: b@x.test, credentials: " + filepath.Join(dir, "missing.json") + "}\n": "mailboxes.billing.credentials",
		"  shop: {address: s@x.test, subject: s@x.test}\n":                                          "mailboxes.shop.subject",
	} {
		pol := filepath.Join(dir, "p.yaml")
		os.WriteFile(pol, []byte("mailboxes:\n"+body+"channels:\n  default: {on_unknown: retry}\n"), 0o600)
		_, err := parseServeFlags([]string{"--addr", "127.0.0.1:0", "--data", filepath.Join(dir, "r.db"), "--policy", pol,
			"--gmail-endpoint", "http://127.0.0.1:1"}, env(nil), io.Discard)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("policy %q: %v, want an error naming %s", body, err, want)
		}
	}
}
