package relay

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

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
