package relay_test

import (
	"bytes"
	"io"
	"mime"
	"net/mail"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/gmailrelay/gmailrelay/internal/testenv"
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
			testenv.WantInvalid(t, err, "raw")
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

// FuzzRawHeaderValues: a raw message PrepareRaw accepts carries no control
// character but tab, no C1 control (nor a byte 0x80–0x9F outside UTF-8)
// and no U+2028/U+2029 in any header, and no CR, LF or NUL in the decoded
// text of any encoded-word, whatever its charset.
func FuzzRawHeaderValues(f *testing.F) {
	f.Add("Subject", "a\u2028b")
	f.Add("X-A", "a\u0085b")
	f.Add("To", "\"x\u2029\" <b@x.com>")
	f.Add("Subject", "plain")
	f.Add("Subject", "hi\x85Bcc: e@x.com")
	f.Add("Subject", "=?utf-8?q?hi=0D=0ABcc:_evil@example.com?=")
	f.Add("Sender", "=?utf-8?q?A=0D=0ABcc:_e@x.com?= <s@x.com>")
	f.Add("X-Note", "=?x-any?b?eA0KQmNjOiBldmlsQGV4YW1wbGUuY29t?=")
	f.Add("Subject", "=?iso-2022-jp?b?GyRCJEgkbxsoQg==?=")
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
		asIs := mime.WordDecoder{CharsetReader: func(_ string, r io.Reader) (io.Reader, error) { return r, nil }}
		for hn, vs := range msg.Header {
			for _, v := range vs {
				if text, err := asIs.DecodeHeader(v); err != nil || strings.ContainsAny(text, "\r\n\x00") {
					t.Fatalf("accepted header %s %q decodes to %q, %v", hn, v, text, err)
				}
				for i := 0; i < len(v); {
					r, size := utf8.DecodeRuneInString(v[i:])
					i += size
					if size == 1 && r == utf8.RuneError {
						if c := v[i-1]; c >= 0x80 && c <= 0x9f {
							t.Fatalf("accepted header %s holds the byte %#02x outside UTF-8", hn, c)
						}
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
