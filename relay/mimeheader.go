package relay

import (
	"bytes"
	"encoding/base64"
	"net/mail"
	"strings"
	"unicode/utf8"
)

// headerWriter writes folded header fields with CRLF line endings. Its
// methods take validated values only.
type headerWriter struct {
	b bytes.Buffer
}

// plain writes a value the relay produced itself (dates, ids, media types).
func (h *headerWriter) plain(name, value string) {
	h.b.WriteString(name + ": " + value + "\r\n")
}

// addresses writes an address list, folding between addresses.
func (h *headerWriter) addresses(name string, addrs []*mail.Address) {
	if len(addrs) == 0 {
		return
	}
	words := make([]string, len(addrs))
	for i, a := range addrs {
		words[i] = formatAddress(a)
		if i < len(addrs)-1 {
			words[i] += ","
		}
	}
	h.fold(name, words)
}

// text writes unstructured text (a subject, an extra header's value). A
// value that survives folding and unfolding unchanged — printable ASCII words
// separated by single spaces, no "=?" that a reader would try to decode —
// is written as it is; anything else is written as RFC 2047 encoded-words.
func (h *headerWriter) text(name, value string) {
	h.fold(name, textWords(value))
}

// fold writes name and words separated by single spaces, breaking the line
// between words where it would pass foldWidth.
func (h *headerWriter) fold(name string, words []string) {
	line := len(name) + 1
	h.b.WriteString(name + ":")
	for _, w := range words {
		if line+1+len(w) > foldWidth && line > len(name)+1 {
			h.b.WriteString("\r\n")
			line = 0
		}
		h.b.WriteString(" " + w)
		line += 1 + len(w)
	}
	h.b.WriteString("\r\n")
}

// textWords splits value into the words fold may separate.
func textWords(value string) []string {
	if value == "" {
		return nil
	}
	if words, ok := plainWords(value); ok {
		return words
	}
	return encodedWords(value)
}

// plainWords returns value's space-separated words when writing them
// unencoded round-trips exactly.
func plainWords(value string) ([]string, bool) {
	if strings.Contains(value, "=?") {
		return nil, false
	}
	words := strings.Split(value, " ")
	for _, w := range words {
		if w == "" || len(w) > maxLineLen-100 {
			return nil, false // leading, trailing or doubled space; or unfoldable
		}
		for i := 0; i < len(w); i++ {
			if w[i] < 0x21 || w[i] > 0x7e {
				return nil, false
			}
		}
	}
	return words, true
}

// encodedWords writes value as RFC 2047 "B" encoded-words of at most 45
// bytes of text each (72 characters encoded), split on rune boundaries so
// that every word decodes on its own. The mime package's encoder is not used
// because it leaves printable ASCII alone, which would not protect a literal
// "=?" or irregular spacing.
func encodedWords(value string) []string {
	const maxChunk = 45
	var words []string
	for len(value) > 0 {
		n := 0
		for n < len(value) {
			_, size := utf8.DecodeRuneInString(value[n:])
			if n+size > maxChunk {
				break
			}
			n += size
		}
		words = append(words, "=?utf-8?b?"+base64.StdEncoding.EncodeToString([]byte(value[:n]))+"?=")
		value = value[n:]
	}
	return words
}
