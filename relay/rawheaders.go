package relay

import (
	"maps"
	"net/mail"
	"slices"
	"unicode/utf8"
)

// checkRawHeaderValues refuses, in every header value of a raw message,
// what checkHeaderText refuses in the fields of a structured send: control
// characters but tab (net/mail has already joined folded lines), C1
// controls (NEL among them) and the Unicode line and paragraph separators
// U+2028/U+2029, which some mail software reads as line breaks, so a value
// could carry a header the relay never saw. Bytes that are not UTF-8 are
// left alone: 8-bit header values predate RFC 6532, and none of them is
// one of these characters once decoded as UTF-8. Errors are CodeInvalid
// *Error with field raw, naming the header.
func checkRawHeaderValues(h mail.Header) error {
	for _, name := range slices.Sorted(maps.Keys(h)) {
		for _, v := range h[name] {
			if r, bad := badRawRune(v); bad {
				return Invalid("raw", "raw %s header holds the control or line-breaking character %U", fieldName(name), r)
			}
		}
	}
	return nil
}

// badRawRune returns the first rune of v no header value may hold.
func badRawRune(v string) (rune, bool) {
	for i := 0; i < len(v); {
		r, size := utf8.DecodeRuneInString(v[i:])
		i += size
		switch {
		case r == utf8.RuneError && size == 1:
			// not UTF-8: see checkRawHeaderValues
		case r == '\t':
		case r < 0x20 || r == 0x7f, 0x80 <= r && r <= 0x9f, r == 0x2028 || r == 0x2029:
			return r, true
		}
	}
	return 0, false
}
