package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"path/filepath"
	"testing"

	"github.com/gmailrelay/gmailrelay/gmailfake"
)

// sendRaw posts a raw message carrying id to /v1/send (no key: the
// Message-ID is the key) and returns the status and the error body's
// code and message_id.
func sendRaw(t *testing.T, rs *relayServer, id string) (int, string, string) {
	t.Helper()
	raw := "From: shop@example.com\r\nTo: a@example.org\r\nSubject: order\r\nMessage-ID: " + id +
		"\r\nDate: Thu, 03 Dec 2026 10:00:00 +0000\r\n\r\nhello\r\n"
	req, _ := http.NewRequest(http.MethodPost, rs.URL+"/v1/send", bytes.NewReader([]byte(raw)))
	req.Header.Set("Authorization", "Bearer "+apiTok)
	req.Header.Set("Content-Type", "message/rfc822")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Error struct {
			Code      string `json:"code"`
			MessageID string `json:"message_id"`
		} `json:"error"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out.Error.Code, out.Error.MessageID
}

// A Message-ID that differs from an existing job's only in case is 409
// message_id_conflict naming that job, on the bbolt log and on
// PostgreSQL (two replicas: the twin goes to the other one); the job
// list holds no twin and the emulator no delivery of it (emulator
// results).
func TestCaseTwinRefusedOnBothBackends(t *testing.T) {
	for _, backend := range []string{"bbolt", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			// The From sendRaw writes is the account: a verified send-as.
			_, emuURL := gmailfake.NewTestServer(t, gmailfake.Options{Account: "shop@example.com"})
			var a, b *relayServer
			if backend == "bbolt" {
				a = startOn(t, emuURL, "a.example", "--data", filepath.Join(t.TempDir(), "r.db"))
				b = a
			} else {
				dbURL, _ := testDatabase(t)
				a = startOn(t, emuURL, "a.example", "--database", dbURL)
				b = startOn(t, emuURL, "a.example", "--database", dbURL)
			}
			const first, twin = "<Ticket-42@Help.Example>", "<ticket-42@help.example>"
			if st, code, _ := sendRaw(t, a, first); st != http.StatusOK {
				t.Fatalf("first: %d %s", st, code)
			}
			st, code, named := sendRaw(t, b, twin)
			if st != http.StatusConflict || code != "message_id_conflict" || named != first {
				t.Errorf("twin: %d %s naming %q; want 409 message_id_conflict naming %s", st, code, named, first)
			}
			if got := deliveries(t, emuURL, twin); got != 0 {
				t.Errorf("emulator results: %d deliveries of the twin, want 0", got)
			}
			if got := deliveries(t, emuURL, first); got != 1 {
				t.Errorf("emulator results: %d deliveries of %s, want 1", got, first)
			}
			req, _ := http.NewRequest(http.MethodGet, b.URL+"/v1/jobs/"+url.PathEscape(twin), nil)
			req.Header.Set("Authorization", "Bearer "+apiTok)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusNotFound {
				t.Errorf("GET /v1/jobs/%s: %d, want 404 (nothing logged)", twin, resp.StatusCode)
			}
		})
	}
}
