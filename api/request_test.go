package api_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/gmailrelay/gmailrelay/api"
	"github.com/gmailrelay/gmailrelay/internal/testenv"
)

func TestDecodeSendRequest(t *testing.T) {
	req, err := api.DecodeSendRequest([]byte(`{"key":"k","to":"a@x.com, b@y.com","cc":["c@x.com","D <d@x.com>"],"bcc":null,
		"reply_to":"","job":{"customer_id":"cus_1","event_type":"e","order_id":456},
		"headers":{"X-A":"1"},"body":"hi","thread_id":"t1","channel":"receipts"}`))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(req.To, "|"), "a@x.com, b@y.com"; got != want {
		t.Errorf("To = %q, want %q", got, want)
	}
	if got, want := strings.Join(req.Cc, "|"), "c@x.com|D <d@x.com>"; got != want {
		t.Errorf("Cc = %q, want %q", got, want)
	}
	if req.Bcc != nil || req.ReplyTo != nil {
		t.Errorf("Bcc, ReplyTo = %q, %q; want nil, nil", req.Bcc, req.ReplyTo)
	}
	if req.Job == nil || req.Job.OrderID != "456" || req.Job.CustomerID != "cus_1" {
		t.Errorf("Job = %+v, want order_id 456", req.Job)
	}
	if req.Headers["X-A"] != "1" || req.Body != "hi" || req.ThreadID != "t1" || req.Channel != "receipts" {
		t.Errorf("decoded %+v", req)
	}

	bad := []struct{ name, body, field string }{
		{"not JSON", `{`, ""},
		{"array", `[]`, ""},
		{"string", `"x"`, ""},
		{"null", `null`, ""},
		{"trailing data", `{} {}`, ""},
		{"unknown field", `{"key":"k","attachments":[]}`, "attachments"},
		{"field names are exact", `{"Subject":"x"}`, "Subject"},
		{"number subject", `{"subject":5}`, "subject"},
		{"object to", `{"to":{"a":"b"}}`, "to"},
		{"numbers in to", `{"to":[1]}`, "to"},
		{"header value not string", `{"headers":{"X-A":1}}`, "headers"},
		{"unknown job field", `{"job":{"customer":"x"}}`, "job.customer"},
		{"float order id", `{"job":{"order_id":1.5}}`, "job.order_id"},
		{"job not object", `{"job":"x"}`, "job"},
		{"invalid UTF-8 in subject", "{\"subject\":\"a\xffb\"}", "subject"},
		{"invalid UTF-8 in a header value", "{\"headers\":{\"X-A\":\"a\xc3\"}}", "headers"},
		{"invalid UTF-8 in a job part", "{\"job\":{\"order_id\":\"\xed\xa0\x80\"}}", "job"},
		{"duplicate key", `{"key":"a","to":"a@x.com","key":"b"}`, "key"},
		{"duplicate job part", `{"job":{"order_id":"1","customer_id":"c","order_id":"2"}}`, "job.order_id"},
		{"duplicate header", `{"headers":{"X-A":"1","X-A":"2"}}`, "headers.X-A"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			_, err := api.DecodeSendRequest([]byte(tt.body))
			testenv.WantInvalid(t, err, tt.field)
		})
	}
}

// encoding/json turns an unpaired surrogate escape into U+FFFD silently,
// so "k\ud800" and "k\udc00" (and "k\ufffd") were one key and replayed
// each other.
func TestLoneSurrogateEscapesAreRefused(t *testing.T) {
	for body, field := range map[string]string{
		`{"key":"k\ud800","to":"a@x.com","text":"t"}`:                                      "key",
		`{"key":"k\udc00","to":"a@x.com","text":"t"}`:                                      "key",
		`{"key":"k","to":"a@x.com","subject":"\ud83d","text":"t"}`:                         "subject",
		`{"key":"k","to":"a@x.com","subject":"x","text":"\ud83dx"}`:                        "text",
		`{"key":"k","to":"a@x.com","headers":{"X-A":"\udfff"},"text":"t"}`:                 "headers",
		`{"job":{"customer_id":"c\ud800","event_type":"e","order_id":"o"},"to":"a@x.com"}`: "job",
		`{"key":"k","to":["a@x.com","\ud800 <b@x.com>"],"text":"t"}`:                       "to",
		`{"key":"k","to":"a@x.com","text":"\ud800\ud800"}`:                                 "text",
	} {
		_, err := api.DecodeSendRequest([]byte(body))
		if err == nil {
			t.Errorf("%s: accepted", body)
			continue
		}
		testenv.WantInvalid(t, err, field)
	}
	// A proper pair is one character and stays accepted.
	req, err := api.DecodeSendRequest([]byte(`{"key":"k","to":"a@x.com","subject":"\ud83d\ude00","text":"t"}`))
	if err != nil || req.Subject != "😀" {
		t.Fatalf("surrogate pair: %q, %v", req.Subject, err)
	}
}

func TestCheckJSON(t *testing.T) {
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{`{"a":"\ud83d\ude00","b":"\u00e9\\ud800"}`, true}, // an escaped backslash, then text
		{`{"a":"x","A":"y"}`, false},                       // the decoder folds case for struct fields
		{`{"a":{"b":1,"b":2}}`, false},
		{`{"a":[{"b":1},{"b":2}]}`, true},
		{"{\"a\":\"\xc3\"}", false},
		{`["\udc00"]`, false},
		{`{"k\ud800":1}`, false},
	} {
		if err := api.CheckJSON([]byte(tc.in)); (err == nil) != tc.ok {
			t.Errorf("CheckJSON(%s) = %v, want ok %v", tc.in, err, tc.ok)
		}
	}
}

// FuzzCheckJSON: whatever CheckJSON lets through, encoding/json decodes
// without inventing a U+FFFD, so no two different bodies become one value.
func FuzzCheckJSON(f *testing.F) {
	for _, s := range []string{`{"a":"\ud83d\ude00"}`, `{"a":"\ud800"}`, `["\\ud800"]`, `{"a":1,"a":2}`, "\"\xff\"", `"\ufffd"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if api.CheckJSON(data) != nil || !json.Valid(data) {
			return
		}
		if bytes.Contains(data, []byte("\uFFFD")) || bytes.Contains(bytes.ToLower(data), []byte(`\ufffd`)) {
			return // the caller wrote U+FFFD itself
		}
		var v any
		if err := json.Unmarshal(data, &v); err != nil {
			t.Fatalf("valid JSON does not decode: %v", err)
		}
		out, _ := json.Marshal(v)
		if bytes.Contains(out, []byte("\uFFFD")) || bytes.Contains(out, []byte(`\ufffd`)) {
			t.Fatalf("CheckJSON accepted %q, which decodes with an invented U+FFFD: %s", data, out)
		}
	})
}
