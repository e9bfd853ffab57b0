// Package rfc5322 holds the character classes of RFC 5322 (Internet
// Message Format) that both the relay's intake and the Gmail emulator's
// Message-ID check read by.
package rfc5322

import "strings"

// IsAtext reports whether c is atext (RFC 5322 §3.2.3): a letter, a
// digit or one of !#$%&'*+-/=?^_`{|}~.
func IsAtext(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-/=?^_`{|}~", c) >= 0
}
