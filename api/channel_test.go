package api_test

import (
	"context"
	"encoding/base64"
	"testing"
)

// The channel of a send can come from ?channel= (docs/api.md) on both
// send surfaces, behind any other query parameter (Google's client adds
// alt=json&prettyPrint=false to the Gmail-compatible path). Emulator
// results.
func TestEmulatorChannelFromTheQuery(t *testing.T) {
	e := newEnv(t, envOpts{})
	msg := map[string]any{"key": "q-1", "to": "a@example.org", "text": "x"}
	if r := e.must("POST", "/v1/send?channel=nope", apiToken, msg); r.status != 400 {
		t.Fatalf("/v1/send?channel=nope: %d %s, want 400 (unknown channel)", r.status, r.raw)
	}
	raw := "Message-ID: <q-2@x.example>\r\nTo: a@example.org\r\nSubject: s\r\n\r\nbody\r\n"
	gm := map[string]any{"raw": base64.URLEncoding.EncodeToString([]byte(raw))}
	if r := e.must("POST", "/gmail/v1/users/me/messages/send?alt=json&channel=nope&prettyPrint=false", apiToken, gm); r.status != 400 {
		t.Fatalf("Gmail path ?channel=nope: %d %s, want 400 (unknown channel)", r.status, r.raw)
	}
	if got := e.Emulator.Deliveries(""); got != 0 {
		t.Fatalf("the emulator has %d deliveries after two refused sends", got)
	}
	r := e.must("POST", "/gmail/v1/users/me/messages/send?alt=json&prettyPrint=false&channel=bill%69ng", apiToken, gm)
	if r.status != 200 {
		t.Fatalf("Gmail path ?channel=bill%%69ng: %d %s, want 200", r.status, r.raw)
	}
	j, err := e.Log.Get(context.Background(), "<q-2@x.example>")
	if err != nil {
		t.Fatal(err)
	}
	if j.Channel != "billing" {
		t.Errorf("job channel %q, want billing (from the escaped query value)", j.Channel)
	}
}
