package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/acceptlog"
	"github.com/gmailrelay/gmailrelay/gmailfake"
)

const rekeyKey = "cus_7:order.shipped:ord_7"

// startOn starts a relay on the log given by logArgs (--data FILE or
// --database URL) in front of the emulator at emuURL, with Message-ID
// domain domain; closed at the end of the test unless the test closes it.
func startOn(t *testing.T, emuURL, domain string, logArgs ...string) *relayServer {
	t.Helper()
	args := append([]string{"--addr", "127.0.0.1:0", "--gmail-endpoint", emuURL, "--msgid-domain", domain,
		"--api-token", apiTok, "--admin-token", adminTok}, logArgs...)
	c, err := parseServeFlags(args, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := startRelay(context.Background(), c, newLogger(io.Discard, "json", "info"))
	if err != nil {
		t.Fatalf("start with %s: %v", domain, err)
	}
	t.Cleanup(func() { _ = rs.close(context.Background()) })
	return rs
}

// sendKey sends the test message under key and returns the status, the
// answer's message_id and whether it was a replay.
func sendKey(t *testing.T, rs *relayServer, key string) (int, string, bool) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, rs.URL+"/v1/send", strings.NewReader(
		`{"key":"`+key+`","to":"a@example.org","subject":"shipped","body":"on its way"}`))
	req.Header.Set("Authorization", "Bearer "+apiTok)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		MessageID string `json:"message_id"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out.MessageID, resp.Header.Get("Idempotent-Replayed") == "true"
}

// deliveries is the emulator's ground truth for a Message-ID.
func deliveries(t *testing.T, emuURL, msgID string) int {
	t.Helper()
	resp, err := http.Get(emuURL + "/_emulator/messages?rfc822msgid=" + url.QueryEscape(msgID))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Deliveries int `json:"deliveries"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out.Deliveries
}

func runRekeyOn(args ...string) (int, string, string) {
	var out, errb strings.Builder
	code := runRekey(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// wantRefusedIdentity runs serve with domain on the log and wants exit 2
// naming both domains and gmailrelay rekey.
func wantRefusedIdentity(t *testing.T, emuURL, stored, domain string, logArgs ...string) {
	t.Helper()
	var errb strings.Builder
	args := append([]string{"--addr", "127.0.0.1:0", "--gmail-endpoint", emuURL, "--msgid-domain", domain}, logArgs...)
	// A serve that starts runs until ctx ends: bounded, so it fails
	// instead of hanging.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if code := runServe(ctx, args, io.Discard, &errb); code != 2 {
		t.Fatalf("serve with %s on a log of %s: exit %d (%s), want 2", domain, stored, code, errb.String())
	}
	for _, want := range []string{stored, domain, "gmailrelay rekey", "--msgid-domain " + domain} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("serve's refusal %q does not say %q", errb.String(), want)
		}
	}
}

// bbolt: a relay with domain A sends key K; a restart with domain B
// exits 2 naming both (nothing written); after gmailrelay rekey, the relay
// with B replays K as the job of A's Message-ID, and the emulator has one
// delivery of it (emulator results).
func TestServeRefusesAnotherDomainUntilRekeyThenReplaysByKey(t *testing.T) {
	_, emuURL := gmailfake.NewTestServer(t, gmailfake.Options{})
	path := filepath.Join(t.TempDir(), "r.db")
	a := startOn(t, emuURL, "a.example", "--data", path)
	st, idA, _ := sendKey(t, a, rekeyKey)
	if st != http.StatusOK || !strings.HasSuffix(idA, "@a.example>") {
		t.Fatalf("send with a.example: %d %s", st, idA)
	}
	if err := a.close(context.Background()); err != nil {
		t.Fatal(err)
	}

	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	wantRefusedIdentity(t, emuURL, "a.example", "b.example", "--data", path)
	if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
		t.Error("the refused start changed the log file")
	}

	code, out, errs := runRekeyOn("--data", path, "--msgid-domain", "b.example")
	if code != 0 || !strings.Contains(out, "a.example") || !strings.Contains(out, "b.example") {
		t.Fatalf("rekey: exit %d, %q %q; want 0 naming both domains", code, out, errs)
	}
	b := startOn(t, emuURL, "b.example", "--data", path)
	st, id, replayed := sendKey(t, b, rekeyKey)
	if st != http.StatusOK || id != idA || !replayed {
		t.Errorf("send of the same key with b.example: %d %s replayed %t; want 200, a replay of %s", st, id, replayed, idA)
	}
	if got := deliveries(t, emuURL, idA); got != 1 {
		t.Errorf("emulator results: %d deliveries of %s, want 1", got, idA)
	}
	if st, id, _ := sendKey(t, b, "cus_7:order.shipped:ord_8"); st != http.StatusOK || !strings.HasSuffix(id, "@b.example>") {
		t.Errorf("a new key with b.example: %d %s; want its Message-ID in b.example", st, id)
	}

	// A running relay holds the file: rekey refuses, saying to stop it.
	code, _, errs = runRekeyOn("--data", path, "--msgid-domain", "c.example")
	if code != 1 || !strings.Contains(errs, "stop") {
		t.Errorf("rekey of a running relay's log: exit %d %q; want 1 saying to stop it", code, errs)
	}
}

// PostgreSQL: a second replica with another domain refuses to start
// (exit 2) while the first runs; rekey refuses while a replica is
// connected; once all are stopped it records the new domain, and the old
// key replays on the new domain's replica (one delivery, emulator
// results).
func TestServeReplicaWithAnotherDomainRefusedUntilRekey(t *testing.T) {
	dbURL, _ := testDatabase(t)
	_, emuURL := gmailfake.NewTestServer(t, gmailfake.Options{})
	a := startOn(t, emuURL, "a.example", "--database", dbURL)
	st, idA, _ := sendKey(t, a, rekeyKey)
	if st != http.StatusOK {
		t.Fatalf("send with a.example: %d", st)
	}
	wantRefusedIdentity(t, emuURL, "a.example", "b.example", "--database", dbURL)
	if code, _, errs := runRekeyOn("--database", dbURL, "--msgid-domain", "b.example"); code != 1 || !strings.Contains(errs, "stop") {
		t.Errorf("rekey with a replica running: exit %d %q; want 1 saying to stop it", code, errs)
	}
	if err := a.close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if code, out, errs := runRekeyOn("--database", dbURL, "--msgid-domain", "b.example"); code != 0 || !strings.Contains(out, "b.example") {
		t.Fatalf("rekey: exit %d %q %q", code, out, errs)
	}
	b := startOn(t, emuURL, "b.example", "--database", dbURL)
	st, id, replayed := sendKey(t, b, rekeyKey)
	if st != http.StatusOK || id != idA || !replayed {
		t.Errorf("send of the same key on the b.example replica: %d %s replayed %t; want a replay of %s", st, id, replayed, idA)
	}
	if got := deliveries(t, emuURL, idA); got != 1 {
		t.Errorf("emulator results: %d deliveries of %s, want 1", got, idA)
	}
}

func TestRekeyFlagsAndRefusals(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "r.db")
	l, err := acceptlog.Open(path, acceptlog.Options{Identity: gmailrelay.Identity{MsgIDDomain: "a.example"}})
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	short := filepath.Join(dir, "short")
	os.WriteFile(short, []byte("too short\n"), 0o600)
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, []byte("\n"), 0o600)
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"no log", []string{"--msgid-domain", "b.example"}, "--data"},
		{"both logs", []string{"--data", path, "--database", "postgres://x/y", "--msgid-domain", "b.example"}, "--data"},
		{"no domain", []string{"--data", path}, "--msgid-domain"},
		{"bad domain", []string{"--data", path, "--msgid-domain", "bad_domain!"}, "--msgid-domain"},
		{"short secret", []string{"--data", path, "--msgid-domain", "b.example", "--msgid-secret-file", short}, "at least 16"},
		{"empty secret", []string{"--data", path, "--msgid-domain", "b.example", "--msgid-secret-file", empty}, "empty"},
		{"missing secret", []string{"--data", path, "--msgid-domain", "b.example", "--msgid-secret-file", filepath.Join(dir, "nope")}, "--msgid-secret-file"},
		{"argument", []string{"--data", path, "--msgid-domain", "b.example", "extra"}, "extra"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, _, errs := runRekeyOn(tt.args...)
			if code != 2 || !strings.Contains(errs, tt.want) {
				t.Errorf("exit %d %q; want 2 naming %q", code, errs, tt.want)
			}
		})
	}
	missing := filepath.Join(dir, "missing.db")
	if code, _, errs := runRekeyOn("--data", missing, "--msgid-domain", "b.example"); code != 1 || !strings.Contains(errs, "not a gmailrelay log") {
		t.Errorf("rekey of a missing file: exit %d %q", code, errs)
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Error("rekey created the missing file")
	}

	// A secret's fingerprint is recorded, never the secret.
	secret := filepath.Join(dir, "secret")
	os.WriteFile(secret, []byte("0123456789abcdef0123\n"), 0o600)
	code, out, errs := runRekeyOn("--data", path, "--msgid-domain", "b.example", "--msgid-secret-file", secret)
	fp := gmailrelay.SecretFingerprint([]byte("0123456789abcdef0123"))
	if code != 0 || !strings.Contains(out, fp) || strings.Contains(out, "0123456789abcdef0123") {
		t.Errorf("rekey with a secret: exit %d %q %q; want the fingerprint %s and not the secret", code, out, errs, fp)
	}
	raw, _ := os.ReadFile(path)
	if bytes.Contains(raw, []byte("0123456789abcdef0123")) {
		t.Error("the secret itself is in the log file")
	}
	code, out, _ = runRekeyOn("--data", path, "--msgid-domain", "b.example", "--msgid-secret-file", secret)
	if code != 0 || !strings.Contains(out, "nothing changed") {
		t.Errorf("rekey to the same identity: exit %d %q; want 0, nothing changed", code, out)
	}
	var help strings.Builder
	run(context.Background(), []string{"help"}, io.Discard, &help)
	if !strings.Contains(help.String(), "rekey") {
		t.Errorf("gmailrelay help does not list rekey: %s", help.String())
	}
}
