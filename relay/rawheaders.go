package relay

import (
	"bytes"
	"io"
	"mime"
	"net/textproto"
	"strings"
	"unicode/utf8"
)

// onceHeaders are the headers a raw message may carry at most once: two To
// headers could be read differently by the relay and by Gmail. A repeat is
// reported for the first of them in this order.
var onceHeaders = [...]string{"Message-Id", "From", "Sender", "To", "Cc", "Bcc", "Reply-To", "Subject", "Date", "X-Gmailrelay-Job"}

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
	hJob // JobHeader
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
// could carry a header the relay never saw. It looks twice: at the value
// as written, and at the text of its RFC 2047 encoded-words once decoded
// (rawValueProblem), in every header, since a reader may decode them in a
// Subject, an X- header or a comment alike. Bytes that are not UTF-8 are
// left alone (8-bit header values predate RFC 6532), but for 0x80–0x9F:
// read as ISO-8859-1, as such values often are, they are C1 controls.
// Errors are CodeInvalid *Error with field raw, naming the header: of
// several, the first in net/mail's Header key order (as when it walked the
// sorted keys), and of one name's fields the first in the message.
func checkRawHeaderValues(fields []headerField) error {
	var bad []byte
	var problem valueProblem
	for _, f := range fields {
		if len(f.name) == 0 {
			continue // net/mail drops a field with no name
		}
		if bad != nil && !headerNameLess(f.name, bad) {
			continue // cannot be the one reported
		}
		if p, found := rawValueProblem(f.value); found {
			bad, problem = f.name, p
		}
	}
	if bad == nil {
		return nil
	}
	return problem.err(textproto.CanonicalMIMEHeaderKey(string(bad)))
}

// valueProblem is what rawValueProblem found in a header value.
type valueProblem struct {
	r       rune // the character; for a lone byte, its value
	byte8   bool // r is a byte 0x80–0x9F that is not part of UTF-8
	encoded bool // r is in the decoded text of an encoded-word
}

// err is the error for p in the header name (canonical).
func (p valueProblem) err(name string) error {
	name = fieldName(name)
	switch {
	case p.byte8:
		return Invalid("raw", "raw %s header holds the byte %#02x outside UTF-8, the C1 control %U when read as ISO-8859-1; write non-ASCII header text as UTF-8 or as RFC 2047 encoded-words", name, p.r, p.r)
	case p.encoded:
		return Invalid("raw", "raw %s header has an RFC 2047 encoded-word that decodes to the control or line-breaking character %U", name, p.r)
	}
	return Invalid("raw", "raw %s header holds the control or line-breaking character %U", name, p.r)
}

// rawValueProblem returns the first thing wrong with a raw header value
// (see checkRawHeaderValues): a character badRawRune refuses, else one in
// the decoded text of its encoded-words.
func rawValueProblem(v []byte) (valueProblem, bool) {
	if r, byte8, found := badRawRune(v); found {
		return valueProblem{r: r, byte8: byte8}, true
	}
	if !bytes.Contains(v, []byte("=?")) {
		return valueProblem{}, false // no encoded-word: the common case, without a copy
	}
	text, err := rawWordDecoder.DecodeHeader(string(v))
	if err != nil {
		// Not expected: the decoder's charset reader never fails.
		return valueProblem{r: utf8.RuneError, encoded: true}, true
	}
	if r, _, found := badRawRune([]byte(text)); found {
		return valueProblem{r: r, encoded: true}, true
	}
	return valueProblem{}, false
}

// checkEncodedWords refuses, in a structured send's header text s (field
// field), an RFC 2047 encoded-word whose decoded text holds a character
// badRawRune refuses. The relay writes such text encoded once more, so a
// reader that decodes once sees the words as written; one that decodes
// the result again would find the line break, so it is refused as in a
// raw message.
func checkEncodedWords(field, s string) error {
	if !strings.Contains(s, "=?") {
		return nil
	}
	text, err := rawWordDecoder.DecodeHeader(s)
	if err != nil {
		return Invalid(field, "%s has an RFC 2047 encoded-word that cannot be decoded", field)
	}
	if r, _, found := badRawRune([]byte(text)); found {
		return Invalid(field, "%s has an RFC 2047 encoded-word that decodes to the control or line-breaking character %U", field, r)
	}
	return nil
}

// rawWordDecoder decodes encoded-words only to check their text. The mime
// package decodes UTF-8, ISO-8859-1 and US-ASCII itself; UTF-7, whose
// base64 runs hide any character in plain ASCII ("+AA0ACg-" is CR LF), is
// decoded by utf7Text; any other charset (ISO-2022-JP, windows-1252, …) is
// read by opaqueCharset, so no charset is refused for being unknown, and
// CR, LF and the other ASCII controls, which mean the same in every
// ASCII-compatible charset, are still found.
var rawWordDecoder = mime.WordDecoder{CharsetReader: func(charset string, input io.Reader) (io.Reader, error) {
	if isUTF7(charset) {
		return utf7Text(input)
	}
	return opaqueCharset{input}, nil
}}

// opaqueCharset reads text in a charset the relay does not know: ASCII
// bytes as themselves, but ESC, which ISO-2022 charsets use to switch
// character sets, and every 8-bit byte, whose meaning depends on the
// charset, as '?'.
type opaqueCharset struct{ r io.Reader }

func (o opaqueCharset) Read(p []byte) (int, error) {
	n, err := o.r.Read(p)
	for i, c := range p[:n] {
		if c == 0x1b || c >= 0x80 {
			p[i] = '?'
		}
	}
	return n, err
}

// badRawRune returns the first rune of v no header value may hold; byte8
// says it is a byte 0x80–0x9F that is not part of a UTF-8 sequence (r is
// its value).
func badRawRune(v []byte) (r rune, byte8, found bool) {
	for i := 0; i < len(v); {
		if c := v[i]; c >= 0x20 && c < 0x7f || c == '\t' {
			i++ // printable ASCII: the common case, without decoding
			continue
		}
		d, size := utf8.DecodeRune(v[i:])
		switch {
		case d == utf8.RuneError && size == 1:
			// Not UTF-8: see checkRawHeaderValues.
			if c := v[i]; 0x80 <= c && c <= 0x9f {
				return rune(c), true, true
			}
		case d == '\t':
		case d < 0x20 || d == 0x7f, 0x80 <= d && d <= 0x9f, d == 0x2028 || d == 0x2029:
			return d, false, true
		}
		i += size
	}
	return 0, false, false
}
