package relay_test

import (
	"bytes"
	"encoding/json"
	"net/mail"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/gmailrelay/gmailrelay/relay"
)

// Issue 20, smaller findings. Each case here was accepted before the fix.

// C1 controls and U+2028/U+2029 inside a raw message's header values used
// to reach Gmail untouched (only CR, LF and NUL were refused), although the
// same characters in a structured send's fields were refused.
func TestRawHeaderValuesRefuseLineBreakingCharacters(t *testing.T) {
	for name, value := range map[string]string{
		"NEL (U+0085) in Subject":      "Subject: a\u0085Bcc: e@evil.example",
		"U+2028 in Subject":            "Subject: a\u2028Bcc: e@evil.example",
		"U+2029 in To's display name":  "To: \"A\u2029B\" <b@x.com>",
		"C1 U+009B in X-Header":        "X-Note: a\u009bb",
		"vertical tab in Subject":      "Subject: a\vb",
		"form feed in Subject":         "Subject: a\fb",
		"DEL in a custom header":       "X-Note: a\x7fb",
		"escape (C0) in Reply-To name": "Reply-To: \"a\x1bb\" <r@x.com>",
	} {
		t.Run(name, func(t *testing.T) {
			raw := "Message-ID: <c1@x.example>\r\nFrom: s@x.com\r\nTo: a@x.com\r\n" + value + "\r\n\r\nbody\r\n"
			_, err := relay.PrepareRaw([]byte(raw), "", "", testDomain)
			wantInvalid(t, err, "raw")
			if !strings.Contains(err.Error(), "header") || !strings.Contains(err.Error(), "U+") {
				t.Errorf("message %q does not name the header and the character", err)
			}
			// The same through the JSON raw field.
			_, err = relay.PrepareRaw([]byte(strings.ReplaceAll(raw, "\r\n", "\n")), "k", "", testDomain)
			if err == nil {
				t.Error("LF line endings: accepted")
			}
		})
	}
	// What stays accepted: tab, non-ASCII text, 8-bit legacy bytes, and
	// any of the refused characters in the body.
	for name, raw := range map[string]string{
		"tab in Subject":           "Subject: a\tb\r\n",
		"UTF-8 Subject (RFC 6532)": "Subject: Grüße — ✓\r\n",
		"Latin-1 byte in Subject":  "Subject: Gr\xfc\xdfe\r\n",
		"U+2028 in the body":       "Subject: s\r\n\r\nline\u2028next\u0085\r\n",
	} {
		t.Run("accepted "+name, func(t *testing.T) {
			msg := "Message-ID: <ok@x.example>\r\nTo: a@x.com\r\n" + raw
			if !strings.Contains(raw, "\r\n\r\n") {
				msg += "\r\nbody\r\n"
			}
			if _, err := relay.PrepareRaw([]byte(msg), "", "", testDomain); err != nil {
				t.Fatalf("refused: %v", err)
			}
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
		_, err := relay.DecodeSendRequest([]byte(body))
		if err == nil {
			t.Errorf("%s: accepted", body)
			continue
		}
		wantInvalid(t, err, field)
	}
	// A proper pair is one character and stays accepted.
	req, err := relay.DecodeSendRequest([]byte(`{"key":"k","to":"a@x.com","subject":"\ud83d\ude00","text":"t"}`))
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
		if err := relay.CheckJSON([]byte(tc.in)); (err == nil) != tc.ok {
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
		if relay.CheckJSON(data) != nil || !json.Valid(data) {
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

// FuzzRawHeaderValues: a raw message PrepareRaw accepts carries no control
// character but tab, no C1 control and no U+2028/U+2029 in any header.
func FuzzRawHeaderValues(f *testing.F) {
	f.Add("Subject", "a\u2028b")
	f.Add("X-A", "a\u0085b")
	f.Add("To", "\"x\u2029\" <b@x.com>")
	f.Add("Subject", "plain")
	f.Fuzz(func(t *testing.T, name, value string) {
		raw := "Message-ID: <f@x.example>\r\nTo: a@x.com\r\n" + name + ": " + value + "\r\n\r\nbody\r\n"
		p, err := relay.PrepareRaw([]byte(raw), "", "", testDomain)
		if err != nil {
			return
		}
		msg, err := mail.ReadMessage(bytes.NewReader(p.Raw))
		if err != nil {
			t.Fatalf("accepted raw does not parse: %v", err)
		}
		for hn, vs := range msg.Header {
			for _, v := range vs {
				for i := 0; i < len(v); {
					r, size := utf8.DecodeRuneInString(v[i:])
					i += size
					if size == 1 && r == utf8.RuneError {
						continue
					}
					if (r < 0x20 && r != '\t') || r == 0x7f || (r >= 0x80 && r <= 0x9f) || r == 0x2028 || r == 0x2029 {
						t.Fatalf("accepted header %s holds %U", hn, r)
					}
				}
			}
		}
	})
}
