package relay

import (
	"bufio"
	"bytes"
	"io"
	"maps"
	"net/mail"
	"net/textproto"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// headerScanSeeds are header sections where a hand-written reader could
// part from net/mail: folding, blanks, colons, 8-bit bytes, line endings
// and where the header section ends.
var headerScanSeeds = []string{
	"From: a@example.com\r\nTo: b@example.com\r\nSubject: hi\r\n\r\nbody\r\n",
	"Subject: folded\r\n  over\r\n\tthree lines\r\nTo: b@example.com\r\n\r\n",
	"Subject:\r\nTo:   \r\nCc:\t\r\n\r\n",
	"Subject :x\r\nTo\t: b@example.com\r\n\r\n",
	"To b@example.com\r\n\r\n",
	" Subject: leading space\r\n\r\n",
	"\tSubject: leading tab",
	"Subject: caf\xc3\xa9 \xff\xfe\r\nX-\xe9t\xe9: 8-bit name\r\n\r\n",
	"Subject: no blank line\r\nTo: b@example.com",
	"Subject: no blank line\r\nTo: b@example.com\r\n",
	"",
	"\r\n",
	"\r\nSubject: in the body\r\n",
	": no name\r\n\r\n",
	": no name and no blank line",
	": no name\r\nTo: b@example.com",
	"Subject: trailing blanks at the end\r\n   ",
	"Subject: blank continuation\r\n \r\n\t\r\n\r\nbody",
	"Foo\r\n bar: name over two lines\r\n\r\n",
	"Subject: a\rb\r\n\r\n",
	"Subject: a\r\n\rX: b\r\n\r\n",
	"Subject: bare LF\nTo: b@example.com\n\nbody\n",
	"Subject: mixed\r\n continued\n\tagain\r\n\nbody",
	"Subject: last\r",
	"message-id: <a@b>\r\nMESSAGE-ID: <c@d>\r\nMessage-Id: <e@f>\r\n\r\n",
	"\u017fubject: long s\r\nSubject: s\r\n\r\n",
	"reply-to: a@b\r\nREPLY-TO: c@d\r\nx-a-b-c: 1\r\nX-A-B-C: 2\r\n\r\n",
	"Subject:: double colon\r\nTo:b@example.com:c\r\n\r\n",
	"(weird)name: v\r\n\"q\": v\r\na@b: v\r\n\r\n",
	"Subject: \x00nul\x7f\x1b\r\n\r\n",
	"Subject: " + strings.Repeat("x", 4090) + "\r\n\r\n",
	"Subject: " + strings.Repeat("y", 5000) + "\r\n " + strings.Repeat("z", 5000) + "\r\n\r\n",
	strings.Repeat("X-Many: v\r\n", 300) + "\r\n",
	// Last lines net/mail loses through its 4096-byte buffer.
	"To: a@example.com\r\nTo: b@example.com" + strings.Repeat(" ", 4096-len("To: b@example.com")),
	"X: " + strings.Repeat("k", 4093),
	"\t" + strings.Repeat("k", 4095),
	"X: a\r\n  " + strings.Repeat("k", 8192),
	"X: " + strings.Repeat("k", 4092) + "\r" + strings.Repeat("k", 4095),
}

// FuzzHeaderScanAgreesWithNetMail holds scanHeader to net/mail.ReadMessage
// on arbitrary bytes, both as given (ReadMessageID's input) and after
// normalizeLineEndings (PrepareRaw's): the same error text, the same
// Header map once names are canonicalised, the same body; and
// sameHeaderName and headerNameLess agree with the canonical keys.
func FuzzHeaderScanAgreesWithNetMail(f *testing.F) {
	for _, s := range headerScanSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		checkHeaderScan(t, raw)
		if norm, err := normalizeLineEndings(raw); err == nil {
			checkHeaderScan(t, norm)
		}
	})
}

// readWholeMessage is net/mail.ReadMessage reading msg through a buffer
// that holds all of it, which scanHeader agrees with. Through its usual
// 4096-byte buffer, net/mail loses a last line without a line ending that
// bufio hands out in full buffers only (bufioLosesLastLine): that line is
// never seen, so PrepareRaw used to send it to Gmail unchecked.
func readWholeMessage(msg []byte) (*mail.Message, error) {
	return mail.ReadMessage(bufio.NewReaderSize(bytes.NewReader(msg), max(len(msg)+16, 4096)))
}

// bufioLosesLastLine reports whether net/mail, reading msg through
// bufio's 4096-byte buffer, loses its last line: one without a line
// ending whose bytes after any leading blanks (which net/mail reads one at
// a time) bufio returns as full buffers, 4096 bytes each, or 4095 when the
// last is CR (kept back for a possible LF), ending exactly at the end.
func bufioLosesLastLine(msg []byte) bool {
	start := bytes.LastIndexByte(msg, '\n') + 1
	for start < len(msg) && isWSP(msg[start]) && start > 0 {
		start++
	}
	rest := len(msg) - start
	for rest >= 4096 {
		if msg[len(msg)-rest+4095] == '\r' {
			rest -= 4095
		} else {
			rest -= 4096
		}
	}
	return rest == 0 && len(msg) > start
}

// namesLookedUp are the canonical names PrepareRaw looks up.
var namesLookedUp = []string{"Message-Id", "From", "Sender", "To", "Cc", "Bcc", "Reply-To", "Subject", "Date"}

func checkHeaderScan(t *testing.T, msg []byte) {
	t.Helper()
	orig := bytes.Clone(msg)
	fields, body, err := scanHeader(msg)
	if !bytes.Equal(msg, orig) {
		t.Fatalf("scanHeader(%q) changed its input", orig)
	}
	want, wantErr := readWholeMessage(msg)
	checkScanAgainst(t, msg, fields, body, err, want, wantErr)
	if !bufioLosesLastLine(msg) {
		want, wantErr = mail.ReadMessage(bytes.NewReader(msg))
		checkScanAgainst(t, msg, fields, body, err, want, wantErr)
	}
}

// checkScanAgainst compares scanHeader's result on msg with net/mail's.
func checkScanAgainst(t *testing.T, msg []byte, fields []headerField, body int, err error, want *mail.Message, wantErr error) {
	t.Helper()
	if (err == nil) != (wantErr == nil) || err != nil && err.Error() != wantErr.Error() {
		t.Fatalf("scanHeader(%q) error = %v; net/mail: %v", msg, err, wantErr)
	}
	if err != nil {
		return
	}
	got := mail.Header{}
	var keys []string
	var names [][]byte
	for _, f := range fields {
		if len(f.name) == 0 {
			continue // net/mail drops a field with no name
		}
		key := textproto.CanonicalMIMEHeaderKey(string(f.name))
		got[key] = append(got[key], string(f.value))
		keys, names = append(keys, key), append(names, f.name)
		for _, canon := range namesLookedUp {
			if g, w := sameHeaderName(f.name, canon), key == canon; g != w {
				t.Fatalf("sameHeaderName(%q, %q) = %v, want %v", f.name, canon, g, w)
			}
		}
	}
	if !reflect.DeepEqual(got, want.Header) {
		t.Fatalf("scanHeader(%q) header = %q; net/mail: %q", msg, got, want.Header)
	}
	wantBody, err := io.ReadAll(want.Body)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(msg[body:], wantBody) {
		t.Fatalf("scanHeader(%q) body = %q; net/mail: %q", msg, msg[body:], wantBody)
	}
	// Every pair of nearby names, both ways round (all pairs would make
	// big inputs slow to fuzz).
	for i := range names {
		for j := i; j < len(names) && j < i+16; j++ {
			for _, ij := range [][2]int{{i, j}, {j, i}} {
				a, b := ij[0], ij[1]
				if g, w := headerNameLess(names[a], names[b]), keys[a] < keys[b]; g != w {
					t.Fatalf("headerNameLess(%q, %q) = %v, want %v (keys %q, %q)", names[a], names[b], g, w, keys[a], keys[b])
				}
			}
		}
	}
}

// FuzzHeaderChecksAgreeWithSortedKeys holds PrepareRaw's header checks
// (names, values, one of each), which walk the scanned fields once, to the
// ones they replaced, which walked net/mail's Header map in sorted key
// order: the same verdict with the same message, so the same header is
// named; and the same value for each header looked up.
func FuzzHeaderChecksAgreeWithSortedKeys(f *testing.F) {
	for _, s := range headerScanSeeds {
		f.Add([]byte(s))
	}
	f.Add([]byte("Zz : 1\r\nA\x01b: 2\r\nB c: 3\r\n\r\n"))
	f.Add([]byte("X-B: a\x0bb\r\nx-a: ok\r\nX-A: c\u2028d\r\nx-a: e\u0085f\r\n\r\n"))
	f.Add([]byte("To: a@b\r\nCc: c@d\r\nCC: e@f\r\nto: g@h\r\n\r\n"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		norm, err := normalizeLineEndings(raw)
		if err != nil {
			return
		}
		msg, err := readWholeMessage(norm)
		if err != nil {
			return // FuzzHeaderScanAgreesWithNetMail covers this
		}
		fields, _, err := scanHeader(norm)
		if err != nil {
			t.Fatalf("scanHeader(%q): %v; net/mail accepts it", norm, err)
		}
		got := checkHeaderNames(fields)
		if got == nil {
			got = checkRawHeaderValues(fields)
		}
		var once [len(onceHeaders)]onceField
		if got == nil {
			once, got = onceHeaderValues(fields)
		}
		want := sortedKeyChecks(msg.Header)
		if bytes.HasPrefix(norm, []byte(":")) || bytes.Contains(norm[:headerEnd(norm)], []byte("\n:")) {
			// A line net/mail drops, which the sorted keys never showed.
			want = Invalid("raw", "raw has a header line that starts with a colon (no header name)")
		}
		if (got == nil) != (want == nil) || got != nil && got.Error() != want.Error() {
			t.Fatalf("header checks of %q: %v; over sorted keys: %v", norm, got, want)
		}
		if got != nil {
			return
		}
		for i, name := range onceHeaders {
			values, ok := msg.Header[name]
			if once[i].present != ok || ok && string(once[i].value) != values[0] {
				t.Fatalf("%s of %q: %q (present %v); net/mail: %q", name, norm, once[i].value, once[i].present, values)
			}
		}
	})
}

// sortedKeyChecks is how PrepareRaw checked header names, values and
// repeats before it scanned the header itself: over net/mail's Header map
// in sorted key order.
func sortedKeyChecks(h mail.Header) error {
	keys := slices.Sorted(maps.Keys(h))
	for _, name := range keys {
		for _, c := range []byte(name) {
			if c == ' ' || c == '\t' {
				return Invalid("raw", "raw header %q has whitespace before its colon (obsolete RFC 5322 syntax); write %q", name, strings.TrimRight(name, " \t")+":")
			}
			if c < 33 || c > 126 || c == ':' {
				return Invalid("raw", "raw header name %q holds the byte %#02x, which is not allowed in a header name", name, c)
			}
		}
	}
	for _, name := range keys {
		for _, v := range h[name] {
			if p, bad := rawValueProblem([]byte(v)); bad {
				return p.err(name)
			}
		}
	}
	for _, name := range onceHeaders {
		if n := len(h[name]); n > 1 {
			return Invalid("raw", "raw has %d %s headers; at most one is allowed", n, name)
		}
	}
	return nil
}

// headerEnd is the offset of the blank line that ends norm's header
// section, or len(norm).
func headerEnd(norm []byte) int {
	if bytes.HasPrefix(norm, []byte("\r\n")) {
		return 0
	}
	if i := bytes.Index(norm, []byte("\r\n\r\n")); i >= 0 {
		return i
	}
	return len(norm)
}

// A line that starts with a colon used to be dropped by net/mail unseen,
// so its value went to Gmail unchecked, U+2028 and all.
func TestPrepareRawRefusesHeaderLineWithoutName(t *testing.T) {
	for _, line := range []string{": a\u2028Bcc: e@evil.example", ":\x0bX", ":", ": plain"} {
		for _, raw := range []string{
			"Message-ID: <e@x.example>\r\nTo: a@x.com\r\n" + line + "\r\n\r\nbody\r\n",
			line + "\r\nMessage-ID: <e@x.example>\r\nTo: a@x.com\r\n\r\nbody\r\n",
		} {
			_, err := PrepareRaw([]byte(raw), "", "", "x.example")
			if err == nil || !strings.Contains(err.Error(), "starts with a colon") {
				t.Errorf("PrepareRaw(%q) = %v, want the no-name refusal", raw, err)
			}
			if _, err := ReadMessageID([]byte(raw)); err == nil {
				t.Errorf("ReadMessageID(%q) accepted it", raw)
			}
		}
	}
	// A colon inside a folded value is not a line of its own.
	raw := "Message-ID: <e@x.example>\r\nTo: a@x.com\r\nSubject: a\r\n :b\r\n\r\nbody\r\n"
	if _, err := PrepareRaw([]byte(raw), "", "", "x.example"); err != nil {
		t.Errorf("PrepareRaw(%q) = %v", raw, err)
	}
}

// net/mail, through its 4096-byte buffer, lost an unterminated last header
// line whose length is a multiple of 4096 (see scanHeader), and PrepareRaw
// accepted whatever it said unchecked.
func TestPrepareRawChecksUnterminatedLastLineOf4096Bytes(t *testing.T) {
	for _, c := range [][2]string{{"To: evil@x.com", "raw has 2 To headers"},
		{"Message-ID: <other@x.example>", "raw has 2 Message-Id headers"}, {"Bcc: e@evil.example \u2028X: y", "U+2028"},
		{"Subject :x", "whitespace before its colon"}, {"no colon at all", "malformed header line"}} {
		last, want := c[0], c[1]
		for _, n := range []int{4096, 8192} {
			raw := "Message-ID: <a@x.example>\r\nTo: a@x.com\r\n" + last + strings.Repeat(" ", n-len(last))
			_, err := PrepareRaw([]byte(raw), "", "", "x.example")
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%d-byte last line %q: PrepareRaw = %v, want an error with %q", n, last, err, want)
			}
		}
	}
}
