package relay

import (
	"bytes"
	"mime"
	"net/mail"
	"strings"
	"unicode"
)

// Summary is what a human needs to recognise a stored message: its
// recipients and its subject.
type Summary struct {
	// To holds the bare addresses (addr-spec) of the To header, in order;
	// empty when there is none or it cannot be parsed.
	To []string `json:"to"`
	// Subject is the decoded Subject header, with control characters
	// (CR and LF among them) replaced by spaces, so it is safe to put in
	// another message's header; "" when there is none.
	Subject string `json:"subject"`
}

// Recipients counts the addresses in a stored message's To, Cc and Bcc
// headers (0 when it cannot be parsed).
func Recipients(raw []byte) int {
	m, err := mail.ReadMessage(bytes.NewReader(raw))
	if err != nil {
		return 0
	}
	n := 0
	for _, h := range []string{"To", "Cc", "Bcc"} {
		if list, err := m.Header.AddressList(h); err == nil {
			n += len(list)
		}
	}
	return n
}

// Summarize reads the To and Subject headers of a stored message. A
// message that cannot be parsed has an empty summary: the summary helps a
// reviewer and never fails the page or listing that shows it.
func Summarize(raw []byte) Summary {
	s := Summary{To: []string{}}
	m, err := mail.ReadMessage(bytes.NewReader(raw))
	if err != nil {
		return s
	}
	if list, err := m.Header.AddressList("To"); err == nil {
		for _, a := range list {
			s.To = append(s.To, a.Address)
		}
	}
	subject := m.Header.Get("Subject")
	if d, err := new(mime.WordDecoder).DecodeHeader(subject); err == nil {
		subject = d
	}
	s.Subject = strings.TrimSpace(strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, subject))
	return s
}
