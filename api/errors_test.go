package api_test

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"google.golang.org/api/gmail/v1"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/option"

	"github.com/gmailrelay/gmailrelay/gmailfake"
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
// answered in the documented shape (docs/api.md#conventions), byte for byte.
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
			`{"error":{"code":400,"errors":[{"domain":"global","message":"raw must be a string, not number (field raw)","reason":"invalidArgument"}],"message":"raw must be a string, not number (field raw)","status":"INVALID_ARGUMENT"}}` + "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.must("POST", tc.path, tc.token, tc.body)
			if r.status != 400 || string(r.raw) != tc.want {
				t.Errorf("answer %d\n%s\nwant 400\n%s", r.status, r.raw, tc.want)
			}
		})
	}
}

// TestGmailPathAuthFailureIsGmailError: a missing or wrong token on the
// Gmail-compatible paths is answered in Gmail's error JSON (401
// UNAUTHENTICATED, reason authError), so Google's client returns its own
// error type with the code and a message; before, it was the relay's
// shape, which the client could not read.
func TestGmailPathAuthFailureIsGmailError(t *testing.T) {
	e := newEnv(t, envOpts{})
	raw := "To: a@example.org\r\nSubject: s\r\nMessage-ID: <auth-1@example.org>\r\n\r\nhi\r\n"
	for _, tok := range []string{"", "wrong"} {
		svc, err := gmail.NewService(context.Background(), option.WithEndpoint(e.url+"/"),
			option.WithHTTPClient(&http.Client{Transport: bearer{token: tok}}))
		if err != nil {
			t.Fatal(err)
		}
		_, err = svc.Users.Messages.Send("me", &gmail.Message{Raw: base64.URLEncoding.EncodeToString([]byte(raw))}).Do()
		var gerr *googleapi.Error
		if !errors.As(err, &gerr) || gerr.Code != 401 || gerr.Message == "" || len(gerr.Errors) == 0 || gerr.Errors[0].Reason != "authError" {
			t.Errorf("token %q: %v, want a googleapi 401 authError with a message", tok, err)
		}
	}
	// Without a body: a refused request's connection is closed unread, so
	// an upload still being written would see a broken pipe instead.
	for _, path := range []string{"/gmail/v1/users/me/messages/send", "/upload/gmail/v1/users/me/messages/send?uploadType=media"} {
		r := e.must("POST", path, "wrong", nil)
		ae, _ := r.body["error"].(map[string]any)
		if r.status != 401 || ae["code"] != float64(401) || ae["status"] != "UNAUTHENTICATED" || r.header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s: %d %v %s, want 401 UNAUTHENTICATED in Gmail's shape with WWW-Authenticate", path, r.status, r.header, r.raw)
		}
	}
	if got := e.Emulator.Deliveries("<auth-1@example.org>"); got != 0 {
		t.Errorf("an unauthenticated send reached Gmail: %d deliveries", got)
	}
}

// TestWrongMethodIs405JSON: a known path with a method it does not take
// is answered 405 with Allow and the relay's error JSON, or Gmail's on
// the Gmail-compatible paths; before, chi's 405 had an empty body.
func TestWrongMethodIs405JSON(t *testing.T) {
	e := newEnv(t, envOpts{})
	for _, tc := range []struct {
		method, path, allow string
		gmail               bool
	}{
		{"GET", "/v1/send", "POST", false},
		{"PUT", "/admin/faults", "DELETE, GET, POST", false},
		{"PATCH", "/v1/jobs/" + url.PathEscape("<a@x.org>"), "DELETE, GET", false},
		{"GET", "/gmail/v1/users/me/messages/send", "POST", true},
		{"PUT", "/upload/gmail/v1/users/me/messages/send?uploadType=media", "POST", true},
	} {
		r := e.must(tc.method, tc.path, apiToken, nil)
		allow := r.header.Values("Allow")
		slices.Sort(allow)
		if r.status != 405 || strings.Join(allow, ", ") != tc.allow || r.header.Get("Content-Type") != "application/json" {
			t.Errorf("%s %s: %d Allow %v, Content-Type %q; want 405 Allow %s, JSON", tc.method, tc.path, r.status, allow,
				r.header.Get("Content-Type"), tc.allow)
		}
		ae, _ := r.body["error"].(map[string]any)
		switch {
		case tc.gmail:
			errs, _ := ae["errors"].([]any)
			if ae["code"] != float64(405) || ae["message"] == "" || len(errs) != 1 || errs[0].(map[string]any)["reason"] != "httpMethodNotAllowed" {
				t.Errorf("%s %s: %s, want Gmail's error JSON with code 405", tc.method, tc.path, r.raw)
			}
		case ae["code"] != "method_not_allowed" || !strings.Contains(ae["message"].(string), tc.method):
			t.Errorf("%s %s: %s, want code method_not_allowed naming the method", tc.method, tc.path, r.raw)
		}
	}
}

// TestGmailPathNeverAnswersRetryAfter: the Gmail-compatible path answers
// 429 without Retry-After, as Gmail does, when the relay's own budget is
// spent, when Gmail's own 429 is relayed and while the mailbox is paused
// after it; /v1/send answers each with Retry-After. Before, both surfaces
// set it from the relay's error.
func TestGmailPathNeverAnswersRetryAfter(t *testing.T) {
	gmailSend := func(e *env, id string) reply {
		raw := "To: a@example.org\r\nSubject: s\r\nMessage-ID: " + id + "\r\n\r\nhi\r\n"
		return e.must("POST", "/gmail/v1/users/me/messages/send", apiToken, map[string]any{"raw": base64.URLEncoding.EncodeToString([]byte(raw))})
	}
	relaySend := func(e *env, key string) reply {
		b := sendBody(key)
		b["when_busy"] = "reject"
		return e.must("POST", "/v1/send", apiToken, b)
	}
	check := func(t *testing.T, what string, gm, rl reply) {
		t.Helper()
		if gm.status != 429 || gm.header.Get("Retry-After") != "" || !strings.Contains(string(gm.raw), `"status":"RESOURCE_EXHAUSTED"`) {
			t.Errorf("%s, Gmail path: %d Retry-After %q %s; want 429 RESOURCE_EXHAUSTED without Retry-After", what, gm.status, gm.header.Get("Retry-After"), gm.raw)
		}
		if rl.status != 429 || rl.header.Get("Retry-After") == "" {
			t.Errorf("%s, /v1/send: %d Retry-After %q; want 429 with Retry-After", what, rl.status, rl.header.Get("Retry-After"))
		}
	}
	t.Run("relay budget spent", func(t *testing.T) {
		e := newEnv(t, envOpts{quota: 100}) // one send a minute
		if r := relaySend(e, "ra-0"); r.status != 200 {
			t.Fatalf("first: %d %s", r.status, r.raw)
		}
		check(t, "budget spent", gmailSend(e, "<ra-1@example.org>"), relaySend(e, "ra-2"))
	})
	t.Run("Gmail 429 relayed", func(t *testing.T) {
		var answers [2]reply
		for i, send := range []func(e *env) reply{
			func(e *env) reply { return gmailSend(e, "<ra-3@example.org>") },
			func(e *env) reply { return relaySend(e, "ra-3") },
		} {
			e := newEnv(t, envOpts{})
			if _, err := e.Emulator.AddFault(gmailfake.Fault{Method: "send", Action: "error", Status: 429}); err != nil {
				t.Fatal(err)
			}
			answers[i] = send(e)
		}
		check(t, "Gmail's 429", answers[0], answers[1])
	})
	t.Run("mailbox paused", func(t *testing.T) {
		e := newEnv(t, envOpts{})
		if _, err := e.Emulator.AddFault(gmailfake.Fault{Method: "send", Action: "error", Status: 429}); err != nil {
			t.Fatal(err)
		}
		if r := relaySend(e, "ra-4"); r.status != 429 {
			t.Fatalf("send under Gmail's 429: %d %s", r.status, r.raw)
		}
		check(t, "paused", gmailSend(e, "<ra-5@example.org>"), relaySend(e, "ra-6"))
		if got := e.Emulator.Deliveries("<ra-5@example.org>"); got != 0 {
			t.Errorf("a send refused while paused reached Gmail: %d deliveries", got)
		}
	})
}
