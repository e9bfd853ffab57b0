package relay

import (
	"strings"
	"testing"
)

// TestPrepareRawAddressesEitherPath: plain and quoted forms of the same
// addresses give PrepareRaw the same recipients count and From.
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
