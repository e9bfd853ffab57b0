package api_test

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/gmailrelay/gmailrelay/internal/testenv"
)

// TestOneErrorWriterForBothSurfaces: an internal error (the log closed
// under the relay) is logged in full and answered "internal error" on the
// relay's surface and on the Gmail-compatible one alike. Before the two
// surfaces shared one writer, the Gmail one answered without logging.
func TestOneErrorWriterForBothSurfaces(t *testing.T) {
	logs := &testenv.LockedBuffer{}
	e := newEnv(t, envOpts{logs: logs})
	if err := e.Log.Close(); err != nil {
		t.Fatal(err)
	}
	raw := "To: a@example.org\r\nSubject: s\r\nMessage-ID: <internal-1@example.org>\r\n\r\nhi\r\n"
	for _, tc := range []struct {
		name, path string
		body       any
		want       string
	}{
		{"relay", "/v1/send", sendBody("internal-1"),
			`{"error":{"code":"internal","message":"internal error","message_id":"<job-aef796c3a00168597b0bfc905b4ea39c@inbound.example.com>"}}` + "\n"},
		{"gmail", "/gmail/v1/users/me/messages/send", map[string]any{"raw": base64.URLEncoding.EncodeToString([]byte(raw))},
			`{"error":{"code":500,"errors":[{"domain":"global","message":"internal error","reason":"backendError"}],"message":"internal error","status":"INTERNAL"}}` + "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := strings.Count(logs.String(), `"message":"internal error"`)
			r := e.must("POST", tc.path, apiToken, tc.body)
			if r.status != 500 || string(r.raw) != tc.want {
				t.Errorf("answer %d %s, want 500 %s", r.status, r.raw, tc.want)
			}
			if after := strings.Count(logs.String(), `"message":"internal error"`); after != before+1 {
				t.Errorf("internal error logged %d times, want once; logs: %s", after-before, logs.String())
			}
		})
	}
}

// TestFieldErrorsAnswerInvalidArgumentByteForByte: a field error of the
// relay (a send's field), of the fault rules and of the Gmail surface are
// answered in CONTRACT's shape, byte for byte.
func TestFieldErrorsAnswerInvalidArgumentByteForByte(t *testing.T) {
	e := newEnv(t, envOpts{})
	for _, tc := range []struct {
		name, path, token string
		body              any
		want              string
	}{
		{"send", "/v1/send", apiToken, `{"key":"k","to":"a@example.org","subject":5}`,
			`{"error":{"code":"invalid_argument","message":"subject must be a string","field":"subject"}}` + "\n"},
		{"fault rule (faultmodes)", "/admin/faults", adminToken, map[string]any{"mode": "fail-before-forward", "probability": 1.5},
			`{"error":{"code":"invalid_argument","message":"must be greater than 0 and at most 1, got 1.5","field":"probability"}}` + "\n"},
		{"gmail surface", "/gmail/v1/users/me/messages/send", apiToken, `{"raw":5}`,
			`{"error":{"code":400,"errors":[{"domain":"global","message":"invalid JSON: json: cannot unmarshal number into Go struct field gmailMessage.raw of type string (field body)","reason":"invalidArgument"}],"message":"invalid JSON: json: cannot unmarshal number into Go struct field gmailMessage.raw of type string (field body)","status":"INVALID_ARGUMENT"}}` + "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.must("POST", tc.path, tc.token, tc.body)
			if r.status != 400 || string(r.raw) != tc.want {
				t.Errorf("answer %d\n%s\nwant 400\n%s", r.status, r.raw, tc.want)
			}
		})
	}
}
