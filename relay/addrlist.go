package relay

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/gmailrelay/gmailrelay/internal/rfc5322"
)

// simpleAddressList reads the shapes an address header takes in nearly
// every message a workflow sends, without net/mail's parser (≈ 20
// allocations a header, issue 16): a comma-separated list of mailboxes,
// each a bare addr-spec ("a@example.com") or an angle addr-spec after an
// optional display name of plain words ("Shop Bot <bot@example.com>");
// ASCII only, dot-atoms only, blanks (space, tab) around the parts.
//
// It answers how many mailboxes v holds and the addr-spec of the first.
// ok is false for anything else (quoted strings, comments, groups, encoded
// words, domain literals, dots or '=' in a display name, 8-bit bytes, an
// empty entry, an address too long to pass checkAddress): the caller then
// hands the value to parseAddresses, which decides. Whenever ok is true,
// parseAddresses accepts v with the same number of addresses, the first
// with addr-spec first (FuzzSimpleAddressListAgreesWithNetMail).
func simpleAddressList(v []byte) (n int, first []byte, ok bool) {
	for {
		end := bytes.IndexByte(v, ',')
		if end < 0 {
			end = len(v)
		}
		spec, ok := simpleMailbox(v[:end])
		if !ok {
			return 0, nil, false
		}
		if n == 0 {
			first = spec
		}
		n++
		if end == len(v) {
			return n, first, true
		}
		v = v[end+1:]
	}
}

// simpleMailbox reads one entry of simpleAddressList: its addr-spec, and
// whether it has one of the simple shapes. The entry's length bounds the
// formatted address that checkAddress measures (display name plus
// addr-spec are never longer than the entry), so an entry within
// maxAddressLen's bound needs no further check.
func simpleMailbox(e []byte) ([]byte, bool) {
	e = trimWSP(e)
	if len(e) == 0 || 4*len(e)+32 > maxAddressLen {
		return nil, false
	}
	if e[len(e)-1] != '>' {
		return e, isDotAtomAddrSpec(e)
	}
	lt := bytes.IndexByte(e, '<')
	if lt < 0 {
		return nil, false
	}
	for _, c := range e[:lt] {
		if !isWSP(c) && (!rfc5322.IsAtext(c) || c == '=') {
			return nil, false
		}
	}
	spec := e[lt+1 : len(e)-1]
	return spec, isDotAtomAddrSpec(spec)
}

// isDotAtomAddrSpec reports whether s is local@domain, both dot-atoms of
// ASCII atext (RFC 5322 section 3.4.1): no blank, no leading, trailing or
// doubled dot.
func isDotAtomAddrSpec(s []byte) bool {
	local, domain, ok := bytes.Cut(s, []byte{'@'})
	return ok && isDotAtom(local) && isDotAtom(domain) // a second @ is not atext
}

func isDotAtom(s []byte) bool {
	if len(s) == 0 || s[0] == '.' || s[len(s)-1] == '.' {
		return false
	}
	for i, c := range s {
		if c == '.' {
			if s[i-1] == '.' {
				return false
			}
			continue
		}
		if !rfc5322.IsAtext(c) {
			return false
		}
	}
	return true
}

// countAddrSpecs counts the '@' of an address list outside quoted strings,
// comments and domain literals, without allocating: every address has one
// such '@', in its addr-spec, and nothing else of a list net/mail accepts
// has one, so for such a list it is the number of addresses
// (FuzzCountAddrSpecs). It is what lets a list of a million addresses be
// refused before net/mail parses it, at hundreds of bytes an address.
func countAddrSpecs[T string | []byte](s T) int {
	n, depth := 0, 0 // depth: of nested comments
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case depth > 0:
			switch c {
			case '\\':
				i++
			case '(':
				depth++
			case ')':
				depth--
			}
		case c == '"':
			for i++; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' {
					i++
				}
			}
		case c == '(':
			depth = 1
		case c == '[':
			for i < len(s) && s[i] != ']' {
				i++
			}
		case c == '@':
			n++
		}
	}
	return n
}

// UnmarshalJSON reads an address list in the JSON shapes a send request
// carries it: a list of strings or one string (n8n sends both). null and
// a blank string are the empty list. A list of more than MaxRecipients
// strings is refused as soon as one follows the MaxRecipients-th, before
// the rest is decoded: each string holds at least one address or is
// blank, and a blank one among thousands is no use. Errors are a
// CodeInvalid *Error with no field, which the caller, who knows the
// field, names.
func (l *AddressList) UnmarshalJSON(data []byte) error {
	data = bytes.TrimSpace(data)
	switch {
	case bytes.Equal(data, []byte("null")):
		*l = nil
		return nil
	case len(data) > 0 && data[0] == '"':
		var s string
		if err := json.Unmarshal(data, &s); err != nil {
			return errAddressListShape()
		}
		*l = nil
		if strings.TrimSpace(s) != "" {
			*l = AddressList{s}
		}
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if t, err := dec.Token(); err != nil || t != json.Delim('[') {
		return errAddressListShape()
	}
	list := AddressList{} // [] is an empty list, not null
	for dec.More() {
		if len(list) == MaxRecipients {
			return &Error{Code: CodeInvalid, Message: fmt.Sprintf(
				"must hold at most %d addresses (to, cc and bcc together take at most %d recipients)", MaxRecipients, MaxRecipients)}
		}
		var s string
		if err := dec.Decode(&s); err != nil {
			return errAddressListShape()
		}
		list = append(list, s)
	}
	if t, err := dec.Token(); err != nil || t != json.Delim(']') {
		return errAddressListShape()
	}
	*l = list
	return nil
}

func errAddressListShape() error {
	return &Error{Code: CodeInvalid, Message: "must be a string or a list of strings"}
}
