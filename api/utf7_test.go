package api_test

import (
	"encoding/base64"
	"net/http"
	"strings"
	"testing"
)

// TestEveryPathRefusesUTF7LineBreaks: a header with a UTF-7 encoded-word
// decoding to CR LF is 400 naming the header on every path that takes
// headers from a caller: /v1/send (structured, raw field, message/rfc822)
// and the Gmail-compatible path (JSON raw, media upload); nothing is
// logged or sent.
func TestEveryPathRefusesUTF7LineBreaks(t *testing.T) {
	e := newEnv(t, envOpts{})
	const word = "=?UTF-7?Q?a+AA0ACg-Bcc:_e@x.example?="
	const id = "<utf7@x.example>"
	raw := "From: shop@example.com\r\nTo: a@example.com\r\nMessage-ID: " + id + "\r\nX-Note: " + word + "\r\n\r\nhi\r\n"
	b64 := base64.RawURLEncoding.EncodeToString([]byte(raw))
	for name, r := range map[string]reply{
		"structured": e.must(http.MethodPost, "/v1/send", apiToken, map[string]any{
			"key": "utf7:1", "to": "a@example.com", "subject": "s", "text": "t", "headers": map[string]string{"X-Note": word}}),
		"raw field":    e.must(http.MethodPost, "/v1/send", apiToken, map[string]any{"raw": b64}),
		"rfc822":       e.must(http.MethodPost, "/v1/send", apiToken, []byte(raw)),
		"gmail json":   e.must(http.MethodPost, "/gmail/v1/users/me/messages/send", apiToken, map[string]any{"raw": b64}),
		"gmail upload": e.must(http.MethodPost, "/upload/gmail/v1/users/me/messages/send?uploadType=media", apiToken, []byte(raw)),
	} {
		if r.status != http.StatusBadRequest || !strings.Contains(string(r.raw), "X-Note") || !strings.Contains(string(r.raw), "U+000D") {
			t.Errorf("%s: %d %s, want 400 naming X-Note and U+000D", name, r.status, r.raw)
		}
	}
	e.wantNothing(id)
}
