package gmailfake

import (
	"errors"
	"strings"

	"github.com/gmailrelay/gmailrelay/internal/rfc5322"
)

// maxMessageIDLen bounds a strict Message-ID, brackets included.
const maxMessageIDLen = 250

// CheckMessageID reports whether id (a Message-ID header value, surrounding
// blanks ignored) is a strict RFC 5322 msg-id: "<" dot-atom-text "@"
// dot-atom-text ">", printable ASCII atext, no empty atom (no leading,
// trailing or double dot), at most 250 characters. The error says what is
// wrong. Under RewriteMalformed the emulator replaces every id it rejects,
// as Gmail does with ids it finds malformed.
func CheckMessageID(id string) error {
	id = strings.TrimSpace(id)
	switch {
	case id == "":
		return errors.New("empty")
	case len(id) > maxMessageIDLen:
		return errors.New("longer than 250 characters")
	case !strings.HasPrefix(id, "<") || !strings.HasSuffix(id, ">") || len(id) < 2:
		return errors.New("not enclosed in <>")
	}
	left, right, ok := strings.Cut(id[1:len(id)-1], "@")
	if !ok {
		return errors.New("no @")
	}
	if strings.Contains(right, "@") {
		return errors.New("more than one @")
	}
	if err := checkDotAtom(left); err != nil {
		return errors.New("left of @: " + err.Error())
	}
	if err := checkDotAtom(right); err != nil {
		return errors.New("right of @: " + err.Error())
	}
	return nil
}

func checkDotAtom(s string) error {
	if s == "" {
		return errors.New("empty")
	}
	for atom := range strings.SplitSeq(s, ".") {
		if atom == "" {
			return errors.New("empty atom (leading, trailing or double dot)")
		}
		for i := 0; i < len(atom); i++ {
			if !rfc5322.IsAtext(atom[i]) {
				return errors.New("character " + quoteByte(atom[i]) + " is not atext")
			}
		}
	}
	return nil
}

func quoteByte(c byte) string {
	if c < 0x20 || c >= 0x7f {
		return "\\x" + string("0123456789abcdef"[c>>4]) + string("0123456789abcdef"[c&0xf])
	}
	return "'" + string(c) + "'"
}
