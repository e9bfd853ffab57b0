package relay

import (
	"net/textproto"
	"unicode/utf8"
)

// onceHeaders are the headers a raw message may carry at most once: two To
// headers could be read differently by the relay and by Gmail. A repeat is
// reported for the first of them in this order.
var onceHeaders = [...]string{"Message-Id", "From", "Sender", "To", "Cc", "Bcc", "Reply-To", "Subject", "Date"}

// Indexes in onceHeaders.
const (
	hMessageID = iota
	hFrom
	hSender
	hTo
	hCc
	hBcc
	hReplyTo
	hSubject
	hDate
)

// onceField is the one field of a name in onceHeaders.
type onceField struct {
	value   []byte
	present bool
}

// onceHeaderValues returns the field of each of onceHeaders, refusing any
// of them given twice or more (a CodeInvalid *Error with field raw).
func onceHeaderValues(fields []headerField) ([len(onceHeaders)]onceField, error) {
	var once [len(onceHeaders)]onceField
	var counts [len(onceHeaders)]int
	for _, f := range fields {
		for i, name := range onceHeaders {
			if sameHeaderName(f.name, name) {
				if counts[i]++; counts[i] == 1 {
					once[i] = onceField{value: f.value, present: true}
				}
				break
			}
		}
	}
	for i, n := range counts {
		if n > 1 {
			return once, Invalid("raw", "raw has %d %s headers; at most one is allowed", n, onceHeaders[i])
		}
	}
	return once, nil
}

// checkRawHeaderValues refuses, in every header value of a raw message,
// what checkHeaderText refuses in the fields of a structured send: control
// characters but tab (net/mail has already joined folded lines), C1
// controls (NEL among them) and the Unicode line and paragraph separators
// U+2028/U+2029, which some mail software reads as line breaks, so a value
// could carry a header the relay never saw. Bytes that are not UTF-8 are
// left alone: 8-bit header values predate RFC 6532, and none of them is
// one of these characters once decoded as UTF-8. Errors are CodeInvalid
// *Error with field raw, naming the header: of several, the first in
// net/mail's Header key order (as when it walked the sorted keys), and of
// one name's fields the first in the message.
func checkRawHeaderValues(fields []headerField) error {
	var bad []byte
	var badRune rune
	for _, f := range fields {
		if len(f.name) == 0 {
			continue // net/mail drops a field with no name
		}
		if bad != nil && !headerNameLess(f.name, bad) {
			continue // cannot be the one reported
		}
		if r, found := badRawRune(f.value); found {
			bad, badRune = f.name, r
		}
	}
	if bad == nil {
		return nil
	}
	name := textproto.CanonicalMIMEHeaderKey(string(bad))
	return Invalid("raw", "raw %s header holds the control or line-breaking character %U", fieldName(name), badRune)
}

// badRawRune returns the first rune of v no header value may hold.
func badRawRune(v []byte) (rune, bool) {
	for i := 0; i < len(v); {
		if c := v[i]; c >= 0x20 && c < 0x7f || c == '\t' {
			i++ // printable ASCII: the common case, without decoding
			continue
		}
		r, size := utf8.DecodeRune(v[i:])
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
