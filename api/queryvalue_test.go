package api

import (
	"net/url"
	"testing"
)

// FuzzQueryValue: queryValue answers what url.ParseQuery(q).Get(key) does.
func FuzzQueryValue(f *testing.F) {
	for _, q := range []string{"", "channel=a", "alt=json&prettyPrint=false", "alt=json&channel=b%69lling&x=1",
		"channel", "channel=", "channel=a&channel=b", "chan%6Eel=c", "channel=%zz&channel=ok", "a;b=c&channel=d",
		"channel=a;b&channel=e", "&&channel=f&", "channel=a+b", "%zz=1&channel=g", "=x&channel=h"} {
		f.Add(q, "channel")
	}
	f.Fuzz(func(t *testing.T, q, key string) {
		want, _ := url.ParseQuery(q)
		if got := queryValue(q, key); got != want.Get(key) {
			t.Fatalf("queryValue(%q, %q) = %q, url.ParseQuery gives %q", q, key, got, want.Get(key))
		}
	})
}
