package relay

import (
	"net/mail"
	"testing"
)

// FuzzCountAddrSpecs holds countAddrSpecs to what the recipient cap
// relies on: for every list net/mail accepts, exactly its number of
// addresses, so a list within the cap is never refused by the count
// taken before parsing.
func FuzzCountAddrSpecs(f *testing.F) {
	for _, s := range []string{
		"a@x.com, B <b@y.com>", `"C, D @ E" <c@z.com>, Ä <e@z.com>`, "g: a@x.com, b@x.com;, h:;",
		`"a\"@"@b.com`, "a@b.com (c\\)@d)", "a@b.com (x (y@z) w)", "=?utf-8?q?A?= <a@x.com>", "a@[127.0.0.1]",
		"a@b.com,,c@d.com", `"\\" <a@b.c>`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		addrs, err := mail.ParseAddressList(s)
		if err != nil {
			return
		}
		if got := countAddrSpecs(s); got != len(addrs) {
			t.Fatalf("countAddrSpecs(%q) = %d, net/mail reads %d addresses", s, got, len(addrs))
		}
		if got := countAddrSpecs([]byte(s)); got != len(addrs) {
			t.Fatalf("countAddrSpecs([]byte(%q)) = %d, net/mail reads %d addresses", s, got, len(addrs))
		}
	})
}
