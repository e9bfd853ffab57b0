package relay_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/internal/testenv"
	"github.com/gmailrelay/gmailrelay/relay"
)

// Issue: security audit, items A–D. Each refusal here was an acceptance
// before the fix.

// allocated is the bytes f allocates (all goroutines: bounds only).
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// wantInvalidSaying checks err is CodeInvalid on field, its message
// holding each of parts.
func wantInvalidSaying(t *testing.T, err error, field string, parts ...string) {
	t.Helper()
	testenv.WantInvalid(t, err, field)
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not say %q", err, p)
		}
	}
}

// A: a thread id that Prepare never saw (the Gmail-compatible path sets
// Prepared.ThreadID itself) is refused at the service, before the log.
func TestSendRefusesUncheckedThreadID(t *testing.T) {
	e := newEnv(t, gmailfake.Options{})
	for _, id := range []string{"x\r\nBcc: evil@example.com", strings.Repeat("a", 129), "a b"} {
		p := e.prepare("thread-"+fmt.Sprint(len(id)), "hi")
		p.ThreadID = id
		_, err := e.svc.Send(context.Background(), p, relay.SendOptions{})
		testenv.WantInvalid(t, err, "thread_id")
		if _, err := e.log.Get(context.Background(), p.MessageID); !errors.Is(err, gmailrelay.ErrNotFound) {
			t.Errorf("thread id %q: log Get = %v, want ErrNotFound", id, err)
		}
	}
	for _, id := range []string{"", "18c0ffee", strings.Repeat("a", 128)} {
		if err := relay.CheckThreadID("threadId", id); err != nil {
			t.Errorf("CheckThreadID(%q) = %v", id, err)
		}
	}
	wantInvalidSaying(t, relay.CheckThreadID("threadId", strings.Repeat("a", 8<<20)), "threadId", "8388608 bytes")
}

// B: encoded-words that decode to CR/LF, in headers the address parser
// never reads, and a Sender that was never parsed.
func TestPrepareRawRefusesEncodedLineBreaks(t *testing.T) {
	for _, tt := range []struct{ line, header string }{
		{"Subject: =?utf-8?q?hi=0D=0ABcc:_evil@example.com?=", "Subject"},
		{"X-Note: =?utf-8?b?eA0KQmNjOiBldmlsQGV4YW1wbGUuY29t?=", "X-Note"},
		{"Sender: =?utf-8?q?A=0D=0ABcc:_e@x.com?= <s@x.com>", "Sender"},
		{"Subject: =?utf-8?q?a=0D?= =?utf-8?q?=0Ab?=", "Subject"},                // split over two words
		{"Subject: =?UTF-8?Q?a=E2=80=A8b?=", "Subject"},                          // U+2028
		{"Subject: =?iso-8859-1?q?a=85b?=", "Subject"},                           // NEL in Latin-1
		{"Subject: =?utf-8?q?a=85b?=", "Subject"},                                // a lone 0x85
		{"X-Note: =?x-unknown?q?a=0D=0ABcc:_e@x.com?=", "X-Note"},                // unknown charset
		{"Comments: =?windows-1252?b?YQpi?=", "Comments"},                        // LF in base64
		{"To: a@x.com (=?utf-8?q?x=0D=0ABcc:_e@x.com?=)", "To"},                  // in a comment
		{"Content-Type: text/plain; name=\"=?utf-8?q?a=00b?=\"", "Content-Type"}, // NUL
	} {
		t.Run(tt.line, func(t *testing.T) {
			raw := "Message-ID: <ew@x.example>\r\nFrom: s@x.com\r\n"
			if !strings.HasPrefix(tt.line, "To:") {
				raw += "To: a@x.com\r\n"
			}
			raw += tt.line + "\r\n\r\nbody\r\n"
			_, err := relay.PrepareRaw([]byte(raw), "", "", testDomain)
			wantInvalidSaying(t, err, "raw", "raw "+tt.header+" header", "U+")
		})
	}
	for _, line := range []string{"Sender: a@x.com, b@x.com", "Sender: ", "Sender: no-at-sign"} {
		raw := "Message-ID: <ew@x.example>\r\nTo: a@x.com\r\n" + line + "\r\n\r\nbody\r\n"
		_, err := relay.PrepareRaw([]byte(raw), "", "", testDomain)
		wantInvalidSaying(t, err, "raw", "Sender")
	}
	// Still accepted: decoded text without those characters, in any charset.
	for _, line := range []string{
		"Subject: =?utf-8?q?Gr=C3=BC=C3=9Fe_=E2=9C=93?=",
		"Subject: =?iso-2022-jp?b?GyRCJEgkbxsoQg==?=",  // ESC sequences of ISO-2022-JP
		"Subject: =?windows-1252?q?=93quoted=94_=80?=", // 0x80–0x9F mean other things there
		"Subject: =?utf-8?q?tab=09ok?=",
		"Subject: not =? an encoded word ?= at all",
		"Sender: =?utf-8?q?J=C3=BCrgen?= <s@x.com>",
		"X-Note: =?bogus?x?=0D=0A?=", // not an encoded-word: no decoder reads it
	} {
		raw := "Message-ID: <ok@x.example>\r\nTo: a@x.com\r\n" + line + "\r\n\r\nbody\r\n"
		if _, err := relay.PrepareRaw([]byte(raw), "", "", testDomain); err != nil {
			t.Errorf("%q refused: %v", line, err)
		}
	}
}

// C: a byte 0x80–0x9F outside UTF-8 is a C1 control to an ISO-8859-1
// reader; the structured path refuses U+0085 in a subject.
func TestPrepareRawRefusesC1BytesOutsideUTF8(t *testing.T) {
	for _, v := range []string{"hi\x85Bcc: evil@example.com", "a\x80", "a\x9f", "\xe2\x80", "\xe2\x85"} {
		raw := "Message-ID: <c1@x.example>\r\nTo: a@x.com\r\nSubject: " + v + "\r\n\r\nbody\r\n"
		_, err := relay.PrepareRaw([]byte(raw), "", "", testDomain)
		wantInvalidSaying(t, err, "raw", "raw Subject header", "outside UTF-8")
	}
	// Part of UTF-8 (… is E2 80 A6), or 8-bit bytes above 0x9F: accepted.
	for _, v := range []string{"wait…", "Gr\xfc\xdfe", "\xa0\xff"} {
		raw := "Message-ID: <c1@x.example>\r\nTo: a@x.com\r\nSubject: " + v + "\r\n\r\nbody\r\n"
		if _, err := relay.PrepareRaw([]byte(raw), "", "", testDomain); err != nil {
			t.Errorf("Subject %q refused: %v", v, err)
		}
	}
}

// D: a header section of millions of lines cost 64 times its size in
// header records before it was bounded.
func TestPrepareRawBoundsTheHeaderSection(t *testing.T) {
	for _, eol := range []string{"\r\n", "\n"} {
		bomb := []byte("Message-ID: <b@x.example>" + eol + "To: a@x.com" + eol + strings.Repeat("a:"+eol, 7_800_000) + eol + "body" + eol)
		var err error
		n := allocated(func() { _, err = relay.PrepareRaw(bomb, "", "", testDomain) })
		wantInvalidSaying(t, err, "raw", "header section", "1048576")
		if n > uint64(len(bomb)) {
			t.Errorf("%q lines: PrepareRaw allocated %d bytes for a %d-byte message, want at most its size", eol, n, len(bomb))
		}
	}
	// The largest header section accepted, of one-byte fields: one
	// 48-byte record a 4-byte line, allocated once (appending them one by
	// one allocated five times that).
	tiny := []byte("Message-ID: <b@x.example>\r\nTo: a@x.com\r\n" + strings.Repeat("a:\r\n", (relay.MaxHeaderBytes-50)/4) + "\r\nbody\r\n")
	var err error
	if n := allocated(func() { _, err = relay.PrepareRaw(tiny, "", "", testDomain) }); err != nil || n > 13*uint64(len(tiny)) {
		t.Errorf("a %d-byte header section of one-byte fields: %v, %d bytes allocated, want at most %d", len(tiny), err, n, 13*len(tiny))
	}
	head := "Message-ID: <b@x.example>\r\nTo: a@x.com\r\nX-Pad: "
	at := func(size int) []byte { // a header section of size bytes
		return []byte(head + strings.Repeat("p", size-len(head)-2) + "\r\n\r\nbody\r\n")
	}
	if _, err := relay.PrepareRaw(at(relay.MaxHeaderBytes), "", "", testDomain); err != nil {
		t.Errorf("a header section of exactly %d bytes: %v", relay.MaxHeaderBytes, err)
	}
	_, err = relay.PrepareRaw(at(relay.MaxHeaderBytes+1), "", "", testDomain)
	wantInvalidSaying(t, err, "raw", "header section")
	// No blank line: the whole message is its header section.
	noBody := at(relay.MaxHeaderBytes + 1)
	_, err = relay.PrepareRaw(noBody[:relay.MaxHeaderBytes+1], "", "", testDomain)
	wantInvalidSaying(t, err, "raw", "header section")
	_, err = relay.ReadMessageID(at(relay.MaxHeaderBytes + 1))
	wantInvalidSaying(t, err, "raw", "header section")
}

// addresses returns n distinct addresses, each as format writes it.
func addresses(n int, format string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf(format, i)
	}
	return out
}

// D: at most relay.MaxRecipients addresses in To, Cc and Bcc together.
func TestRecipientCap(t *testing.T) {
	const max = relay.MaxRecipients
	raw := func(to, cc, bcc []string) []byte {
		return []byte("Message-ID: <r@x.example>\r\nTo: " + strings.Join(to, ", ") + "\r\nCc: " + strings.Join(cc, ", ") +
			"\r\nBcc: " + strings.Join(bcc, ", ") + "\r\n\r\nbody\r\n")
	}
	one := []string{"last@example.com"}
	for name, format := range map[string]string{"bare": "r%d@example.com", "named": `"R, %d" <r@example.com>`} {
		all := addresses(max+1, format)
		_, err := relay.PrepareRaw(raw(all[:max], nil, one), "", "", testDomain)
		wantInvalidSaying(t, err, "raw", fmt.Sprint(max+1), fmt.Sprint(max))
		_, err = relay.PrepareRaw(raw(all[:1000], all[1000:max], one), "", "", testDomain)
		wantInvalidSaying(t, err, "raw", fmt.Sprint(max+1), fmt.Sprint(max))
		_, err = relay.PrepareRaw(raw(all, nil, nil), "", "", testDomain)
		wantInvalidSaying(t, err, "raw", fmt.Sprint(max+1))
		if _, err := relay.PrepareRaw(raw(all[:max-1], nil, one), "", "", testDomain); err != nil {
			t.Errorf("%s: %d recipients refused: %v", name, max, err)
		}

		req := relay.SendRequest{Key: "k", Text: "t", To: all[:max]}
		if _, err := relay.Prepare(req, "", testDomain, testDate); err != nil {
			t.Errorf("%s: %d recipients in to refused: %v", name, max, err)
		}
		req.To, req.Cc = all[:1500], all[1500:]
		_, err = relay.Prepare(req, "", testDomain, testDate)
		wantInvalidSaying(t, err, "cc", fmt.Sprint(max+1))
		req.To, req.Cc, req.Bcc = all[:max], nil, one
		_, err = relay.Prepare(req, "", testDomain, testDate)
		wantInvalidSaying(t, err, "bcc")
		req.To, req.Bcc = relay.AddressList{strings.Join(all, ", ")}, nil // one string
		_, err = relay.Prepare(req, "", testDomain, testDate)
		wantInvalidSaying(t, err, "to", fmt.Sprint(max+1))
	}
}

// D: a 24 MB to list cost 30 times its size in Prepare, parsed whole by
// net/mail before anything counted the addresses.
func TestPrepareCountsAddressesBeforeParsing(t *testing.T) {
	var b strings.Builder
	for i := 0; b.Len() < 24<<20; i++ {
		fmt.Fprintf(&b, `"N %d" <a%d@example.com>, `, i, i)
	}
	list := strings.TrimSuffix(b.String(), ", ")
	req := relay.SendRequest{Key: "k", Text: "t", To: relay.AddressList{list}}
	var err error
	n := allocated(func() { _, err = relay.Prepare(req, "", testDomain, testDate) })
	wantInvalidSaying(t, err, "to")
	if n > uint64(len(list)) {
		t.Errorf("Prepare allocated %d bytes for a %d-byte to list, want at most its size", n, len(list))
	}
}

// D: a JSON address list past the cap is refused while it is read, not
// decoded whole first.
func TestAddressListJSONStopsAtTheCap(t *testing.T) {
	var b strings.Builder
	b.WriteString("[")
	for i := 0; b.Len() < 24<<20; i++ {
		fmt.Fprintf(&b, `"a%d@example.com",`, i)
	}
	data := []byte(strings.TrimSuffix(b.String(), ",") + "]")
	var l relay.AddressList
	var err error
	n := allocated(func() { err = json.Unmarshal(data, &l) })
	var re *relay.Error
	if !errors.As(err, &re) || re.Code != relay.CodeInvalid || !strings.Contains(re.Message, "2000") {
		t.Fatalf("json.Unmarshal of a %d-byte list: %v, want an invalid_argument about the cap", len(data), err)
	}
	if n > 1<<20 {
		t.Errorf("json.Unmarshal allocated %d bytes for a %d-byte list, want at most 1 MiB", n, len(data))
	}
	full := "[" + strings.Join(addresses(relay.MaxRecipients, `"a%d@example.com"`), ",") + "]"
	if err := json.Unmarshal([]byte(full), &l); err != nil || len(l) != relay.MaxRecipients {
		t.Errorf("%d entries: %d, %v", relay.MaxRecipients, len(l), err)
	}
}

// AddressList's JSON shapes: a string or a list of strings (n8n sends both).
func TestAddressListJSONShapes(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want relay.AddressList
		ok   bool
	}{
		{`null`, nil, true},
		{`"a@x.com, b@x.com"`, relay.AddressList{"a@x.com, b@x.com"}, true},
		{` "  " `, nil, true},
		{`[]`, relay.AddressList{}, true},
		{`["a@x.com", null, ""]`, relay.AddressList{"a@x.com", "", ""}, true},
		{`1`, nil, false},
		{`{}`, nil, false},
		{`["a@x.com", 1]`, nil, false},
		{`[["a@x.com"]]`, nil, false},
	} {
		var got relay.AddressList
		err := json.Unmarshal([]byte(tt.in), &got)
		if (err == nil) != tt.ok || tt.ok && (fmt.Sprintf("%#v", got) != fmt.Sprintf("%#v", tt.want)) {
			t.Errorf("%s: %#v, %v; want %#v (ok %v)", tt.in, got, err, tt.want, tt.ok)
		}
		checkAgainstReference(t, []byte(tt.in))
	}
}

// referenceAddresses is the plain reading of an address list that
// AddressList.UnmarshalJSON must agree with (below its cap): null and a
// blank string are no list, a string is one entry, else a JSON list of
// strings.
func referenceAddresses(v []byte) (relay.AddressList, error) {
	var s string
	if err := json.Unmarshal(v, &s); err == nil {
		if strings.TrimSpace(s) == "" {
			return nil, nil
		}
		return relay.AddressList{s}, nil
	}
	if bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
		return nil, nil
	}
	var list []string
	if err := json.Unmarshal(v, &list); err != nil {
		return nil, err
	}
	return list, nil
}

// checkAgainstReference: for valid JSON, UnmarshalJSON accepts exactly
// what referenceAddresses reads, with the same entries, except a list over
// MaxRecipients, which it refuses.
func checkAgainstReference(t *testing.T, v []byte) {
	t.Helper()
	if !json.Valid(v) {
		return
	}
	var got relay.AddressList
	err := got.UnmarshalJSON(v)
	want, refErr := referenceAddresses(v)
	if refErr == nil && len(want) > relay.MaxRecipients {
		if err == nil {
			t.Fatalf("%d addresses accepted, over the cap", len(want))
		}
		return
	}
	if (err == nil) != (refErr == nil) || err == nil && fmt.Sprintf("%#v", got) != fmt.Sprintf("%#v", want) {
		t.Fatalf("%s: AddressList %#v, %v; reference %#v, %v", v, got, err, want, refErr)
	}
}

func FuzzAddressListJSON(f *testing.F) {
	for _, s := range []string{`null`, `"a@x.com"`, `[]`, `["a", null]`, `[1]`, `{"a":1}`, `"\u0000"`, ` [ "a" , "b" ] `} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, v []byte) {
		checkAgainstReference(t, v)
	})
}
