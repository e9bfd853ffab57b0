package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/relay"
)

// The secrets the tests use, and the HMAC vector of the first (computed
// apart from this code): HMAC-SHA256(secretA, "cus_123:order.shipped:ord_456").
const (
	secretA      = "0123456789abcdef0123456789abcdef"
	secretB      = "another-secret-of-32-bytes-00000"
	secretVector = "<job-b6e4c550ea21656260e0b77b6134d3ac@inbound.yourdomain.com>\n"
)

// writeSecret writes a secret file (with a trailing newline, as echo
// writes one) and returns its path.
func writeSecret(t *testing.T, secret string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "msgid.secret")
	if err := os.WriteFile(p, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestMsgIDWithSecret: gmailrelay msgid derives HMAC-SHA256(secret, key)
// with --msgid-secret-file or GMAILRELAY_MSGID_SECRET_FILE; another secret
// derives another Message-ID; a missing, empty or short file exits 2
// naming it.
func TestMsgIDWithSecret(t *testing.T) {
	a, b := writeSecret(t, secretA), writeSecret(t, secretB)
	args := []string{"--key", "cus_123:order.shipped:ord_456", "--domain", "inbound.yourdomain.com"}
	out := func(getenv func(string) string, extra ...string) string {
		t.Helper()
		var stdout, stderr bytes.Buffer
		if code := msgID(append(append([]string{}, args...), extra...), getenv, &stdout, &stderr); code != 0 {
			t.Fatalf("msgid %v: exit %d %q", extra, code, stderr.String())
		}
		return stdout.String()
	}
	if got := out(env(nil), "--msgid-secret-file", a); got != secretVector {
		t.Errorf("with --msgid-secret-file: %q, want %q", got, secretVector)
	}
	if got := out(env(map[string]string{msgidSecretEnv: a})); got != secretVector {
		t.Errorf("with $%s: %q, want %q", msgidSecretEnv, got, secretVector)
	}
	if got := out(env(nil), "--msgid-secret-file", b); got == secretVector || !strings.HasPrefix(got, "<job-") {
		t.Errorf("another secret: %q", got)
	}
	if got := out(env(nil)); got == secretVector {
		t.Errorf("no secret gave the keyed Message-ID")
	}
	dir := t.TempDir()
	short := filepath.Join(dir, "short")
	os.WriteFile(short, []byte("short\n"), 0o600)
	for name, path := range map[string]string{"missing": filepath.Join(dir, "nope"), "short": short} {
		var stdout, stderr bytes.Buffer
		code := msgID(append(append([]string{}, args...), "--msgid-secret-file", path), env(nil), &stdout, &stderr)
		if code != 2 || stdout.Len() != 0 || !strings.Contains(stderr.String(), path) {
			t.Errorf("%s secret file: exit %d, stdout %q, stderr %q; want 2 naming %s", name, code, stdout.String(), stderr.String(), path)
		}
	}
}

// TestServeSecretFileRefusals: serve refuses a missing, empty or short
// secret file, from the flag, the environment or the policy, with exit 2
// and a message naming the file.
func TestServeSecretFileRefusals(t *testing.T) {
	dir := t.TempDir()
	short, empty := filepath.Join(dir, "short"), filepath.Join(dir, "empty")
	os.WriteFile(short, []byte("fifteen bytes!!\n"), 0o600)
	os.WriteFile(empty, []byte("\n"), 0o600)
	missing := filepath.Join(dir, "missing")
	pol := filepath.Join(dir, "policy.yaml")
	os.WriteFile(pol, []byte("msgid_secret_file: "+short+"\n"), 0o600)
	for _, tt := range []struct {
		name string
		args []string
		env  map[string]string
		want []string
	}{
		{"missing", []string{"--msgid-secret-file", missing}, nil, []string{"--msgid-secret-file", missing}},
		{"empty", []string{"--msgid-secret-file", empty}, nil, []string{empty, "empty"}},
		{"short", []string{"--msgid-secret-file", short}, nil, []string{short, "at least 16"}},
		{"env", nil, map[string]string{"GMAILRELAY_MSGID_SECRET_FILE": missing}, []string{missing}},
		{"policy", []string{"--policy", pol}, nil, []string{"msgid_secret_file", short}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var errb strings.Builder
			args := append([]string{"--addr", "127.0.0.1:0", "--data", filepath.Join(t.TempDir(), "r.db")}, tt.args...)
			_, err := parseServeFlags(args, env(tt.env), io.Discard)
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
			// runServe's exit code for it: 2, as every configuration error.
			t.Setenv("GMAILRELAY_MSGID_SECRET_FILE", tt.env["GMAILRELAY_MSGID_SECRET_FILE"])
			if code := runServe(context.Background(), args, io.Discard, &errb); code != 2 {
				t.Errorf("serve: exit %d %q, want 2", code, errb.String())
			}
		})
	}
	// The flag wins over the policy's file.
	good := writeSecret(t, secretA)
	c, err := parseServeFlags([]string{"--addr", "127.0.0.1:0", "--policy", pol, "--msgid-secret-file", good}, env(nil), io.Discard)
	if err != nil || string(c.msgidSecret) != secretA {
		t.Fatalf("flag over policy: %v, secret %q", err, c.msgidSecret)
	}
}

// startWithSecret starts a relay on the bbolt log path in front of the
// emulator at emuURL, with domain and the secret file (none when "").
func startWithSecret(t *testing.T, emuURL, domain, secretFile, path string) *relayServer {
	t.Helper()
	args := []string{"--data", path}
	if secretFile != "" {
		args = append(args, "--msgid-secret-file", secretFile)
	}
	return startOn(t, emuURL, domain, args...)
}

// A relay without a secret sends key K; a restart with a secret exits 2
// naming the log's identity and the new fingerprint, and so does one with
// another secret after a rekey to the first; after gmailrelay rekey
// --msgid-secret-file the relay replays K from its old job (the key
// index maps it) while new keys get HMAC Message-IDs, and the emulator
// has one delivery of K (emulator results).
func TestServeSecretChangeRefusedUntilRekeyThenReplaysByKey(t *testing.T) {
	_, emuURL := gmailfake.NewTestServer(t, gmailfake.Options{})
	path := filepath.Join(t.TempDir(), "r.db")
	fileA, fileB := writeSecret(t, secretA), writeSecret(t, secretB)
	fpA, fpB := gmailrelay.SecretFingerprint([]byte(secretA)), gmailrelay.SecretFingerprint([]byte(secretB))

	plain := startWithSecret(t, emuURL, "a.example", "", path)
	st, oldID, _ := sendKey(t, plain, rekeyKey)
	if st != http.StatusOK || oldID != relay.MessageID(rekeyKey, "a.example") {
		t.Fatalf("send without a secret: %d %s", st, oldID)
	}
	if err := plain.close(context.Background()); err != nil {
		t.Fatal(err)
	}

	before, _ := os.ReadFile(path)
	refused := func(secretFile string, want ...string) {
		t.Helper()
		var errb strings.Builder
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		args := []string{"--addr", "127.0.0.1:0", "--gmail-endpoint", emuURL, "--msgid-domain", "a.example",
			"--data", path, "--msgid-secret-file", secretFile}
		if code := runServe(ctx, args, io.Discard, &errb); code != 2 {
			t.Fatalf("serve with %s: exit %d (%s), want 2", secretFile, code, errb.String())
		}
		for _, w := range append(want, "gmailrelay rekey", "--msgid-secret-file "+secretFile) {
			if !strings.Contains(errb.String(), w) {
				t.Errorf("serve's refusal %q does not say %q", errb.String(), w)
			}
		}
		if strings.Contains(errb.String(), secretA) || strings.Contains(errb.String(), secretB) {
			t.Errorf("serve's refusal shows a secret: %q", errb.String())
		}
	}
	refused(fileA, fpA)
	if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
		t.Error("the refused start changed the log file")
	}

	code, out, errs := runRekeyOn("--data", path, "--msgid-domain", "a.example", "--msgid-secret-file", fileA)
	if code != 0 || !strings.Contains(out, fpA) {
		t.Fatalf("rekey to secret A: exit %d %q %q", code, out, errs)
	}
	refused(fileB, fpA, fpB)

	keyed := startWithSecret(t, emuURL, "a.example", fileA, path)
	st, id, replayed := sendKey(t, keyed, rekeyKey)
	if st != http.StatusOK || id != oldID || !replayed {
		t.Errorf("the old key with the secret: %d %s replayed %t; want 200, a replay of %s", st, id, replayed, oldID)
	}
	if got := deliveries(t, emuURL, oldID); got != 1 {
		t.Errorf("emulator results: %d deliveries of %s, want 1", got, oldID)
	}
	if got := deliveries(t, emuURL, relay.NewIDScheme("a.example", []byte(secretA)).MessageID(rekeyKey)); got != 0 {
		t.Errorf("emulator results: the old key was sent again under its keyed Message-ID (%d)", got)
	}
	const newKey = "cus_7:order.shipped:ord_9"
	want := relay.NewIDScheme("a.example", []byte(secretA)).MessageID(newKey)
	if st, id, _ := sendKey(t, keyed, newKey); st != http.StatusOK || id != want {
		t.Errorf("a new key with the secret: %d %s, want %s", st, id, want)
	}
	// GET /v1/msgid on the running relay agrees with the send path.
	req, _ := http.NewRequest(http.MethodGet, keyed.URL+"/v1/msgid?key="+url.QueryEscape(newKey), nil)
	req.Header.Set("Authorization", "Bearer "+apiTok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), want) {
		t.Errorf("GET /v1/msgid: %s, want %s", body, want)
	}
}

// PostgreSQL: a replica with the Message-ID secret A runs; a second one
// with secret B exits 2 naming both fingerprints, and one without a
// secret exits 2 too; a second replica with A starts and derives the same
// Message-ID for a key.
func TestServeReplicaWithAnotherSecretRefused(t *testing.T) {
	dbURL, _ := testDatabase(t)
	_, emuURL := gmailfake.NewTestServer(t, gmailfake.Options{})
	fileA, fileB := writeSecret(t, secretA), writeSecret(t, secretB)
	fpA, fpB := gmailrelay.SecretFingerprint([]byte(secretA)), gmailrelay.SecretFingerprint([]byte(secretB))
	a := startOn(t, emuURL, "a.example", "--database", dbURL, "--msgid-secret-file", fileA)
	for _, tt := range []struct {
		extra []string
		want  []string
	}{
		{[]string{"--msgid-secret-file", fileB}, []string{fpA, fpB}},
		{nil, []string{fpA}},
	} {
		var errb strings.Builder
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		args := append([]string{"--addr", "127.0.0.1:0", "--gmail-endpoint", emuURL, "--msgid-domain", "a.example",
			"--database", dbURL}, tt.extra...)
		code := runServe(ctx, args, io.Discard, &errb)
		cancel()
		if code != 2 {
			t.Fatalf("replica %v: exit %d (%s), want 2", tt.extra, code, errb.String())
		}
		for _, w := range append(tt.want, "gmailrelay rekey") {
			if !strings.Contains(errb.String(), w) {
				t.Errorf("replica %v: refusal %q does not say %q", tt.extra, errb.String(), w)
			}
		}
	}
	b := startOn(t, emuURL, "a.example", "--database", dbURL, "--msgid-secret-file", fileA)
	const key = "cus_8:order.shipped:ord_1"
	want := relay.NewIDScheme("a.example", []byte(secretA)).MessageID(key)
	if st, id, _ := sendKey(t, a, key); st != http.StatusOK || id != want {
		t.Fatalf("replica A: %d %s, want %s", st, id, want)
	}
	if st, id, replayed := sendKey(t, b, key); st != http.StatusOK || id != want || !replayed {
		t.Errorf("replica B: %d %s replayed %t, want a replay of %s", st, id, replayed, want)
	}
	if got := deliveries(t, emuURL, want); got != 1 {
		t.Errorf("emulator results: %d deliveries of %s, want 1", got, want)
	}
}
