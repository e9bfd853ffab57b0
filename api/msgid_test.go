package api_test

import (
	"encoding/base64"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/gmailrelay/gmailrelay/api"
	"github.com/gmailrelay/gmailrelay/relay"
)

// TestMsgIDBothPathsAgree proves, as emulator results, that one relay
// derives one Message-ID per key on both paths: /v1/send with a job key, and
// the Gmail-compatible raw path with the Message-ID /v1/msgid answered.
func TestMsgIDBothPathsAgree(t *testing.T) {
	e := newEnv(t, envOpts{})
	const key = "cus_123:order.shipped:ord_456"

	r := e.must(http.MethodGet, "/v1/msgid?key="+url.QueryEscape(key), apiToken, nil)
	if r.status != http.StatusOK {
		t.Fatalf("msgid: %d %s", r.status, r.raw)
	}
	id, _ := r.body["message_id"].(string)
	if want := relay.MessageID(key, domain); id != want {
		t.Fatalf("msgid answered %q, want %q", id, want)
	}
	if r.body["domain"] != domain || r.body["key"] != key {
		t.Fatalf("msgid body %s", r.raw)
	}
	byJob := e.must(http.MethodGet, "/v1/msgid?customer_id=cus_123&event_type=order.shipped&order_id=ord_456", apiToken, nil)
	if byJob.body["message_id"] != id {
		t.Fatalf("job parts gave %s, key gave %q", byJob.raw, id)
	}

	// Path 1: /v1/send with the job's parts.
	sent := e.must(http.MethodPost, "/v1/send", apiToken, map[string]any{
		"job": map[string]string{"customer_id": "cus_123", "event_type": "order.shipped", "order_id": "ord_456"},
		"to":  "a@example.com", "subject": "shipped", "text": "hello",
	})
	if sent.status != http.StatusOK || sent.body["message_id"] != id {
		t.Fatalf("/v1/send: %d %s, want message_id %q", sent.status, sent.raw, id)
	}

	// Path 2: the raw path, with the Message-ID from /v1/msgid and its key
	// (the relay's namespace is claimed only with the key), on a second key
	// of the same relay (the first is taken by path 1's content).
	const key2 = "cus_123:order.shipped:ord_789"
	r2 := e.must(http.MethodGet, "/v1/msgid?key="+url.QueryEscape(key2), apiToken, nil)
	id2, _ := r2.body["message_id"].(string)
	raw := "From: shop@example.com\r\nTo: a@example.com\r\nSubject: shipped\r\nMessage-ID: " + id2 +
		"\r\nDate: Thu, 03 Dec 2026 10:00:00 +0000\r\nMIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\n\r\nhello\r\n"
	g := e.must(http.MethodPost, "/gmail/v1/users/me/messages/send", apiToken,
		map[string]string{"raw": base64.RawURLEncoding.EncodeToString([]byte(raw))}, "Idempotency-Key", key2)
	if g.status != http.StatusOK {
		t.Fatalf("raw path: %d %s", g.status, g.raw)
	}
	j, _ := e.job(id2)
	if j.MessageID != id2 {
		t.Fatalf("raw path logged %q, want %q", j.MessageID, id2)
	}
	if got := e.Emulator.Deliveries(id); got != 1 {
		t.Fatalf("emulator ground truth for %s: %d deliveries, want 1", id, got)
	}
	if got := e.Emulator.Deliveries(id2); got != 1 {
		t.Fatalf("emulator ground truth for %s: %d deliveries, want 1", id2, got)
	}
	// Same key, both paths: a /v1/send with key2 must land on the raw job
	// (same Message-ID), not create a second message; its different content
	// is a 422 on that Message-ID.
	again := e.must(http.MethodPost, "/v1/send", apiToken, map[string]any{
		"key": key2, "to": "a@example.com", "subject": "shipped", "text": "hello",
	})
	if again.status != http.StatusUnprocessableEntity {
		t.Fatalf("/v1/send on the raw job's key: %d %s, want 422 (same Message-ID, other bytes)", again.status, again.raw)
	}
	if errBody, _ := again.body["error"].(map[string]any); errBody["message_id"] != id2 {
		t.Fatalf("422 names %v, want %q", again.body, id2)
	}
	if got := e.Emulator.Deliveries(id2); got != 1 {
		t.Fatalf("emulator ground truth for %s after the /v1/send: %d deliveries, want 1", id2, got)
	}
}

// TestMsgIDBadKey: a bad or missing key is a 400 naming the field; no token
// is a 401.
func TestMsgIDBadKey(t *testing.T) {
	e := newEnv(t, envOpts{})
	for _, c := range []struct{ query, field string }{
		{"", "key"},
		{"?key=", "key"},
		{"?key=%20%20", "key"},
		{"?key=a%0Ab", "key"},
		{"?key=" + strings.Repeat("k", 1025), "key"},
		{"?customer_id=c&event_type=e", "job.order_id"},
		{"?customer_id=c:1&event_type=e&order_id=o", "job.customer_id"},
		{"?key=a:b:c&customer_id=a&event_type=b&order_id=x", "job"},
	} {
		r := e.must(http.MethodGet, "/v1/msgid"+c.query, apiToken, nil)
		errBody, _ := r.body["error"].(map[string]any)
		if r.status != http.StatusBadRequest || errBody["field"] != c.field || errBody["message"] == "" {
			t.Errorf("GET /v1/msgid%s: %d %s, want 400 naming %q", c.query, r.status, r.raw, c.field)
		}
	}
	if r := e.must(http.MethodGet, "/v1/msgid?key=k", "", nil); r.status != http.StatusUnauthorized {
		t.Errorf("no token: %d, want 401", r.status)
	}
}

// TestMsgIDWithSecretAllPathsAgree: with a Message-ID secret, GET
// /v1/msgid answers HMAC-SHA256(secret, key) (scheme hmac-sha256), not
// sha256(key); /v1/send logs and sends the job under that Message-ID, and
// the raw path accepts it with its key; a relay with another secret
// derives another one. Emulator results.
func TestMsgIDWithSecretAllPathsAgree(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	e := newEnv(t, envOpts{configure: func(c *api.Config) { c.MsgIDSecret = secret }})
	const key = "cus_123:order.shipped:ord_456"
	want := relay.NewIDScheme(domain, secret).MessageID(key)
	if want == relay.MessageID(key, domain) {
		t.Fatal("the secret changes nothing")
	}
	r := e.must(http.MethodGet, "/v1/msgid?key="+url.QueryEscape(key), apiToken, nil)
	if r.status != http.StatusOK || r.body["message_id"] != want || r.body["scheme"] != "hmac-sha256" {
		t.Fatalf("msgid: %d %s, want message_id %s, scheme hmac-sha256", r.status, r.raw, want)
	}
	if strings.Contains(string(r.raw), string(secret)) {
		t.Fatalf("the answer shows the secret: %s", r.raw)
	}
	sent := e.must(http.MethodPost, "/v1/send", apiToken, map[string]any{
		"key": key, "to": "a@example.com", "subject": "shipped", "text": "hello"})
	if sent.status != http.StatusOK || sent.body["message_id"] != want {
		t.Fatalf("/v1/send: %d %s, want message_id %s", sent.status, sent.raw, want)
	}
	if j, _ := e.job(want); j.Key != key || j.State != "sent" {
		t.Fatalf("log: job %s has key %q, state %s; want %s, sent", want, j.Key, j.State, key)
	}
	if got := e.Emulator.Deliveries(want); got != 1 {
		t.Fatalf("emulator results: %d deliveries of %s, want 1", got, want)
	}
	if got := e.Emulator.Deliveries(relay.MessageID(key, domain)); got != 0 {
		t.Fatalf("emulator results: the sha256 Message-ID was sent %d times", got)
	}

	const key2 = "cus_123:order.shipped:ord_789"
	id2 := relay.NewIDScheme(domain, secret).MessageID(key2)
	raw := "From: shop@example.com\r\nTo: a@example.com\r\nSubject: shipped\r\nMessage-ID: " + id2 +
		"\r\nDate: Thu, 03 Dec 2026 10:00:00 +0000\r\n\r\nhello\r\n"
	g := e.must(http.MethodPost, "/gmail/v1/users/me/messages/send", apiToken,
		map[string]string{"raw": base64.RawURLEncoding.EncodeToString([]byte(raw))}, "Idempotency-Key", key2)
	if g.status != http.StatusOK || e.Emulator.Deliveries(id2) != 1 {
		t.Fatalf("raw path with the keyed Message-ID: %d %s; emulator deliveries %d", g.status, g.raw, e.Emulator.Deliveries(id2))
	}

	other := newEnv(t, envOpts{configure: func(c *api.Config) { c.MsgIDSecret = []byte("another-secret-of-32-bytes-00000") }})
	r = other.must(http.MethodGet, "/v1/msgid?key="+url.QueryEscape(key), apiToken, nil)
	if got, _ := r.body["message_id"].(string); got == want || got == relay.MessageID(key, domain) || !strings.HasPrefix(got, "<job-") {
		t.Fatalf("another secret answered %q (first secret's: %s)", got, want)
	}
	plain := newEnv(t, envOpts{})
	if r := plain.must(http.MethodGet, "/v1/msgid?key=k", apiToken, nil); r.body["scheme"] != "sha256" {
		t.Fatalf("no secret: scheme %v, want sha256", r.body["scheme"])
	}
}
