package api_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/gmailrelay/gmailrelay/api"
)

// errorOf is the error object of a relay answer: its code, field and
// message.
func errorOf(t *testing.T, raw []byte) (code, field, message string) {
	t.Helper()
	var body struct {
		Error struct{ Code, Field, Message string } `json:"error"`
	}
	if err := json.Unmarshal(raw, &body); err != nil {
		t.Fatalf("answer %s is not the relay's error JSON: %v", raw, err)
	}
	return body.Error.Code, body.Error.Field, body.Error.Message
}

// A request over its size limit is 413 naming the request, not "body"
// (a field of /v1/send: text's alias), whether its Content-Length says so
// before reading or a chunked body runs over while it is read.
func TestTooLargeNamesTheRequest(t *testing.T) {
	e := newEnv(t, envOpts{})
	big := `{"key":"big","to":"a@example.org","text":"` + strings.Repeat("a", api.MaxJSONBytes+10) + `"}`
	for name, body := range map[string]io.Reader{
		"Content-Length": strings.NewReader(big),
		"chunked":        io.MultiReader(strings.NewReader(big)), // no Len: sent chunked
	} {
		t.Run(name, func(t *testing.T) {
			req, _ := http.NewRequest("POST", e.url+"/v1/send", body)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer "+apiToken)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusRequestEntityTooLarge {
				t.Fatalf("status %d %s, want 413", resp.StatusCode, raw)
			}
			if code, field, _ := errorOf(t, raw); code != "too_large" || field != "request" {
				t.Errorf("code %q field %q, want too_large naming field request", code, field)
			}
		})
	}
}

// A body that is not JSON says where it stops being JSON (line, column
// and byte offset) on /v1/send, on the admin bodies and on the Gmail
// surface, naming no field (the body as a whole, as for CheckJSON's
// refusals); a value of the wrong type names its field.
func TestBadJSONSaysWhere(t *testing.T) {
	e := newEnv(t, envOpts{})
	tests := []struct {
		name, path, token, body string
		wantField, wantMessage  string
	}{
		{"send, bad character", "/v1/send", apiToken, "{\n  \"key\": \"k\",\n  \"to\": customer@example.org\n}",
			"", "invalid character 'c' looking for beginning of value at line 3, column 9 (byte 24)"},
		{"send, cut off", "/v1/send", apiToken, `{"key":"k","to":"é@example.org"`,
			"", "unexpected end of JSON input at line 1, column 32 (byte 32)"},
		{"send, trailing comma", "/v1/send", apiToken, "{\"key\":\"k\",}",
			"", "at line 1, column 12 (byte 11)"},
		{"admin fault rule", "/admin/faults", adminToken, "{\"mode\": 'fail-before-forward'}",
			"", "at line 1, column 10 (byte 9)"},
		{"admin fault rule, cut off", "/admin/faults", adminToken, "{\"mode\":\n",
			"", "unexpected end of body at line 2, column 1 (byte 9)"},
		{"admin resolve", "/v1/jobs/job-x@example.org/resolve", adminToken, "{\"action\": \"retry\",\n\"note\": }",
			"", "invalid character '}' looking for beginning of value at line 2, column 9 (byte 28)"},
		{"gmail surface", "/gmail/v1/users/me/messages/send", apiToken, "{\"raw\": \"x\" \"threadId\": \"t\"}",
			"", "at line 1, column 13 (byte 12)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := e.must("POST", tt.path, tt.token, tt.body)
			if r.status != 400 {
				t.Fatalf("status %d %s, want 400", r.status, r.raw)
			}
			if strings.HasPrefix(tt.path, "/gmail/") {
				// Gmail's error JSON: the message only.
				if !strings.Contains(string(r.raw), tt.wantMessage) {
					t.Errorf("answer %s does not say %q", r.raw, tt.wantMessage)
				}
				return
			}
			_, field, msg := errorOf(t, r.raw)
			if field != tt.wantField || !strings.Contains(msg, tt.wantMessage) {
				t.Errorf("field %q message %q, want field %q and a message holding %q", field, msg, tt.wantField, tt.wantMessage)
			}
		})
	}
}
