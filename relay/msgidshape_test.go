package relay_test

import (
	"strings"
	"testing"

	"github.com/gmailrelay/gmailrelay/internal/testenv"
	"github.com/gmailrelay/gmailrelay/relay"
)

func TestCheckMessageIDShape(t *testing.T) {
	good := []string{
		"<a@b>",
		"<abc.def@mail.example.com>",
		"<%6Aob-1@x.example>",
		"<!#$%&'*+-/=?^_`~@x.y>",
		"<" + strings.Repeat("a", relay.MaxCallerMessageIDLen-4) + "@b>",
	}
	for _, id := range good {
		if err := relay.CheckMessageIDShape(id); err != nil {
			t.Errorf("CheckMessageIDShape(%q) = %v, want nil", id, err)
		}
	}
	bad := []struct{ id, says string }{
		{"a@b", "angle brackets"},
		{"<a@b", "angle brackets"},
		{"", "angle brackets"},
		{"<ab>", "no @"},
		{"<a@b@c>", "more than one @"},
		{"<@b>", "left part is empty"},
		{"<a@>", "right part is empty"},
		{"<.a@b>", "empty atom"},
		{"<a.@b>", "empty atom"},
		{"<a..b@c>", "empty atom"},
		{"<a@b..c>", "empty atom"},
		{"<a@b.>", "empty atom"},
		{"<p}q@attacker.example>", `'}'`},
		{"<x@[}OR(in:sent)OR{in:x]>", `'['`},
		{"<a{b@c>", `'{'`},
		{"<a|b@c>", `'|'`},
		{"<a(b@c>", `'('`},
		{"<a)b@c>", `')'`},
		{`<a"b@c>`, `'"'`},
		{"<a:b@c>", `':'`},
		{"<a b@c>", "whitespace"},
		{"<a\tb@c>", "whitespace"},
		{"<a\\b@c>", `'\\'`},
		{"<a@[1.2.3.4]>", `'['`},
		{"<a\x7fb@c>", "0x7f"},
		{"<a\xc3\xa9@c>", "non-ASCII"},
		{"<a<b@c>", `'<'`},
		{"<" + strings.Repeat("a", relay.MaxCallerMessageIDLen-3) + "@b>", "more than 250"},
	}
	for _, tt := range bad {
		err := relay.CheckMessageIDShape(tt.id)
		if err == nil {
			t.Errorf("CheckMessageIDShape(%q) = nil, want an error", tt.id)
			continue
		}
		testenv.WantInvalid(t, err, "message_id")
		if !strings.Contains(err.Error(), tt.says) {
			t.Errorf("CheckMessageIDShape(%q) = %v, want it to say %q", tt.id, err, tt.says)
		}
	}
}

// TestDerivedMessageIDsPassTheShapeCheck: every id the relay derives is
// one it could accept back from a caller.
func TestDerivedMessageIDsPassTheShapeCheck(t *testing.T) {
	domains := []string{"x.example", "inbound.example.com", "a-b.c-d.example", strings.Repeat("a", 63) + "." + strings.Repeat("b", 63) + "." + strings.Repeat("c", 63)}
	keys := []string{"k", "cust:evt:order", "<weird key {}|\"():>", strings.Repeat("é", 300)}
	for _, d := range domains {
		if err := relay.ValidDomain(d); err != nil {
			t.Fatalf("domain %q: %v", d, err)
		}
		for _, k := range keys {
			if id := relay.MessageID(k, d); relay.CheckMessageIDShape(id) != nil {
				t.Errorf("MessageID(%q, %q) = %s fails: %v", k, d, id, relay.CheckMessageIDShape(id))
			}
		}
	}
}

// FuzzCheckMessageIDShape: an id the check accepts normalises to itself
// and holds nothing Gmail's search gives meaning to.
func FuzzCheckMessageIDShape(f *testing.F) {
	for _, s := range []string{"<a@b>", "<p}q@attacker.example>", "<x@[}OR(in:sent)OR{in:x]>", "<a..b@c>", "<%6A@x>", "a@b", "<a@b@c>"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		if relay.CheckMessageIDShape(id) != nil {
			return
		}
		n, err := relay.NormalizeMessageID(id)
		if err != nil || n != id {
			t.Fatalf("accepted %q but NormalizeMessageID = %q, %v", id, n, err)
		}
		if len(id) > relay.MaxCallerMessageIDLen || strings.ContainsAny(id[1:len(id)-1], "{}()\"|: \t\r\n<>[]\\") || strings.Count(id, "@") != 1 {
			t.Fatalf("accepted %q", id)
		}
		for i := 0; i < len(id); i++ {
			if id[i] < 0x21 || id[i] > 0x7e {
				t.Fatalf("accepted %q with byte %#x", id, id[i])
			}
		}
	})
}
