package relay

import (
	"bytes"
	"io"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// isUTF7 reports whether an encoded-word's charset is UTF-7 (RFC 2152)
// under any of its names (UTF-7, UNICODE-1-1-UTF-7, csUnicode11UTF7,
// x-unicode-2-0-utf-7, UTF-7-IMAP…): ignoring ASCII case, separators and
// an RFC 2231 language suffix ("*en"), the name contains "utf7".
func isUTF7(charset string) bool {
	charset, _, _ = strings.Cut(charset, "*")
	b := make([]byte, 0, len(charset))
	for i := 0; i < len(charset); i++ {
		switch c := lowerASCII(charset[i]); c {
		case '-', '_', ' ', '.', ':':
		default:
			b = append(b, c)
		}
	}
	return bytes.Contains(b, []byte("utf7"))
}

// utf7Text reads UTF-7 text as UTF-8, so that the characters its
// base64 runs hide ("+AA0ACg-" is CR LF) are seen by the header checks.
// It decodes leniently, as a forgiving reader would: every complete 16-bit
// unit of a run is decoded (unpaired surrogates as U+FFFD), leftover bits
// are dropped, a run ends at the first byte outside the base64 alphabet
// (a '-' there is absorbed), and "+-" is '+'. Bytes outside runs are kept
// as they are but for 8-bit ones, which UTF-7 does not have, read as '?'.
func utf7Text(input io.Reader) (io.Reader, error) {
	in, err := io.ReadAll(input)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(in))
	for i := 0; i < len(in); {
		c := in[i]
		i++
		if c != '+' {
			if c >= 0x80 {
				c = '?'
			}
			out = append(out, c)
			continue
		}
		var units []uint16
		var bits uint32
		n := 0
		start := i
		for ; i < len(in) && base64Value(in[i]) >= 0; i++ {
			bits = bits<<6 | uint32(base64Value(in[i]))
			if n += 6; n >= 16 {
				n -= 16
				units = append(units, uint16(bits>>n))
				bits &= 1<<n - 1
			}
		}
		if i == start {
			out = append(out, '+') // "+-", or a lone '+'
		}
		for _, r := range utf16.Decode(units) {
			out = utf8.AppendRune(out, r)
		}
		if i < len(in) && in[i] == '-' {
			i++
		}
	}
	return bytes.NewReader(out), nil
}

// base64Value is c's value in the standard base64 alphabet, or -1.
func base64Value(c byte) int {
	switch {
	case 'A' <= c && c <= 'Z':
		return int(c - 'A')
	case 'a' <= c && c <= 'z':
		return int(c-'a') + 26
	case '0' <= c && c <= '9':
		return int(c-'0') + 52
	case c == '+':
		return 62
	case c == '/':
		return 63
	}
	return -1
}
