package relay_test

import (
	"bytes"
	"io"
	"mime"
	"mime/multipart"
	"mime/quotedprintable"
	"net/mail"
	"strings"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay/internal/testenv"
	"github.com/gmailrelay/gmailrelay/relay"
)

const testID = "<job-1ca74402c25f227b40cf235d910d7664@inbound.yourdomain.com>"

var testDate = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

func baseMessage() relay.Message {
	return relay.Message{
		From:    "Shop <shop@example.com>",
		To:      []string{"a@example.com"},
		Subject: "Your order shipped",
		Text:    "Hello",
	}
}

func mustParse(t *testing.T, raw []byte) *mail.Message {
	t.Helper()
	msg, err := mail.ReadMessage(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("parse built message: %v\n%s", err, raw)
	}
	return msg
}

func TestBuildMIMEHeaderInjection(t *testing.T) {
	wantRefusals(t, []refusal{
		{"CRLF in subject", func(m *relay.Message) { m.Subject = "hi\r\nBcc: evil@x.com" }, "subject"},
		{"LF in subject", func(m *relay.Message) { m.Subject = "hi\nBcc: evil@x.com" }, "subject"},
		{"CR in subject", func(m *relay.Message) { m.Subject = "hi\rBcc: evil@x.com" }, "subject"},
		{"NUL in subject", func(m *relay.Message) { m.Subject = "hi\x00" }, "subject"},
		{"CRLF in to", func(m *relay.Message) { m.To = []string{"a@x.com\r\nBcc: evil@x.com"} }, "to"},
		{"LF in to", func(m *relay.Message) { m.To = []string{"a@x.com\nBcc: evil@x.com"} }, "to"},
		{"CRLF in from", func(m *relay.Message) { m.From = "a@x.com\r\nBcc: evil@x.com" }, "from"},
		{"CR in cc", func(m *relay.Message) { m.Cc = []string{"c@x.com\rBcc: evil@x.com"} }, "cc"},
		{"LF in bcc", func(m *relay.Message) { m.Bcc = []string{"b@x.com\nTo: evil@x.com"} }, "bcc"},
		{"CRLF in reply_to", func(m *relay.Message) { m.ReplyTo = []string{"r@x.com\r\nBcc: evil@x.com"} }, "reply_to"},
		{"CRLF in quoted display name", func(m *relay.Message) { m.To = []string{"\"A\r\nBcc: evil@x.com\" <a@x.com>"} }, "to"},
		{"CRLF in encoded display name", func(m *relay.Message) {
			m.To = []string{"=?utf-8?q?A=0D=0ABcc:_evil@x.com?= <a@x.com>"}
		}, "to"},
		{"LF in encoded from name", func(m *relay.Message) { m.From = "=?utf-8?b?QQpCY2M6IGV2aWxAeC5jb20=?= <a@x.com>" }, "from"},
	})
}

// refusal is an edit of baseMessage that BuildMIME must refuse, naming field.
type refusal struct {
	name  string
	edit  func(m *relay.Message)
	field string
}

// wantRefusals checks, for each refusal, that BuildMIME answers an invalid
// argument error on its field and returns no message with it.
func wantRefusals(t *testing.T, tests []refusal) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := baseMessage()
			tt.edit(&m)
			raw, err := relay.BuildMIME(m, testID, testDate)
			testenv.WantInvalid(t, err, tt.field)
			if raw != nil {
				t.Fatalf("BuildMIME returned a message with its error:\n%s", raw)
			}
		})
	}
}

// TestBuildMIMECustomHeaderRefusals: the custom headers BuildMIME refuses,
// naming the field: a line break in a name or value (header injection), a
// name that is not a plain token, a header the relay writes itself (in any
// case), a name twice and an empty name.
func TestBuildMIMECustomHeaderRefusals(t *testing.T) {
	tests := []struct {
		name    string
		headers map[string]string
		field   string
	}{
		{"CRLF in header name", map[string]string{"X-A\r\nBcc": "evil@x.com"}, "headers"},
		{"colon in header name", map[string]string{"Bcc: evil@x.com\r\nX-A": "v"}, "headers"},
		{"space in header name", map[string]string{"X A": "v"}, "headers"},
		{"CRLF in header value", map[string]string{"X-A": "v\r\nBcc: evil@x.com"}, "headers.X-A"},
		{"LF in header value", map[string]string{"x-a": "v\nBcc: evil@x.com"}, "headers.X-A"},
		{"CR in header value", map[string]string{"X-A": "v\rBcc: evil@x.com"}, "headers.X-A"},
		{"reserved Message-ID", map[string]string{"Message-ID": "<x@y>"}, "headers"},
		{"reserved bcc any case", map[string]string{"bCC": "evil@x.com"}, "headers"},
		{"reserved content-type", map[string]string{"Content-Type": "text/html"}, "headers"},
		{"reserved resent-to", map[string]string{"Resent-To": "evil@x.com"}, "headers"},
		{"reserved mime-version", map[string]string{"MIME-Version": "2.0"}, "headers"},
		{"reserved job header", map[string]string{"X-Gmailrelay-Job": "job-someone-else"}, "headers"},
		{"duplicate header name", map[string]string{"X-A": "1", "x-a": "2"}, "headers"},
		{"empty header name", map[string]string{"": "1"}, "headers"},
	}
	refusals := make([]refusal, len(tests))
	for i, tt := range tests {
		refusals[i] = refusal{tt.name, func(m *relay.Message) { m.Headers = tt.headers }, tt.field}
	}
	wantRefusals(t, refusals)
}

func TestBuildMIMERefusals(t *testing.T) {
	wantRefusals(t, []refusal{
		{"no recipient", func(m *relay.Message) { m.To = nil }, "to"},
		{"blank recipient", func(m *relay.Message) { m.To = []string{"  "} }, "to"},
		{"malformed to", func(m *relay.Message) { m.To = []string{"not an address"} }, "to"},
		{"malformed from", func(m *relay.Message) { m.From = "shop@" }, "from"},
		{"two from addresses", func(m *relay.Message) { m.From = "a@x.com, b@x.com" }, "from"},
		{"invalid UTF-8 subject", func(m *relay.Message) { m.Subject = "\xff" }, "subject"},
		{"invalid UTF-8 text", func(m *relay.Message) { m.Text = "\xff" }, "text"},
		{"control character in subject", func(m *relay.Message) { m.Subject = "a\x1bb" }, "subject"},
	})
	t.Run("bad message id", func(t *testing.T) {
		_, err := relay.BuildMIME(baseMessage(), "<a@b>\r\nBcc: x@y", testDate)
		testenv.WantInvalid(t, err, "message_id")
	})
}

func TestBuildMIMEHeaders(t *testing.T) {
	m := relay.Message{
		From:    "Shop <shop@example.com>",
		To:      []string{"a@example.com, \"Bob, Jr.\" <bob@example.com>"},
		Cc:      []string{"c@example.com"},
		Bcc:     []string{"hidden@example.com"},
		ReplyTo: []string{"support@example.com"},
		Subject: "Your order shipped",
		Text:    "Hello\nWorld",
		Headers: map[string]string{"x-order-id": "ord_456", "In-Reply-To": "<prev@example.com>"},
	}
	raw, err := relay.BuildMIME(m, "job-1@example.com", testDate)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(bytes.ReplaceAll(raw, []byte("\r\n"), nil), []byte("\n")) ||
		bytes.Contains(bytes.ReplaceAll(raw, []byte("\r\n"), nil), []byte("\r")) {
		t.Fatalf("message has a bare CR or LF:\n%q", raw)
	}
	msg := mustParse(t, raw)
	for name, want := range map[string]string{
		"Message-Id":                "<job-1@example.com>",
		"Mime-Version":              "1.0",
		"Subject":                   "Your order shipped",
		"Bcc":                       "hidden@example.com",
		"Reply-To":                  "support@example.com",
		"X-Order-Id":                "ord_456",
		"In-Reply-To":               "<prev@example.com>",
		"Content-Type":              "text/plain; charset=utf-8",
		"Content-Transfer-Encoding": "quoted-printable",
	} {
		if got := msg.Header.Get(name); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	date, err := msg.Header.Date()
	if err != nil || !date.Equal(testDate) {
		t.Errorf("Date = %v, %v; want %v", date, err, testDate)
	}
	to, err := msg.Header.AddressList("To")
	if err != nil {
		t.Fatal(err)
	}
	if len(to) != 2 || to[0].Address != "a@example.com" || to[1].Name != "Bob, Jr." || to[1].Address != "bob@example.com" {
		t.Errorf("To = %v, want a@example.com and \"Bob, Jr.\" <bob@example.com>", to)
	}
	body, err := io.ReadAll(quotedprintable.NewReader(msg.Body))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(body), "Hello\r\nWorld"; got != want {
		t.Errorf("body = %q, want %q", got, want)
	}
}

func TestBuildMIMENonASCII(t *testing.T) {
	m := baseMessage()
	m.Subject = "Grüße — 注文 #42 wurde versandt =?utf-8?q?not-a-word?="
	m.From = "Jürgen Müller <j@example.com>"
	m.To = []string{"\"Zoë O'Brien, Sales\" <zoe@example.com>"}
	m.Headers = map[string]string{"X-Note": "héllo  wörld "}
	raw, err := relay.BuildMIME(m, testID, testDate)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range raw[:bytes.Index(raw, []byte("\r\n\r\n"))] {
		if c >= 0x80 {
			t.Fatalf("header section has a non-ASCII byte at %d:\n%s", i, raw)
		}
	}
	msg := mustParse(t, raw)
	var dec mime.WordDecoder
	for name, want := range map[string]string{"Subject": m.Subject, "X-Note": "héllo  wörld "} {
		got, err := dec.DecodeHeader(msg.Header.Get(name))
		if err != nil || got != want {
			t.Errorf("decoded %s = %q, %v; want %q", name, got, err, want)
		}
	}
	from, err := msg.Header.AddressList("From")
	if err != nil || len(from) != 1 || from[0].Name != "Jürgen Müller" || from[0].Address != "j@example.com" {
		t.Errorf("From = %v, %v; want Jürgen Müller <j@example.com>", from, err)
	}
	to, err := msg.Header.AddressList("To")
	if err != nil || len(to) != 1 || to[0].Name != "Zoë O'Brien, Sales" {
		t.Errorf("To = %v, %v; want Zoë O'Brien, Sales", to, err)
	}
}

func TestBuildMIMEFolding(t *testing.T) {
	m := baseMessage()
	m.Subject = strings.Repeat("word ", 300) + "end"
	m.To = nil
	for i := range 200 {
		m.To = append(m.To, "Recipient Number "+strings.Repeat("x", i%7)+" <r"+strings.Repeat("y", i)+"@example.com>")
	}
	raw, err := relay.BuildMIME(m, testID, testDate)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\r\n") {
		if len(line) > 998 {
			t.Fatalf("line of %d characters", len(line))
		}
	}
	msg := mustParse(t, raw)
	if got := msg.Header.Get("Subject"); got != m.Subject {
		t.Errorf("Subject = %q, want %q", got, m.Subject)
	}
	to, err := msg.Header.AddressList("To")
	if err != nil || len(to) != 200 {
		t.Fatalf("To has %d addresses (%v), want 200", len(to), err)
	}
}

func TestBuildMIMEBodies(t *testing.T) {
	tests := []struct {
		name, text, html, wantType string
	}{
		{"text only", "plain ünïcode\nline 2", "", "text/plain"},
		{"html only", "", "<p>hi ü</p>", "text/html"},
		{"neither", "", "", "text/plain"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := baseMessage()
			m.Text, m.HTML = tt.text, tt.html
			msg := mustParse(t, mustBuild(t, m))
			typ, params, err := mime.ParseMediaType(msg.Header.Get("Content-Type"))
			if err != nil || typ != tt.wantType || params["charset"] != "utf-8" {
				t.Fatalf("Content-Type = %q, want %s; charset=utf-8", msg.Header.Get("Content-Type"), tt.wantType)
			}
			body, err := io.ReadAll(quotedprintable.NewReader(msg.Body))
			if err != nil {
				t.Fatal(err)
			}
			want := strings.ReplaceAll(tt.text+tt.html, "\n", "\r\n")
			if string(body) != want {
				t.Errorf("body = %q, want %q", body, want)
			}
		})
	}
}

func mustBuild(t *testing.T, m relay.Message) []byte {
	t.Helper()
	raw, err := relay.BuildMIME(m, testID, testDate)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func TestBuildMIMEMultipartAlternative(t *testing.T) {
	m := baseMessage()
	m.Text = "Hello ü\nsecond line with a very long tail " + strings.Repeat("z", 120)
	m.HTML = "<p>Hello ü</p>"
	msg := mustParse(t, mustBuild(t, m))
	typ, params, err := mime.ParseMediaType(msg.Header.Get("Content-Type"))
	if err != nil || typ != "multipart/alternative" {
		t.Fatalf("Content-Type = %q, %v; want multipart/alternative", msg.Header.Get("Content-Type"), err)
	}
	mr := multipart.NewReader(msg.Body, params["boundary"])
	want := []struct{ typ, body string }{
		{"text/plain; charset=utf-8", strings.ReplaceAll(m.Text, "\n", "\r\n")},
		{"text/html; charset=utf-8", m.HTML},
	}
	for i, w := range want {
		part, err := mr.NextPart()
		if err != nil {
			t.Fatalf("part %d: %v", i, err)
		}
		if got := part.Header.Get("Content-Type"); got != w.typ {
			t.Errorf("part %d Content-Type = %q, want %q", i, got, w.typ)
		}
		// multipart.Reader decodes quoted-printable itself and drops the header.
		body, err := io.ReadAll(part)
		if err != nil {
			t.Fatal(err)
		}
		if string(body) != w.body {
			t.Errorf("part %d body = %q, want %q", i, body, w.body)
		}
	}
	if _, err := mr.NextPart(); err != io.EOF {
		t.Fatalf("after two parts: %v, want EOF", err)
	}
}

func TestParseAddressList(t *testing.T) {
	got, err := relay.ParseAddressList("to", `a@x.com, B <b@y.com>, "C, D" <c@z.com>, Ä <e@z.com>`)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"a@x.com", `"B" <b@y.com>`, `"C, D" <c@z.com>`, "=?utf-8?q?=C3=84?= <e@z.com>"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("ParseAddressList = %q, want %q", got, want)
	}
	// The normalised form parses back to itself.
	again, err := relay.ParseAddressList("to", strings.Join(got, ", "))
	if err != nil || strings.Join(again, "|") != strings.Join(want, "|") {
		t.Fatalf("ParseAddressList(normalised) = %q, %v; want %q", again, err, want)
	}
	if got, err := relay.ParseAddressList("cc", "  "); err != nil || len(got) != 0 {
		t.Fatalf("ParseAddressList(blank) = %q, %v; want empty", got, err)
	}
	for _, bad := range []string{"a@x.com\r\nBcc: e@x.com", "nope", "<a@x.com", "=?utf-8?q?x=0Ay?= <a@x.com>"} {
		t.Run(bad, func(t *testing.T) {
			_, err := relay.ParseAddressList("cc", bad)
			testenv.WantInvalid(t, err, "cc")
		})
	}
}
