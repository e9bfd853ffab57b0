package relay

import (
	"net/mail"
	"testing"
)

// FuzzMaxFormattedLen holds maxFormattedLen to what it promises: never
// less than the length of the address checkAddress would otherwise build,
// for any name and address checkHeaderText lets through.
func FuzzMaxFormattedLen(f *testing.F) {
	f.Add("", "a@example.com")
	f.Add("Bench", "bench@example.com")
	f.Add("Grüße, \"Team\"", "x.y@example.com")
	f.Add("日本語の名前", "a..b@example.com")
	f.Add("a_b=c?d", "\"quoted local\"@example.com")
	f.Add("\U0001F600\U0001F600\U0001F600 x", "no-at-sign")
	f.Fuzz(func(t *testing.T, name, address string) {
		if checkHeaderText("f", name) != nil || checkHeaderText("f", address) != nil {
			return
		}
		a := &mail.Address{Name: name, Address: address}
		if got, bound := len(a.String()), maxFormattedLen(a); got > bound {
			t.Fatalf("len(%q.String()) = %d > maxFormattedLen %d", a, got, bound)
		}
	})
}
