package relay_test

import (
	"strings"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay/relay"
)

// utf7CRLF are encoded-words in UTF-7 (under some of its names) whose
// text, "a+AA0ACg-b", decodes to "a", CR, LF, "b".
var utf7CRLF = []string{
	"=?UTF-7?Q?a+AA0ACg-b?=",
	"=?utf-7?B?YStBQTBBQ2ctYg==?=",
	"=?UNICODE-1-1-UTF-7?Q?a+AA0ACg-b?=",
	"=?csUnicode11UTF7?Q?a+AA0ACg?=",
	"=?UTF-7*en?Q?a+AA0ACg-b?=",
	"=?UTF-7?Q?a+AAoAQgBjAGMAOgAgAGUAQAB4AC4AYwBvAG0?=", // LF "Bcc: e@x.com", unterminated run
	"=?UTF-7?Q?a+ICg-b?=",                               // U+2028
}

// TestRawRefusesUTF7HiddenLineBreaks: an encoded-word in UTF-7 hides CR
// and LF in base64 runs of plain ASCII; raw messages (/v1/send, the
// Gmail-compatible path) refuse it naming the header, as any other charset
// decoding to them.
func TestRawRefusesUTF7HiddenLineBreaks(t *testing.T) {
	for _, word := range utf7CRLF {
		for _, header := range []string{"Subject", "X-Note", "Comments"} {
			raw := "Message-ID: <u7@x.example>\r\nFrom: s@x.com\r\nTo: a@x.com\r\n" + header + ": " + word + "\r\n\r\nbody\r\n"
			_, err := relay.PrepareRaw([]byte(raw), "", "", testDomain)
			wantInvalidSaying(t, err, "raw", "raw "+header+" header", "encoded-word", "U+")
		}
		raw := "Message-ID: <u7@x.example>\r\nFrom: " + word + " <s@x.com>\r\nTo: a@x.com\r\n\r\nbody\r\n"
		_, err := relay.PrepareRaw([]byte(raw), "", "", testDomain)
		wantInvalidSaying(t, err, "raw", "raw From header")
	}
	// Still accepted: UTF-7 without such characters, and a literal "+-".
	for _, word := range []string{"=?UTF-7?Q?Hi_Mom_-+Jjo--!?=", "=?UTF-7?Q?1_+-_1?=", "=?UTF-7?Q?+ZeVnLIqe-?="} {
		raw := "Message-ID: <u7ok@x.example>\r\nTo: a@x.com\r\nSubject: " + word + "\r\n\r\nbody\r\n"
		if _, err := relay.PrepareRaw([]byte(raw), "", "", testDomain); err != nil {
			t.Errorf("%s refused: %v", word, err)
		}
	}
}

// TestStructuredRefusesEncodedLineBreaks: the JSON path refuses the same
// encoded-words in the subject and in extra headers, naming the field,
// though it writes them encoded once more: a reader that decodes twice
// must not find a line break either.
func TestStructuredRefusesEncodedLineBreaks(t *testing.T) {
	for _, word := range append(utf7CRLF, "=?utf-8?q?a=0D=0ABcc:_e@x.com?=") {
		req := relay.SendRequest{Key: "c:e:1", To: relay.AddressList{"a@example.org"}, Text: "b"}
		req.Subject = word
		_, err := relay.Prepare(req, "", testDomain, time.Unix(0, 0))
		wantInvalidSaying(t, err, "subject", "encoded-word")
		req.Subject, req.Headers = "s", map[string]string{"X-Note": "x " + word}
		_, err = relay.Prepare(req, "", testDomain, time.Unix(0, 0))
		wantInvalidSaying(t, err, "headers.X-Note", "encoded-word")
	}
	req := relay.SendRequest{Key: "c:e:1", To: relay.AddressList{"a@example.org"}, Text: "b",
		Subject: "=?UTF-7?Q?Hi_Mom_-+Jjo--!?= " + strings.Repeat("ok ", 3)}
	if _, err := relay.Prepare(req, "", testDomain, time.Unix(0, 0)); err != nil {
		t.Errorf("harmless UTF-7 word refused: %v", err)
	}
}
