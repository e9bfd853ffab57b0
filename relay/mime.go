package relay

import (
	"bytes"
	"fmt"
	"mime"
	"mime/multipart"
	"mime/quotedprintable"
	"net/mail"
	"net/textproto"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// Message is a structured email: what BuildMIME turns into an RFC 5322
// message. Each element of To, Cc, Bcc and ReplyTo is an address list ("a@x",
// "B <b@y>, c@z"), so a list of strings and one comma-separated string mean
// the same thing.
type Message struct {
	From    string // optional: Gmail fills in the mailbox's own address
	To      []string
	Cc      []string
	Bcc     []string
	ReplyTo []string
	Subject string
	Text    string
	HTML    string
	// Headers are extra header fields. Names must be RFC 7230 tokens (a
	// subset of RFC 5322 ftext); the headers the relay writes itself are
	// refused (see reservedHeader).
	Headers map[string]string
}

// foldWidth is the line width header folding aims for (RFC 5322 section
// 2.1.1's "SHOULD"); maxLineLen is the hard limit.
const (
	foldWidth  = 78
	maxLineLen = 998
)

// maxAddressLen bounds one formatted address, which is never folded.
const maxAddressLen = 900

// ParseAddressList parses an RFC 5322 address list ("a@x.com, B <b@y.com>")
// and returns each address in a normalised form: the bare addr-spec
// ("a@x.com") when there is no display name, else the display name quoted or
// RFC 2047-encoded followed by the addr-spec in angle brackets
// (`"B" <b@y.com>`). A blank string is an empty list. CR, LF or NUL anywhere
// (including inside an encoded display name), a control character, invalid
// UTF-8 or a malformed address is a CodeInvalid error naming field.
func ParseAddressList(field, s string) ([]string, error) {
	addrs, err := parseAddresses(field, []string{s})
	if err != nil {
		return nil, err
	}
	out := make([]string, len(addrs))
	for i, a := range addrs {
		out[i] = formatAddress(a)
	}
	return out, nil
}

// parseAddresses parses every element of list as an address list and
// returns the addresses, checked for injection.
func parseAddresses(field string, list []string) ([]*mail.Address, error) {
	var out []*mail.Address
	for _, s := range list {
		if err := checkHeaderText(field, s); err != nil {
			return nil, err
		}
		if strings.TrimSpace(s) == "" {
			continue
		}
		addrs, err := mail.ParseAddressList(s)
		if err != nil {
			return nil, Invalid(field, "malformed address list %q: %v", s, err)
		}
		for _, a := range addrs {
			if err := checkAddress(field, a); err != nil {
				return nil, err
			}
		}
		if out == nil {
			out = addrs // the usual single list: no copy
		} else {
			out = append(out, addrs...)
		}
	}
	return out, nil
}

// checkAddress refuses what the parser decoded into something unsafe: an
// encoded display name may hide CR or LF.
func checkAddress(field string, a *mail.Address) error {
	if err := checkHeaderText(field, a.Name); err != nil {
		return err
	}
	if err := checkHeaderText(field, a.Address); err != nil {
		return err
	}
	if !strings.Contains(a.Address, "@") {
		return Invalid(field, "address %q has no @", a.Address)
	}
	if maxFormattedLen(a) > maxAddressLen && len(a.String()) > maxAddressLen {
		return Invalid(field, "address %q is longer than %d bytes", a.Address, maxAddressLen)
	}
	return nil
}

// formatAddress writes a as a header would carry it, without angle
// brackets when there is no display name.
func formatAddress(a *mail.Address) string {
	s := a.String()
	if a.Name == "" {
		return strings.TrimSuffix(strings.TrimPrefix(s, "<"), ">")
	}
	return s
}

// checkHeaderText refuses text that could break out of a header field: CR,
// LF and NUL (header injection), other control characters but tab, and
// invalid UTF-8; and the same in the decoded text of its RFC 2047
// encoded-words (checkEncodedWords).
func checkHeaderText(field, s string) error {
	if strings.ContainsAny(s, "\r\n\x00") {
		return Invalid(field, "%s contains CR, LF or NUL", field)
	}
	if !utf8.ValidString(s) {
		return Invalid(field, "%s is not valid UTF-8", field)
	}
	for _, r := range s {
		if (r < 0x20 && r != '\t') || r == 0x7f {
			return Invalid(field, "%s contains a control character", field)
		}
		// C1 controls (NEL among them) and the Unicode line and paragraph
		// separators read as line breaks to some mail software.
		if (0x80 <= r && r <= 0x9f) || r == 0x2028 || r == 0x2029 {
			return Invalid(field, "%s contains the line-breaking or control character %U", field, r)
		}
	}
	return checkEncodedWords(field, s)
}

// maxFormattedLen bounds len(a.String()) without building it, for a whose
// Name and Address are valid UTF-8 (checkHeaderText): quoting at most
// doubles the local part and the name (2n+2), a Q-encoded name is at most
// 3 bytes a byte plus 13 for each encoded-word of at least 17 bytes and 12
// for the first (< 3.8n+12), a B-encoded one less. A fuzz target holds it.
func maxFormattedLen(a *mail.Address) int {
	return 4*(len(a.Name)+len(a.Address)) + 32
}

// reservedHeader reports whether name (any case) is a header the relay
// writes itself, or one that names recipients (Resent-*), so a caller cannot
// set it through Message.Headers.
func reservedHeader(name string) bool {
	n := strings.ToLower(name)
	switch n {
	case "message-id", "from", "to", "cc", "bcc", "reply-to", "subject", "date", "mime-version", "x-gmailrelay-job":
		return true
	}
	return strings.HasPrefix(n, "content-") || strings.HasPrefix(n, "resent-")
}

// maxHeaderNameLen bounds an extra header's name so its first line fits.
const maxHeaderNameLen = 76

// validHeaderName reports whether name is a non-empty RFC 7230 token, which
// both RFC 5322 (ftext) and Go's textproto reader accept, of at most
// maxHeaderNameLen bytes.
func validHeaderName(name string) bool {
	if name == "" || len(name) > maxHeaderNameLen {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
			strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// validated is a Message after validation: what the built message must say.
type validated struct {
	from                 *mail.Address
	to, cc, bcc, replyTo []*mail.Address
	subject, text, html  string
	headerNames          []string // canonical, sorted
	headers              map[string]string
	messageID            string
}

// validate checks m and messageID; every error is a CodeInvalid *Error
// naming the field.
func validate(m Message, messageID string) (validated, error) {
	var v validated
	id, err := NormalizeMessageID(messageID)
	if err != nil {
		return v, err
	}
	v.messageID = id
	if m.From != "" {
		if err := checkHeaderText("from", m.From); err != nil {
			return v, err
		}
		a, err := mail.ParseAddress(m.From)
		if err != nil {
			return v, Invalid("from", "malformed address %q: %v", m.From, err)
		}
		if err := checkAddress("from", a); err != nil {
			return v, err
		}
		v.from = a
	}
	lists := []struct {
		field string
		in    []string
		out   *[]*mail.Address
	}{
		{"to", m.To, &v.to},
		{"cc", m.Cc, &v.cc},
		{"bcc", m.Bcc, &v.bcc},
		{"reply_to", m.ReplyTo, &v.replyTo},
	}
	// Counted before any list is parsed (net/mail costs hundreds of bytes
	// an address), and again after, exactly.
	if err := capRecipients(countListAddrSpecs(m.To), countListAddrSpecs(m.Cc), countListAddrSpecs(m.Bcc)); err != nil {
		return v, err
	}
	for _, l := range lists {
		if *l.out, err = parseAddresses(l.field, l.in); err != nil {
			return v, err
		}
	}
	if len(v.to)+len(v.cc)+len(v.bcc) == 0 {
		return v, Invalid("to", "at least one recipient (to, cc or bcc) is required")
	}
	if err := capRecipients(len(v.to), len(v.cc), len(v.bcc)); err != nil {
		return v, err
	}
	if err := checkHeaderText("subject", m.Subject); err != nil {
		return v, err
	}
	v.subject = m.Subject
	for field, body := range map[string]string{"text": m.Text, "html": m.HTML} {
		if !utf8.ValidString(body) {
			return v, Invalid(field, "%s is not valid UTF-8", field)
		}
	}
	v.text, v.html = m.Text, m.HTML
	v.headers = make(map[string]string, len(m.Headers))
	for name, value := range m.Headers {
		if !validHeaderName(name) {
			return v, Invalid("headers", "header name %q is not a valid field name", name)
		}
		if reservedHeader(name) {
			return v, Invalid("headers", "header %q is set by the relay and cannot be given", name)
		}
		canon := textproto.CanonicalMIMEHeaderKey(name)
		if _, dup := v.headers[canon]; dup {
			return v, Invalid("headers", "header %q is given twice (names are case-insensitive)", canon)
		}
		if err := checkExtraHeader(canon, value); err != nil {
			return v, err
		}
		v.headers[canon] = value
		v.headerNames = append(v.headerNames, canon)
	}
	slices.Sort(v.headerNames)
	return v, nil
}

// capRecipients refuses more than MaxRecipients addresses in to, cc and
// bcc together, given their counts, naming the list that passes the cap.
func capRecipients(to, cc, bcc int) error {
	if field, total := overRecipients([3]int{to, cc, bcc}, MaxRecipients); field != "" {
		return Invalid(field, "%s brings the addresses in to, cc and bcc to %d; at most %d recipients are accepted", field, total, MaxRecipients)
	}
	return nil
}

// overRecipients names the first of to, cc and bcc (counts n) that brings
// their addresses together over limit, with that running total; "" when
// they stay within it.
func overRecipients(n [3]int, limit int) (field string, total int) {
	for i, f := range [...]string{"to", "cc", "bcc"} {
		if total += n[i]; total > limit {
			return f, total
		}
	}
	return "", total
}

// countListAddrSpecs is countAddrSpecs over every string of list.
func countListAddrSpecs(list []string) int {
	n := 0
	for _, s := range list {
		n += countAddrSpecs(s)
	}
	return n
}

// BuildMIME validates m and writes it as an RFC 5322 message with CRLF line
// endings: Date, From (when given), To, Cc, Bcc, Reply-To, Subject,
// Message-ID (messageID, normalised), MIME-Version: 1.0, the extra headers
// (sorted by name), then the body in UTF-8 and quoted-printable — text/plain
// for text only, text/html for html only, multipart/alternative for both.
// Bcc is written as a header on purpose: Gmail's API reads the recipients
// from the headers and strips Bcc itself. Non-ASCII (or otherwise unsafe)
// subjects, display names and header values are RFC 2047-encoded.
//
// Bad input is a CodeInvalid *Error naming the field (from, to, cc, bcc,
// reply_to, subject, text, html, headers, headers.<Name>, message_id). No
// recipient at all is field "to"; more than MaxRecipients in to, cc and bcc
// together names the list that passes the cap. As a last guard the result
// is parsed back with net/mail and must carry exactly the validated
// headers; a difference (a bug, never expected) is a CodeInternal error
// rather than a message that says something else than what was checked.
func BuildMIME(m Message, messageID string, date time.Time) ([]byte, error) {
	raw, _, err := buildMIME(m, messageID, date)
	return raw, err
}

// buildMIME is BuildMIME that also returns the validated message.
func buildMIME(m Message, messageID string, date time.Time) ([]byte, validated, error) {
	v, err := validate(m, messageID)
	if err != nil {
		return nil, v, err
	}
	var h headerWriter
	h.plain("Date", date.Format(time.RFC1123Z))
	if v.from != nil {
		h.addresses("From", []*mail.Address{v.from})
	}
	h.addresses("To", v.to)
	h.addresses("Cc", v.cc)
	h.addresses("Bcc", v.bcc)
	h.addresses("Reply-To", v.replyTo)
	if v.subject != "" {
		h.text("Subject", v.subject)
	}
	h.plain("Message-ID", v.messageID)
	h.plain(JobHeader, JobHash(v.messageID))
	h.plain("MIME-Version", "1.0")
	for _, name := range v.headerNames {
		h.text(name, v.headers[name])
	}

	var body bytes.Buffer
	switch {
	case v.text != "" && v.html != "":
		mw := multipart.NewWriter(&body)
		h.plain("Content-Type", mime.FormatMediaType("multipart/alternative", map[string]string{"boundary": mw.Boundary()}))
		for _, p := range []struct{ typ, content string }{{"text/plain", v.text}, {"text/html", v.html}} {
			pw, err := mw.CreatePart(textproto.MIMEHeader{
				"Content-Type":              {p.typ + "; charset=utf-8"},
				"Content-Transfer-Encoding": {"quoted-printable"},
			})
			if err != nil {
				return nil, v, fmt.Errorf("create %s part: %w", p.typ, err)
			}
			if err := writeQP(pw, p.content); err != nil {
				return nil, v, fmt.Errorf("write %s part: %w", p.typ, err)
			}
		}
		if err := mw.Close(); err != nil {
			return nil, v, fmt.Errorf("close multipart body: %w", err)
		}
	default:
		typ, content := "text/plain", v.text
		if v.html != "" {
			typ, content = "text/html", v.html
		}
		h.plain("Content-Type", typ+"; charset=utf-8")
		h.plain("Content-Transfer-Encoding", "quoted-printable")
		if err := writeQP(&body, content); err != nil {
			return nil, v, fmt.Errorf("write %s body: %w", typ, err)
		}
	}
	h.b.WriteString("\r\n")
	h.b.Write(body.Bytes())
	out := h.b.Bytes()
	if err := checkBuilt(out, v); err != nil {
		return nil, v, &Error{Code: CodeInternal, Message: "built message does not match its validated headers", Err: err}
	}
	return out, v, nil
}

// writeQP writes s quoted-printable; the writer turns every line break into
// CRLF.
func writeQP(w interface{ Write([]byte) (int, error) }, s string) error {
	qp := quotedprintable.NewWriter(w)
	if _, err := qp.Write([]byte(s)); err != nil {
		return err
	}
	return qp.Close()
}

// checkBuilt parses a built message back and compares its headers with v.
func checkBuilt(raw []byte, v validated) error {
	msg, err := mail.ReadMessage(bytes.NewReader(raw))
	if err != nil {
		return fmt.Errorf("parse built message: %w", err)
	}
	want := map[string]bool{"Date": true, "Message-Id": true, "Mime-Version": true, "Content-Type": true, JobHeader: true}
	if v.text == "" || v.html == "" {
		want["Content-Transfer-Encoding"] = true
	}
	var dec mime.WordDecoder
	for _, l := range []struct {
		name  string
		addrs []*mail.Address
	}{{"From", nonNil(v.from)}, {"To", v.to}, {"Cc", v.cc}, {"Bcc", v.bcc}, {"Reply-To", v.replyTo}} {
		if len(l.addrs) == 0 {
			continue
		}
		want[l.name] = true
		got, err := msg.Header.AddressList(l.name)
		if err != nil {
			return fmt.Errorf("parse built %s: %w", l.name, err)
		}
		if !sameAddresses(got, l.addrs) {
			return fmt.Errorf("built %s %v differs from validated %v", l.name, got, l.addrs)
		}
	}
	texts := map[string]string{}
	if v.subject != "" {
		texts["Subject"] = v.subject
	}
	for name, value := range v.headers {
		if value != "" {
			texts[name] = value
		}
		want[name] = true
	}
	for name, value := range texts {
		want[name] = true
		got, err := dec.DecodeHeader(msg.Header.Get(name))
		if err != nil {
			return fmt.Errorf("decode built %s: %w", name, err)
		}
		if got != value {
			return fmt.Errorf("built %s %q differs from validated %q", name, got, value)
		}
	}
	if got := msg.Header.Get("Message-Id"); got != v.messageID {
		return fmt.Errorf("built Message-ID %q differs from validated %q", got, v.messageID)
	}
	if got := msg.Header.Get(JobHeader); got != JobHash(v.messageID) {
		return fmt.Errorf("built %s %q differs from the Message-ID's %q", JobHeader, got, JobHash(v.messageID))
	}
	for name, values := range msg.Header {
		if !want[name] {
			return fmt.Errorf("built message has unexpected header %q", name)
		}
		if len(values) != 1 {
			return fmt.Errorf("built message has %d %s headers", len(values), name)
		}
	}
	if len(msg.Header) != len(want) {
		return fmt.Errorf("built message has %d headers, want %d", len(msg.Header), len(want))
	}
	return nil
}

func nonNil(a *mail.Address) []*mail.Address {
	if a == nil {
		return nil
	}
	return []*mail.Address{a}
}

func sameAddresses(a, b []*mail.Address) bool {
	return slices.EqualFunc(a, b, func(x, y *mail.Address) bool {
		return x.Name == y.Name && x.Address == y.Address
	})
}
