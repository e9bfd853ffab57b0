package api_test

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/gmailrelay/gmailrelay/relay"
)

// groundTruth is the emulator's own count of deliveries of Message-ID id,
// read from its control API (/_emulator/messages?rfc822msgid=).
func (e *env) groundTruth(id string) int {
	e.t.Helper()
	resp, err := http.Get(e.EmulatorURL + "/_emulator/messages?rfc822msgid=" + url.QueryEscape(id))
	if err != nil {
		e.t.Fatalf("ground truth for %s: %v", id, err)
	}
	defer resp.Body.Close()
	var body struct {
		Deliveries int `json:"deliveries"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != http.StatusOK {
		e.t.Fatalf("ground truth for %s: %d, %v", id, resp.StatusCode, err)
	}
	return body.Deliveries
}

func squatRaw(id string) string {
	return "From: shop@example.com\r\nTo: victim@example.com\r\nSubject: squat\r\nMessage-ID: " + id +
		"\r\n\r\nnot the real message\r\n"
}

// TestGmailPathCannotSquatAKeysMessageID reproduces the squatting attack:
// an API-token caller sends raw MIME on the Gmail-compatible path carrying
// the Message-ID another key derives, without that key. It is refused with
// 409 reserved_message_id and nothing is logged or sent; the real
// workflow's send with the key then goes through, delivered once. Before
// the reserved namespace the squat was sent and the key's send was
// refused for good.
func TestGmailPathCannotSquatAKeysMessageID(t *testing.T) {
	e := newEnv(t, envOpts{})
	const key = "cust:evt:1"
	id := relay.MessageID(key, domain)

	for _, squat := range []string{id, strings.ToUpper(id[:5]) + id[5:len(id)-len(domain)-1] + strings.ToUpper(domain) + ">"} {
		r := e.must(http.MethodPost, "/gmail/v1/users/me/messages/send", apiToken,
			map[string]string{"raw": base64.RawURLEncoding.EncodeToString([]byte(squatRaw(squat)))})
		ebody, _ := r.body["error"].(map[string]any)
		if r.status != http.StatusConflict || ebody["status"] != "ABORTED" ||
			!strings.Contains(ebody["message"].(string), "(field message_id)") {
			t.Fatalf("squat %s: %d %s, want 409 naming message_id", squat, r.status, r.raw)
		}
		if r.header.Get("Retry-After") != "" {
			t.Errorf("squat answered with Retry-After %q", r.header.Get("Retry-After"))
		}
	}
	// The same on /v1/send, raw MIME and JSON raw, without a key.
	rfc := e.must(http.MethodPost, "/v1/send", apiToken, []byte(squatRaw(id)))
	js := e.must(http.MethodPost, "/v1/send", apiToken, map[string]string{"raw": base64.StdEncoding.EncodeToString([]byte(squatRaw(id)))})
	other := e.must(http.MethodPost, "/v1/send", apiToken, []byte(squatRaw(id)), "Idempotency-Key", "cust:evt:2")
	for name, r := range map[string]reply{"rfc822": rfc, "json raw": js, "rfc822 with another key": other} {
		ebody, _ := r.body["error"].(map[string]any)
		if r.status != http.StatusConflict || ebody["code"] != "reserved_message_id" || ebody["field"] != "message_id" {
			t.Fatalf("%s: %d %s, want 409 reserved_message_id", name, r.status, r.raw)
		}
	}
	e.wantNothing(id)
	if n := e.groundTruth(id); n != 0 {
		t.Fatalf("after the squats: %d deliveries, want 0", n)
	}

	sent := e.must(http.MethodPost, "/v1/send", apiToken, sendBody(key), "Idempotency-Key", key)
	if sent.status != http.StatusOK || sent.body["message_id"] != id {
		t.Fatalf("the key's own send: %d %s, want 200 with %s", sent.status, sent.raw, id)
	}
	if n := e.groundTruth(id); n != 1 {
		t.Fatalf("emulator ground truth: %d deliveries of %s, want 1", n, id)
	}
}

// TestGmailPathClaimsWithTheKey: the Gmail-compatible path accepts a
// Message-ID of the relay's shape when Idempotency-Key derives it, and the
// job is the key's: a /v1/send with the key and the same bytes replays it.
func TestGmailPathClaimsWithTheKey(t *testing.T) {
	e := newEnv(t, envOpts{})
	const key = "cust:evt:3"
	id := relay.MessageID(key, domain)
	raw := []byte(squatRaw(id))
	g := e.must(http.MethodPost, "/gmail/v1/users/me/messages/send", apiToken,
		map[string]string{"raw": base64.RawURLEncoding.EncodeToString(raw)}, "Idempotency-Key", key)
	if g.status != http.StatusOK {
		t.Fatalf("claim with the key: %d %s", g.status, g.raw)
	}
	if j, _ := e.job(id); j.Key != key {
		t.Fatalf("job key %q, want %q", j.Key, key)
	}
	again := e.must(http.MethodPost, "/v1/send", apiToken, raw, "Idempotency-Key", key)
	if again.status != http.StatusOK || again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay by key: %d %s", again.status, again.raw)
	}
	if n := e.groundTruth(id); n != 1 {
		t.Fatalf("%d deliveries, want 1", n)
	}
	// A Message-ID of another domain is not reserved: the header is not used.
	const foreign = "<job-0123@elsewhere.example>"
	f := e.must(http.MethodPost, "/gmail/v1/users/me/messages/send", apiToken,
		map[string]string{"raw": base64.RawURLEncoding.EncodeToString([]byte(squatRaw(foreign)))}, "Idempotency-Key", key)
	if f.status != http.StatusOK {
		t.Fatalf("foreign job- id: %d %s", f.status, f.raw)
	}
	if j, _ := e.job(foreign); j.Key != foreign {
		t.Fatalf("foreign id's job key %q, want the Message-ID", j.Key)
	}
}
