package api_test

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"testing"

	"github.com/gmailrelay/gmailrelay"
)

// rawWithMessageID is a small raw message carrying id.
func rawWithMessageID(id string) []byte {
	return []byte("From: shop@example.com\r\nTo: a@example.com\r\nSubject: order\r\nMessage-ID: " + id +
		"\r\nDate: Thu, 03 Dec 2026 10:00:00 +0000\r\n\r\nhello\r\n")
}

// TestCaseTwinIsAConflict: job identity ignores ASCII case in the
// Message-ID. A raw message whose Message-ID differs from an existing
// job's only in case — on /v1/send (message/rfc822) or the
// Gmail-compatible path — is 409 message_id_conflict naming the existing
// job; nothing is logged or sent for it (emulator results), and the
// existing job still replays.
func TestCaseTwinIsAConflict(t *testing.T) {
	e := newEnv(t, envOpts{})
	const first = "<Order-1@Shop.Example>"
	if r := e.must(http.MethodPost, "/v1/send", apiToken, rawWithMessageID(first)); r.status != http.StatusOK {
		t.Fatalf("first send: %d %s", r.status, r.raw)
	}
	statsBefore, err := e.Log.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, twin := range []string{"<order-1@shop.example>", "<ORDER-1@SHOP.EXAMPLE>"} {
		r := e.must(http.MethodPost, "/v1/send", apiToken, rawWithMessageID(twin))
		errBody, _ := r.body["error"].(map[string]any)
		if r.status != http.StatusConflict || errBody["code"] != "message_id_conflict" || errBody["message_id"] != first ||
			errBody["field"] != "message_id" {
			t.Errorf("/v1/send of %s: %d %s; want 409 message_id_conflict naming %s", twin, r.status, r.raw, first)
		}
		g := e.must(http.MethodPost, "/gmail/v1/users/me/messages/send", apiToken,
			map[string]string{"raw": base64.RawURLEncoding.EncodeToString(rawWithMessageID(twin))})
		if g.status != http.StatusConflict {
			t.Errorf("Gmail-compatible send of %s: %d %s; want 409", twin, g.status, g.raw)
		}
		if _, err := e.Log.Get(context.Background(), twin); !errors.Is(err, gmailrelay.ErrNotFound) {
			t.Errorf("the log has a job %s: %v", twin, err)
		}
		if got := e.Emulator.Deliveries(twin); got != 0 {
			t.Errorf("emulator results: %d deliveries of %s, want 0", got, twin)
		}
	}
	statsAfter, err := e.Log.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if statsAfter.Jobs != statsBefore.Jobs || statsAfter.Lines != statsBefore.Lines {
		t.Errorf("log after the twins: %d jobs %d lines, want %d %d", statsAfter.Jobs, statsAfter.Lines, statsBefore.Jobs, statsBefore.Lines)
	}
	if r := e.must(http.MethodPost, "/v1/send", apiToken, rawWithMessageID(first)); r.status != http.StatusOK || r.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("the first job again: %d %s, want a replay", r.status, r.raw)
	}
	if got := len(e.Emulator.Messages("")); got != 1 || e.Emulator.Deliveries(first) != 1 {
		t.Errorf("emulator results: %d messages in all, %d deliveries of %s; want 1 and 1", got, e.Emulator.Deliveries(first), first)
	}
}
