package relay

import (
	"strings"
	"testing"
)

// addressListSeeds are values on both sides of simpleAddressList's line:
// the shapes it reads and the near misses it must leave to net/mail.
var addressListSeeds = []string{
	"a@example.com", "Bench <bench@example.com>", "<a@b>", " a@b ,\tC D <c.d@e.f> ",
	"a@b,c@d,e@f", "Bob<b@x.org>", "a.b.c@d.e", "!#$%&'*+-/=?^_`{|}~@x",
	// near misses
	"", " ", ",", "a@b,", ",a@b", "a@b,,c@d", "a@b c@d", "a@b <c@d>", "a", "a@", "@b",
	".a@b", "a.@b", "a..b@c", "a@.b", "a@b.", "a@b..c", "a@@b", "\"a b\"@c", "a@[1.2.3.4]",
	"a@b (comment)", "(c) a@b", "Jo.Smith <j@s>", "=?utf-8?q?J=C3=B6?= <j@s>", "J= <j@s>",
	"\"Jo, Smith\" <j@s>", "g: a@b, c@d;", "< a@b>", "<a@b >", "<a@b> x", "x <a@b>>", "<<a@b>",
	"Jö <j@s>", "j@sö", "a\r\n@b", "a@b\x00", "J\x01 <j@s>", "a@b\x7f",
	strings.Repeat("a", 300) + "@b", strings.Repeat("w ", 120) + "<a@b>",
}

// FuzzSimpleAddressListAgreesWithNetMail holds the fast path to the one
// it stands in for: whatever simpleAddressList reads, parseAddresses
// (net/mail and checkAddress) accepts with as many addresses and the same
// first addr-spec. What it declines is not judged: net/mail decides it.
func FuzzSimpleAddressListAgreesWithNetMail(f *testing.F) {
	for _, s := range addressListSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		n, first, ok := simpleAddressList([]byte(v))
		if !ok {
			return
		}
		addrs, err := parseAddresses("raw", []string{v})
		if err != nil {
			t.Fatalf("simpleAddressList(%q) read %d addresses, net/mail refuses it: %v", v, n, err)
		}
		if len(addrs) != n || addrs[0].Address != string(first) {
			t.Fatalf("simpleAddressList(%q) = %d, %q; net/mail reads %d, first %q", v, n, first, len(addrs), addrs[0].Address)
		}
	})
}

// TestSimpleAddressListShapes pins which values take the fast path (so a
// change that quietly sends every header back to net/mail, or lets a
// quoted or encoded one through, fails here) and what it reads.
func TestSimpleAddressListShapes(t *testing.T) {
	for _, tc := range []struct {
		v     string
		n     int
		first string
	}{
		{"a@example.com", 1, "a@example.com"},
		{"Bench <bench@example.com>", 1, "bench@example.com"},
		{" a@b ,\tC D <c.d@e.f> ", 2, "a@b"},
		{"<a@b>, x@y, Z <z@z>", 3, "a@b"},
		{"Bob<b@x.org>", 1, "b@x.org"},
	} {
		n, first, ok := simpleAddressList([]byte(tc.v))
		if !ok || n != tc.n || string(first) != tc.first {
			t.Errorf("simpleAddressList(%q) = %d, %q, %v; want %d, %q, true", tc.v, n, first, ok, tc.n, tc.first)
		}
	}
	for _, v := range []string{"", "a@b,", "a@b,,c@d", "a@b c@d", "\"a b\"@c", "a@[1.2.3.4]", "a@b (c)",
		"Jo.Smith <j@s>", "=?utf-8?q?J=C3=B6?= <j@s>", "\"Jo, Smith\" <j@s>", "g: a@b;", "Jö <j@s>", "a@b\x00",
		strings.Repeat("a", 300) + "@b"} {
		if n, first, ok := simpleAddressList([]byte(v)); ok {
			t.Errorf("simpleAddressList(%q) = %d, %q, true; want it left to net/mail", v, n, first)
		}
	}
}

// TestPrepareRawAddressesEitherPath: a header the fast path reads and one
// it leaves to net/mail give PrepareRaw the same recipients count and From.
func TestPrepareRawAddressesEitherPath(t *testing.T) {
	msg := func(from, to string) []byte {
		return []byte("From: " + from + "\r\nTo: " + to + "\r\nSubject: s\r\n\r\nbody\r\n")
	}
	fast, err := PrepareRaw(msg("Shop <Shop@Example.com>", "a@b.c, D <d@e.f>"), "k1", "", "relay.example")
	if err != nil {
		t.Fatal(err)
	}
	slow, err := PrepareRaw(msg("\"Shop\" <Shop@Example.com>", "\"a\"@b.c, \"D\" <d@e.f>"), "k1", "", "relay.example")
	if err != nil {
		t.Fatal(err)
	}
	if fast.From != "shop@example.com" || slow.From != fast.From {
		t.Errorf("From: fast path %q, net/mail %q; want both shop@example.com", fast.From, slow.From)
	}
	for _, bad := range [][]byte{msg("a@b, c@d", "x@y"), msg("a@b", "x@y z@w"), msg("a@b", "x@y\x00")} {
		if _, err := PrepareRaw(bad, "k1", "", "relay.example"); err == nil {
			t.Errorf("PrepareRaw(%q) = nil error, want it refused", bad)
		}
	}
}

// FuzzNormalizeLineEndingsKeepsOrCopies holds the branch that keeps a
// CRLF-only message as it is to the copying one (rewriteLineEndings, which
// handles any message free of NUL): the same bytes, the same refusal.
func FuzzNormalizeLineEndingsKeepsOrCopies(f *testing.F) {
	for _, s := range []string{"", "\r\n", "\r\nbody\r", "A: b\r\n\r\nbody", "A: b\rc\r\n\r\n", "A: b\r\n\r\nc\rd\r\n",
		"A: b\r\r\n\r\n", "A: b\r", "A: b\r\n\r", "A: b\nc\r\n", "\r\r\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if strings.IndexByte(string(raw), 0) >= 0 {
			return
		}
		got, gotErr := normalizeLineEndings(raw)
		want, wantErr := rewriteLineEndings(raw)
		if (gotErr == nil) != (wantErr == nil) || string(got) != string(want) {
			t.Fatalf("normalizeLineEndings(%q) = %q, %v; the copying branch gives %q, %v", raw, got, gotErr, want, wantErr)
		}
	})
}
