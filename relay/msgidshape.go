package relay

import (
	"fmt"
	"strings"

	"github.com/gmailrelay/gmailrelay/internal/rfc5322"
)

// MaxCallerMessageIDLen bounds a caller's Message-ID, angle brackets
// included.
const MaxCallerMessageIDLen = 250

// searchMeta are the atext characters that mean something in Gmail's
// search ({} and | group and OR terms); a Message-ID holding one could
// widen the reconciliation search beyond its own message.
const searchMeta = "{}|"

// CheckMessageIDShape checks a Message-ID given by a caller (raw MIME or
// the Gmail-compatible path) against the strict shape the relay can
// search for: "<" dot-atom-text "@" dot-atom-text ">", printable ASCII
// atext only, no empty atom (no leading, trailing or double dot), at most
// MaxCallerMessageIDLen characters, and none of Gmail's search
// metacharacters { } | (besides ( ) " : and whitespace, which are not
// atext). Anything else is a CodeInvalid *Error with field "message_id"
// naming what is wrong. Ids from MessageID always pass.
func CheckMessageIDShape(id string) error {
	const field = "message_id"
	if len(id) > MaxCallerMessageIDLen {
		return Invalid(field, "Message-ID is %d characters, more than %d", len(id), MaxCallerMessageIDLen)
	}
	if len(id) < 2 || id[0] != '<' || id[len(id)-1] != '>' {
		return Invalid(field, "Message-ID must be enclosed in angle brackets")
	}
	left, right, ok := strings.Cut(id[1:len(id)-1], "@")
	if !ok {
		return Invalid(field, "Message-ID has no @")
	}
	if strings.Contains(right, "@") {
		return Invalid(field, "Message-ID has more than one @")
	}
	for _, side := range []struct{ name, s string }{{"left", left}, {"right", right}} {
		if err := checkDotAtom(side.name, side.s); err != nil {
			return Invalid(field, "Message-ID %s", err)
		}
	}
	return nil
}

// checkDotAtom checks one side of a Message-ID; its error completes the
// sentence "Message-ID ...".
func checkDotAtom(side, s string) error {
	if s == "" {
		return fmt.Errorf("%s part is empty", side)
	}
	if s[0] == '.' || s[len(s)-1] == '.' || strings.Contains(s, "..") {
		return fmt.Errorf("%s part has an empty atom (a leading, trailing or double dot)", side)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case strings.IndexByte(searchMeta, c) >= 0:
			return fmt.Errorf("%s part holds %q, which has meaning in Gmail's search", side, c)
		case c == '.' || rfc5322.IsAtext(c):
		case c == ' ' || c == '\t':
			return fmt.Errorf("%s part holds whitespace", side)
		case c < 0x21 || c > 0x7e:
			return fmt.Errorf("%s part holds the non-printable or non-ASCII byte %#02x", side, c)
		default:
			return fmt.Errorf("%s part holds %q, which is not RFC 5322 atext", side, c)
		}
	}
	return nil
}
