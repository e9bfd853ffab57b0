package relay

import (
	"bytes"
	"errors"
	"io"
	"net/textproto"
)

// headerField is one field of a message's header section, as
// net/mail.ReadMessage reads it: name and value are slices of the message,
// or, for a field folded over several lines, of scanHeader's unfold
// buffer.
type headerField struct {
	// name is the text before the field's first colon, as written: not
	// canonicalised (see sameHeaderName and headerNameLess). Empty for a
	// line that starts with a colon, which net/mail drops.
	name []byte
	// value is the text after the colon with its leading blanks removed,
	// continuation lines joined as net/mail joins them: each line trimmed
	// of spaces and tabs and joined to the previous one by a single space.
	value []byte
}

// scanHeader reads the header section of msg as net/mail.ReadMessage does
// (the same fields, names, values and errors), field by field in the
// message's order, and returns the fields with the offset where the body
// starts (len(msg) when the header section runs to the end). Like
// net/mail, it splits lines at LF and drops one CR before it, refuses a
// first line that starts with a space or tab and a line without a colon,
// and returns io.EOF for a message with no named field and no blank line.
// The errors' texts are net/mail's. The differential fuzz target
// FuzzHeaderScanAgreesWithNetMail holds the two together.
//
// net/mail itself would not do, for two reasons. It drops a line that
// starts with a colon, so no check would see that line's value, which
// could carry U+2028 and a header for software that breaks lines there;
// scanHeader returns it with an empty name for checkHeaderNames to refuse.
// And net/mail reads through a 4096-byte bufio.Reader and loses a last
// line without a line ending whose length (after any leading blanks of a
// continuation line) bufio hands out in full buffers only, 4096 bytes or
// a multiple: it reports EOF where that line was. scanHeader reads that
// line like any other, as net/mail does when its buffer holds the whole
// message; otherwise such a line, say a second To or Message-ID padded
// with blanks, would reach Gmail without any check.
//
// The fields are allocated once, for as many as the header section has
// lines: a header section of MaxHeaderBytes of one-byte fields holds
// 260,000 of them, and a slice grown by append would take about five times
// their memory (TestPrepareRawBoundsTheHeaderSection).
func scanHeader(msg []byte) (fields []headerField, body int, err error) {
	n, _ := headerSectionLen(msg, len(msg))
	fields = make([]headerField, 0, bytes.Count(msg[:n], []byte("\n"))+1)
	if len(msg) > 0 && isWSP(msg[0]) {
		line, _ := nextLine(msg, 0)
		return fields, 0, errors.New("malformed initial line: " + string(line))
	}
	var unfolded []byte // grows by append: earlier fields keep the array they point into
	named := false
	for p := 0; ; {
		if p == len(msg) {
			if !named {
				return fields, p, io.EOF
			}
			return fields, p, nil
		}
		line, next := nextLine(msg, p)
		p = next
		if len(line) == 0 {
			return fields, p, nil
		}
		kv := trimWSP(line)
		if p < len(msg) && isWSP(msg[p]) {
			start := len(unfolded)
			unfolded = append(unfolded, kv...)
			for p < len(msg) && isWSP(msg[p]) {
				for p < len(msg) && isWSP(msg[p]) {
					p++
				}
				// net/mail adds the space before it knows a line follows:
				// blanks at the very end leave a trailing space.
				unfolded = append(unfolded, ' ')
				if p == len(msg) {
					break
				}
				line, p = nextLine(msg, p)
				unfolded = append(unfolded, trimWSP(line)...)
			}
			kv = unfolded[start:len(unfolded):len(unfolded)]
		}
		name, value, ok := bytes.Cut(kv, []byte(":"))
		if !ok {
			return fields, p, errors.New("malformed header line: " + string(kv))
		}
		for len(value) > 0 && isWSP(value[0]) {
			value = value[1:]
		}
		named = named || len(name) > 0
		fields = append(fields, headerField{name: name, value: value})
	}
}

// nextLine returns the line of msg that starts at p, without its LF and
// one CR before that, and the offset of the next line. p < len(msg).
func nextLine(msg []byte, p int) (line []byte, next int) {
	i := bytes.IndexByte(msg[p:], '\n')
	if i < 0 {
		return msg[p:], len(msg)
	}
	line, next = msg[p:p+i], p+i+1
	if len(line) > 0 && line[len(line)-1] == '\r' {
		line = line[:len(line)-1]
	}
	return line, next
}

func isWSP(c byte) bool { return c == ' ' || c == '\t' }

// trimWSP removes leading and trailing spaces and tabs (and nothing else:
// net/textproto's trim).
func trimWSP(s []byte) []byte {
	for len(s) > 0 && isWSP(s[0]) {
		s = s[1:]
	}
	for len(s) > 0 && isWSP(s[len(s)-1]) {
		s = s[:len(s)-1]
	}
	return s
}

// sameHeaderName reports whether name is filed under the header canon, a
// canonical key such as "Message-Id", in net/mail's Header map: equal but
// for ASCII case. (strings.EqualFold would also match Unicode folds such
// as "ſubject" for "Subject", which net/mail keeps apart.) It compares in
// place: PrepareRaw asks it about every field of a header section of up to
// MaxHeaderBytes, nine times each (TestPrepareRawBoundsTheHeaderSection
// bounds the memory that takes).
func sameHeaderName(name []byte, canon string) bool {
	if len(name) != len(canon) {
		return false
	}
	for i, c := range name {
		if lowerASCII(c) != lowerASCII(canon[i]) {
			return false
		}
	}
	return true
}

// headerNameLess reports whether a's key in net/mail's Header map sorts
// before b's.
func headerNameLess(a, b []byte) bool {
	return textproto.CanonicalMIMEHeaderKey(string(a)) < textproto.CanonicalMIMEHeaderKey(string(b))
}

func lowerASCII(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}
