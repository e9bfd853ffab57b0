package relay_test

import (
	"bytes"
	"errors"
	"mime"
	"net/mail"
	"net/textproto"
	"strings"
	"testing"

	"github.com/gmailrelay/gmailrelay/api"
	"github.com/gmailrelay/gmailrelay/relay"
)

// The fuzz targets check one property: whatever is accepted produces a
// message that net/mail parses, whose To/Cc/Bcc/Subject/Message-ID say
// exactly what was validated, and which carries no header nobody asked for.
// Everything refused is refused with a client error, never a panic or an
// internal error.

// wantClientError fails unless err is a *relay.Error with a client code.
func wantClientError(t *testing.T, err error) {
	t.Helper()
	var e *relay.Error
	if !errors.As(err, &e) {
		t.Fatalf("err = %v (%T), want a *relay.Error", err, err)
	}
	if e.Code != relay.CodeInvalid && e.Code != relay.CodeTooLarge {
		t.Fatalf("err = %v, want code %s or %s", err, relay.CodeInvalid, relay.CodeTooLarge)
	}
}

// expected is what a structured message must say once built.
type expected struct {
	from, to, cc, bcc, replyTo []string // each element an address list
	subject                    string
	headers                    map[string]string
	messageID                  string
}

// parseAll parses address lists the way a reader of the built message would
// expect them: every element a list, blank elements ignored.
func parseAll(t *testing.T, lists []string) []*mail.Address {
	t.Helper()
	var out []*mail.Address
	for _, s := range lists {
		if strings.TrimSpace(s) == "" {
			continue
		}
		addrs, err := mail.ParseAddressList(s)
		if err != nil {
			t.Fatalf("accepted address list %q does not parse: %v", s, err)
		}
		out = append(out, addrs...)
	}
	return out
}

func sameAddrs(a, b []*mail.Address) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name != b[i].Name || a[i].Address != b[i].Address {
			return false
		}
	}
	return true
}

// checkStructured parses raw and compares it with want.
func checkStructured(t *testing.T, raw []byte, want expected) {
	t.Helper()
	msg, err := mail.ReadMessage(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("built message does not parse: %v\n%q", err, raw)
	}
	allowed := map[string]bool{
		"Date": true, "From": true, "To": true, "Cc": true, "Bcc": true, "Reply-To": true, "Subject": true,
		"Message-Id": true, "Mime-Version": true, "Content-Type": true, "Content-Transfer-Encoding": true,
		relay.JobHeader: true,
	}
	if got, id := msg.Header.Get(relay.JobHeader), msg.Header.Get("Message-Id"); got != relay.JobHash(id) || got == "" {
		t.Fatalf("built message's %s %q is not its Message-ID's job hash (%s)\n%q", relay.JobHeader, got, id, raw)
	}
	for name := range want.headers {
		allowed[textproto.CanonicalMIMEHeaderKey(name)] = true
	}
	for name, values := range msg.Header {
		if !allowed[name] {
			t.Fatalf("built message has an extra header %q: %q\n%q", name, values, raw)
		}
		if len(values) != 1 {
			t.Fatalf("built message has %d %s headers\n%q", len(values), name, raw)
		}
	}
	for _, l := range []struct {
		name string
		want []string
	}{{"From", want.from}, {"To", want.to}, {"Cc", want.cc}, {"Bcc", want.bcc}, {"Reply-To", want.replyTo}} {
		wantAddrs := parseAll(t, l.want)
		var got []*mail.Address
		if _, ok := msg.Header[l.name]; ok {
			if got, err = msg.Header.AddressList(l.name); err != nil {
				t.Fatalf("built %s does not parse: %v\n%q", l.name, err, raw)
			}
		}
		if !sameAddrs(got, wantAddrs) {
			t.Fatalf("built %s = %v, want %v\n%q", l.name, got, wantAddrs, raw)
		}
	}
	var dec mime.WordDecoder
	gotSubject, err := dec.DecodeHeader(msg.Header.Get("Subject"))
	if err != nil || gotSubject != want.subject {
		t.Fatalf("built Subject = %q, %v; want %q\n%q", gotSubject, err, want.subject, raw)
	}
	for name, value := range want.headers {
		got, err := dec.DecodeHeader(msg.Header.Get(name))
		if err != nil || got != value {
			t.Fatalf("built %s = %q, %v; want %q\n%q", name, got, err, value, raw)
		}
	}
	if got := msg.Header.Get("Message-Id"); got != want.messageID {
		t.Fatalf("built Message-ID = %q, want %q", got, want.messageID)
	}
}

func FuzzBuildMIME(f *testing.F) {
	f.Add("Your order shipped", "Shop <shop@example.com>", "a@example.com", "X-Order", "ord_456")
	f.Add("Grüße 注文", "Jürgen Müller <j@example.com>", `"B, C" <b@example.com>, c@example.com`, "X-Note", "héllo")
	f.Add("hi\r\nBcc: e@x.com", "a@x.com\r\n", "a@x.com\nBcc: e@x.com", "X-A\r\nBcc", "v\r\nBcc: e@x.com")
	f.Add("=?utf-8?q?x?= ", "=?utf-8?q?A=0D=0AB?= <a@x.com>", "=?utf-8?b?QQ==?= <a@x.com>", "To", "x")
	f.Add("  spaced  out\t", "", "undisclosed-recipients:;, a@x.com", "Content-Type", "text/html")
	f.Fuzz(func(t *testing.T, subject, from, to, hname, hvalue string) {
		m := relay.Message{From: from, To: []string{to}, Subject: subject, Text: "body",
			Headers: map[string]string{hname: hvalue}}
		raw, err := relay.BuildMIME(m, testID, testDate)
		if err != nil {
			wantClientError(t, err)
			return
		}
		want := expected{to: []string{to}, subject: subject, messageID: testID,
			headers: map[string]string{hname: hvalue}}
		if from != "" {
			want.from = []string{from}
		}
		checkStructured(t, raw, want)
	})
}

func FuzzParseAddressList(f *testing.F) {
	f.Add("a@x.com, B <b@y.com>")
	f.Add(`"C, D" <c@z.com>, Ä <e@z.com>`)
	f.Add("=?utf-8?q?A=0D=0AB?= <a@x.com>")
	f.Add("group: a@x.com, b@x.com;")
	f.Add(`"a b"@x.com`)
	f.Add("a@[127.0.0.1]")
	f.Fuzz(func(t *testing.T, s string) {
		got, err := relay.ParseAddressList("to", s)
		if err != nil {
			wantClientError(t, err)
			var e *relay.Error
			if errors.As(err, &e) && e.Field != "to" {
				t.Fatalf("error field = %q, want to", e.Field)
			}
			return
		}
		// The normalised form is stable.
		again, err := relay.ParseAddressList("to", strings.Join(got, ", "))
		if err != nil || strings.Join(again, "\x00") != strings.Join(got, "\x00") {
			t.Fatalf("ParseAddressList(%q) = %q, %v; want %q", strings.Join(got, ", "), again, err, got)
		}
		if len(got) == 0 {
			return
		}
		// And a message built from it says exactly the same.
		raw, err := relay.BuildMIME(relay.Message{To: got}, testID, testDate)
		if err != nil {
			t.Fatalf("BuildMIME of accepted addresses %q: %v", got, err)
		}
		checkStructured(t, raw, expected{to: []string{s}, messageID: testID})
	})
}

func FuzzDecodeSendRequest(f *testing.F) {
	f.Add([]byte(`{"key":"cus_123:order.shipped:ord_456","to":"a@x.com","subject":"S","text":"T"}`), "")
	f.Add([]byte(`{"job":{"customer_id":"c","event_type":"e","order_id":7},"to":["a@x.com","B <b@x.com>"],"cc":"c@x.com","bcc":null,"reply_to":"r@x.com","from":"F <f@x.com>","html":"<p>h</p>","body":"t","headers":{"X-A":"1"},"channel":"billing","thread_id":"abc"}`), "")
	f.Add([]byte(`{"to":"a@x.com","subject":"s\r\nBcc: e@x.com"}`), "k")
	f.Add([]byte(`{"raw":"VG86IGFAeC5jb20NClN1YmplY3Q6IGhpDQoNCmJvZHk"}`), "k")
	f.Add([]byte(`{"raw":"TWVzc2FnZS1JRDogPGFAYj4KVG86IGFAeC5jb20KCmJvZHk="}`), "")
	f.Add([]byte(`{"key":"k","to":"a@x.com","headers":{"Bcc":"e@x.com"}}`), "")
	f.Add([]byte(`[]`), "")
	f.Fuzz(func(t *testing.T, data []byte, headerKey string) {
		req, err := api.DecodeSendRequest(data)
		if err != nil {
			wantClientError(t, err)
			return
		}
		p, err := relay.Prepare(req, headerKey, testDomain, testDate)
		if err != nil {
			wantClientError(t, err)
			return
		}
		if p.Fingerprint == "" || p.Key == "" || p.Channel == "" {
			t.Fatalf("Prepared = %+v: empty key, channel or fingerprint", p)
		}
		if req.Raw != "" {
			checkRaw(t, nil, p)
			return
		}
		if p.MessageID != relay.MessageID(p.Key, testDomain) {
			t.Fatalf("MessageID = %q, want the key's %q", p.MessageID, relay.MessageID(p.Key, testDomain))
		}
		checkStructured(t, p.Raw, expected{
			from: nonEmpty(req.From), to: req.To, cc: req.Cc, bcc: req.Bcc, replyTo: req.ReplyTo,
			subject: req.Subject, headers: req.Headers, messageID: p.MessageID,
		})
	})
}

func nonEmpty(s string) []string {
	if s == "" {
		return nil
	}
	return []string{s}
}

func FuzzPrepareRaw(f *testing.F) {
	f.Add([]byte(rawNoID), "cus_123:order.shipped:ord_456")
	f.Add([]byte(rawWithID(testID)), "cus_123:order.shipped:ord_456")
	f.Add([]byte(rawWithID("<a@b>")), "")
	f.Add([]byte(strings.ReplaceAll(rawNoID, "\r\n", "\n")), "k")
	f.Add([]byte("To: a@x.com\rBcc: e@x.com\r\n\r\n"), "k")
	f.Add([]byte("To: a@x.com\r\n folded@x.com\r\nCc: =?utf-8?q?A?= <c@x.com>\r\n\r\nbody\rbare\n"), "k")
	f.Fuzz(func(t *testing.T, raw []byte, key string) {
		p, err := relay.PrepareRaw(raw, key, "", testDomain)
		if err != nil {
			wantClientError(t, err)
			return
		}
		if key != "" && (p.Key != key || p.MessageID != relay.MessageID(key, testDomain)) {
			t.Fatalf("Key, MessageID = %q, %q; want %q, %q", p.Key, p.MessageID, key, relay.MessageID(key, testDomain))
		}
		checkRaw(t, raw, p)
	})
}

// checkRaw checks a prepared raw message: CRLF only, one Message-ID equal to
// p.MessageID, and otherwise the very headers of the input (when given).
func checkRaw(t *testing.T, in []byte, p relay.Prepared) {
	t.Helper()
	if bytes.Contains(bytes.ReplaceAll(p.Raw, []byte("\r\n"), nil), []byte("\n")) {
		t.Fatalf("prepared raw has a bare LF: %q", p.Raw)
	}
	out, err := mail.ReadMessage(bytes.NewReader(p.Raw))
	if err != nil {
		t.Fatalf("prepared raw does not parse: %v\n%q", err, p.Raw)
	}
	if ids := out.Header["Message-Id"]; len(ids) != 1 {
		t.Fatalf("prepared raw has Message-ID headers %q, want one", ids)
	}
	if got, err := relay.NormalizeMessageID(out.Header.Get("Message-Id")); err != nil || got != p.MessageID {
		t.Fatalf("prepared raw Message-ID = %q, %v; want %q", got, err, p.MessageID)
	}
	var recipients int
	for _, name := range []string{"To", "Cc", "Bcc"} {
		if _, ok := out.Header[name]; !ok {
			continue
		}
		addrs, err := out.Header.AddressList(name)
		if err != nil {
			t.Fatalf("prepared raw %s does not parse: %v", name, err)
		}
		recipients += len(addrs)
	}
	if recipients == 0 {
		t.Fatalf("prepared raw has no recipients: %q", p.Raw)
	}
	if in == nil {
		return
	}
	orig, err := mail.ReadMessage(bytes.NewReader(in))
	if err != nil {
		t.Fatalf("accepted input does not parse: %v", err)
	}
	if len(orig.Header["Message-Id"]) == 0 {
		orig.Header["Message-Id"] = out.Header["Message-Id"]
	}
	if len(orig.Header) != len(out.Header) {
		t.Fatalf("prepared raw headers %q differ from input %q", out.Header, orig.Header)
	}
	for name, values := range orig.Header {
		if strings.Join(out.Header[name], "\x00") != strings.Join(values, "\x00") {
			t.Fatalf("prepared raw %s = %q, input had %q", name, out.Header[name], values)
		}
	}
}
