package rfc5322

import "testing"

// Every byte is atext exactly when RFC 5322's ABNF says so: ALPHA, DIGIT
// and the 19 specials; no space, control, non-ASCII byte or other
// printable character.
func TestIsAtextIsTheRFCsClass(t *testing.T) {
	const specials = "!#$%&'*+-/=?^_`{|}~"
	n := 0
	for c := range 256 {
		b := byte(c)
		want := 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9'
		for i := range len(specials) {
			want = want || specials[i] == b
		}
		if IsAtext(b) != want {
			t.Errorf("IsAtext(%q) = %v, want %v", b, !want, want)
		}
		if want {
			n++
		}
	}
	if n != 26+26+10+len(specials) {
		t.Fatalf("%d atext bytes, want %d", n, 26+26+10+len(specials))
	}
}
