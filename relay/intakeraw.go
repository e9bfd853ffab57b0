package relay

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"net/mail"
	"strings"
)

// PrepareRaw validates a raw RFC 5322 message (a message/rfc822 body, the
// Gmail-compatible path, or a request's raw field) and ties it to its key.
//
// Bare LF line endings are accepted and normalised to CRLF. When the message
// has a Message-ID and key is not empty, the Message-ID must equal
// MessageID(key, domain); with no key, the Message-ID itself is the key.
// When it has none and key is not empty, MessageID(key, domain) is added as
// the first header. The fingerprint is the hex sha256 of the message as it
// will be sent (normalised, with the Message-ID).
//
// Refused with a CodeInvalid *Error, field raw: a header section over
// MaxHeaderBytes, an unparseable message (as net/mail.ReadMessage reads
// it), NUL bytes, a bare CR in the header section, a repeated
// Message-ID/From/Sender/To/Cc/Bcc/Reply-To/Subject/Date header, malformed
// addresses, a From or Sender that is not exactly one address, no
// recipient (To, Cc or Bcc) or more than MaxRecipients, a header name with
// whitespace before its colon (obsolete "Name :" syntax) or other bytes
// outside RFC 5322 ftext, a header line that starts with a colon, a
// control or line-breaking character in a header value or in the decoded
// text of its encoded-words, or a byte 0x80–0x9F outside UTF-8
// (checkRawHeaderValues), a malformed Message-ID, a Message-ID that is not
// the key's ("Message-ID mismatch"; ASCII case aside), and no Message-ID
// with no key. A Message-ID that fails CheckMessageIDShape is refused with
// field message_id; one in the relay's own namespace that the key does not
// derive (CheckReservedMessageID, always without a key) is
// CodeReservedMessageID with field message_id. Prepared.Raw may share raw's bytes: the caller must not
// change raw afterwards. A key or channel that is not valid is an error naming that
// field. Over MaxMessageBytes is CodeTooLarge. A bad domain is a
// CodeInternal error.
//
// PrepareRaw derives Message-IDs with the default scheme (no secret): it
// is NewIDScheme(domain, nil).PrepareRaw.
func PrepareRaw(raw []byte, key, channel, domain string) (Prepared, error) {
	return NewIDScheme(domain, nil).PrepareRaw(raw, key, channel)
}

// PrepareRaw is the package's PrepareRaw with the Message-IDs of s: a
// key's Message-ID is s.MessageID(key).
func (s IDScheme) PrepareRaw(raw []byte, key, channel string) (Prepared, error) {
	return s.prepareRaw(raw, key, "", channel)
}

// PrepareRawClaim is PrepareRaw(raw, "", channel, domain), the
// Gmail-compatible path's: the message's own Message-ID is the key, except
// that a Message-ID in the relay's namespace (CheckReservedMessageID) is
// accepted only when claim, the request's Idempotency-Key, derives it, and
// claim is then the job's key, the same job a send with that key makes.
// Otherwise claim is not used. A reserved Message-ID without its key is a
// CodeReservedMessageID *Error with field message_id. It derives
// Message-IDs with the default scheme: NewIDScheme(domain,
// nil).PrepareRawClaim.
func PrepareRawClaim(raw []byte, claim, channel, domain string) (Prepared, error) {
	return NewIDScheme(domain, nil).PrepareRawClaim(raw, claim, channel)
}

// PrepareRawClaim is the package's PrepareRawClaim with the Message-IDs
// of s: claim derives a reserved Message-ID when s.MessageID(claim) is it.
func (s IDScheme) PrepareRawClaim(raw []byte, claim, channel string) (Prepared, error) {
	if claim != "" {
		if err := validKey("Idempotency-Key", claim); err != nil {
			return Prepared{}, err
		}
	}
	return s.prepareRaw(raw, "", claim, channel)
}

// prepareRaw is PrepareRaw with PrepareRawClaim's claim (used only when
// key is empty).
func (s IDScheme) prepareRaw(raw []byte, key, claim, channel string) (Prepared, error) {
	if err := checkDomain(s.domain); err != nil {
		return Prepared{}, err
	}
	channel, err := checkChannel(channel)
	if err != nil {
		return Prepared{}, err
	}
	if key != "" {
		if err := validKey("key", key); err != nil {
			return Prepared{}, err
		}
	}
	norm, once, err := readRawHeader(raw)
	if err != nil {
		return Prepared{}, err
	}
	p, err := rawAddresses(once)
	if err != nil {
		return Prepared{}, err
	}
	p.Key, p.Channel = key, channel
	if p.Raw, err = s.tieMessageID(&p, once[hMessageID], norm, claim); err != nil {
		return Prepared{}, err
	}
	// The fingerprint is of the message as the caller wrote it (with the
	// Message-ID a key adds): the job header below depends on nothing
	// else, and a retry of a job logged before it existed still matches.
	sum := sha256.Sum256(p.Raw)
	p.Fingerprint = hex.EncodeToString(sum[:])
	if err := checkJobHeader(once[hJob], p.MessageID); err != nil {
		return Prepared{}, err
	}
	return p, nil
}

// checkJobHeader refuses a raw message whose JobHeader names another
// job than messageID's: a copy matched by that header would resolve the
// wrong job. A message without one gets it when it is sent (withJobHeader).
func checkJobHeader(field onceField, messageID string) error {
	if !field.present {
		return nil
	}
	if got, want := strings.TrimSpace(string(field.value)), JobHash(messageID); got != want {
		return Invalid("raw", "raw's %s names job %q, but this message's job is %q", JobHeader, clipValue(got), want)
	}
	return nil
}

// withJobHeader returns the message to hand Gmail for job messageID: raw
// as it is when its header section has a JobHeader (every message the
// relay builds, and a raw one that named its job), else raw with the job's
// header added first — a copy made for the call, the log keeps raw as the
// caller wrote it. A message too large to take the header goes without
// it (found by its Message-ID only).
func withJobHeader(raw []byte, messageID string) []byte {
	fields, _, err := scanHeader(raw)
	if err != nil {
		return raw // checked at intake; a message it cannot read is sent as it is
	}
	for _, f := range fields {
		if sameHeaderName(f.name, JobHeader) {
			return raw
		}
	}
	line := JobHeader + ": " + JobHash(messageID) + "\r\n"
	if len(line)+len(raw) > MaxMessageBytes {
		return raw
	}
	out := make([]byte, 0, len(line)+len(raw))
	return append(append(out, line...), raw...)
}

// clipValue bounds a header value quoted in an error.
func clipValue(v string) string {
	if len(v) > 80 {
		return v[:80] + "…"
	}
	return v
}

// readRawHeader checks raw's size, line endings and header section and
// returns raw with CRLF line endings and the fields of onceHeaders.
func readRawHeader(raw []byte) ([]byte, [len(onceHeaders)]onceField, error) {
	var once [len(onceHeaders)]onceField
	if len(raw) > MaxMessageBytes {
		return nil, once, tooLarge(len(raw))
	}
	if _, ok := headerSectionLen(raw, MaxHeaderBytes); !ok {
		return nil, once, errHeaderTooLarge()
	}
	norm, err := normalizeLineEndings(raw)
	if err != nil {
		return nil, once, err
	}
	fields, _, err := scanHeader(norm)
	if err != nil {
		return nil, once, Invalid("raw", "raw is not an RFC 5322 message: %v", err)
	}
	if err := checkHeaderNames(fields); err != nil {
		return nil, once, err
	}
	if err := checkRawHeaderValues(fields); err != nil {
		return nil, once, err
	}
	once, err = onceHeaderValues(fields)
	return norm, once, err
}

// rawAddresses checks the address headers of a raw message and returns a
// Prepared with its From and its recipient counts. The addr-specs of To,
// Cc and Bcc are counted before any list is parsed, so that a list of
// millions of addresses is refused without parsing it (net/mail takes
// hundreds of bytes of memory an address).
func rawAddresses(once [len(onceHeaders)]onceField) (Prepared, error) {
	if n := countAddrSpecs(once[hTo].value) + countAddrSpecs(once[hCc].value) + countAddrSpecs(once[hBcc].value); n > MaxRecipients {
		return Prepared{}, errTooManyRawRecipients(n)
	}
	p := Prepared{recipientsField: "raw"}
	recipients := 0
	for _, i := range []int{hTo, hCc, hBcc, hReplyTo, hFrom, hSender} {
		if !once[i].present {
			continue
		}
		n, first, err := countAddresses(onceHeaders[i], once[i].value)
		if err != nil {
			return Prepared{}, err
		}
		switch i {
		case hFrom, hSender:
			if n != 1 {
				return Prepared{}, Invalid("raw", "raw %s header must hold exactly one address", onceHeaders[i])
			}
			if i == hFrom {
				p.From = strings.ToLower(first)
			}
		case hTo, hCc, hBcc:
			recipients += n
			p.Recipients[i-hTo] = n // hTo, hCc, hBcc are consecutive
		}
	}
	if recipients == 0 {
		return Prepared{}, Invalid("raw", "raw has no recipients (To, Cc or Bcc)")
	}
	if recipients > MaxRecipients {
		return Prepared{}, errTooManyRawRecipients(recipients)
	}
	return p, nil
}

// tieMessageID sets p.MessageID and, for a message sent without a key,
// p.Key, from the message's Message-ID field (see PrepareRaw and
// PrepareRawClaim), and returns the message to send: norm, or norm with
// the key's Message-ID added as its first header when it has none.
func (s IDScheme) tieMessageID(p *Prepared, field onceField, norm []byte, claim string) ([]byte, error) {
	if !field.present {
		if p.Key == "" {
			return nil, Invalid("raw", "raw has no Message-ID and no key was given")
		}
		p.MessageID = s.MessageID(p.Key)
		withID := append([]byte("Message-ID: "+p.MessageID+"\r\n"), norm...)
		if len(withID) > MaxMessageBytes {
			return nil, tooLarge(len(withID))
		}
		return withID, nil
	}
	value := string(field.value)
	if err := CheckMessageIDShape(strings.TrimSpace(value)); err != nil {
		return nil, err
	}
	id, err := NormalizeMessageID(value)
	if err != nil {
		return nil, Invalid("raw", "raw Message-ID header: %s", errMessage(err))
	}
	switch {
	case p.Key != "":
		if err := s.CheckReserved(id, p.Key); err != nil {
			return nil, err
		}
		if want := s.MessageID(p.Key); !equalFoldASCII(id, want) {
			return nil, Invalid("raw", "Message-ID mismatch: raw carries %s but the key gives %s", id, want)
		}
	case reservedShape(id, s.domain):
		if err := s.CheckReserved(id, claim); err != nil {
			return nil, err
		}
		p.Key = claim
	default:
		p.Key = id
	}
	p.MessageID = id
	return norm, nil
}

// normalizeLineEndings turns bare LF into CRLF and refuses NUL anywhere and
// a bare CR in the header section, where readers disagree about it.
// A message whose line endings are all CRLF already (the usual case) is
// returned as it is, not copied: PrepareRaw's Prepared.Raw then shares
// raw's bytes, so that a request holds one copy of its message (up to
// MaxMessageBytes), not two.
func normalizeLineEndings(raw []byte) ([]byte, error) {
	if bytes.IndexByte(raw, 0) >= 0 {
		return nil, Invalid("raw", "raw contains a NUL byte")
	}
	if bytes.Count(raw, []byte("\n")) != bytes.Count(raw, []byte("\r\n")) {
		return rewriteLineEndings(raw)
	}
	header := raw // up to the first empty line, or all of raw
	if bytes.HasPrefix(raw, []byte("\r\n")) {
		header = nil
	} else if i := bytes.Index(raw, []byte("\r\n\r\n")); i >= 0 {
		header = raw[:i+2]
	}
	for i, c := range header {
		if c == '\r' && (i+1 == len(raw) || raw[i+1] != '\n') {
			return nil, errBareCR()
		}
	}
	return raw, nil
}

func errBareCR() error { return Invalid("raw", "raw has a bare CR in its header section") }

func errHeaderTooLarge() error {
	return Invalid("raw", "raw's header section is more than %d bytes (1 MiB), more than the relay accepts", MaxHeaderBytes)
}

func errTooManyRawRecipients(n int) error {
	return Invalid("raw", "raw has %d recipients in To, Cc and Bcc; at most %d are accepted", n, MaxRecipients)
}

// headerSectionLen returns the length of raw's header section: everything
// before its first empty line (nothing, or a lone CR, before an LF: where
// scanHeader stops), or all of raw when there is none. ok is false, and
// n meaningless, when that is more than limit bytes; it reads at most
// limit+2 bytes of raw.
func headerSectionLen(raw []byte, limit int) (n int, ok bool) {
	window := raw[:min(len(raw), limit+2)] // enough to see an empty line that starts at limit
	for p := 0; p <= limit; {
		if p == len(raw) {
			return p, true
		}
		i := bytes.IndexByte(window[p:], '\n')
		if i < 0 {
			return len(raw), len(raw) <= limit // the rest is one line
		}
		if i == 0 || i == 1 && window[p] == '\r' {
			return p, true
		}
		p += i + 1
	}
	return 0, false
}

// rewriteLineEndings is normalizeLineEndings for a raw (free of NUL) with
// a bare LF: a copy with CRLF line endings.
func rewriteLineEndings(raw []byte) ([]byte, error) {
	out := make([]byte, 0, len(raw)+bytes.Count(raw, []byte("\n"))-bytes.Count(raw, []byte("\r\n")))
	inHeader := true
	lineStart := 0 // index in out of the current line's first byte
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		switch {
		case c == '\n':
			if i == 0 || raw[i-1] != '\r' {
				out = append(out, '\r')
			}
			out = append(out, '\n')
			if inHeader && len(out)-lineStart == 2 {
				inHeader = false
			}
			lineStart = len(out)
		case c == '\r' && (i+1 == len(raw) || raw[i+1] != '\n'):
			if inHeader {
				return nil, errBareCR()
			}
			out = append(out, c)
		default:
			out = append(out, c)
		}
	}
	return out, nil
}

// checkHeaderNames refuses a header whose name is not RFC 5322 ftext,
// above all the obsolete "Name :" (§4.5.1): it is read as a header other
// than "Name", so a second Message-ID or To would pass the one-of-each
// checks and reach Gmail, which may read it as the real one. Of several
// such names it names the first in net/mail's Header key order (byte
// order: a name that is not a token is its own key), as it did when it
// sorted the keys, whatever their order in the message.
//
// A line that starts with a colon is refused first: net/mail drops it, so
// no check here would see its value, which could carry U+2028 and a header
// for software that breaks lines there.
func checkHeaderNames(fields []headerField) error {
	var worst []byte
	for _, f := range fields {
		if len(f.name) == 0 {
			return Invalid("raw", "raw has a header line that starts with a colon (no header name)")
		}
		if badNameByte(f.name) >= 0 && (worst == nil || headerNameLess(f.name, worst)) {
			worst = f.name
		}
	}
	if worst == nil {
		return nil
	}
	name, c := string(worst), worst[badNameByte(worst)]
	if c == ' ' || c == '\t' {
		return Invalid("raw", "raw header %q has whitespace before its colon (obsolete RFC 5322 syntax); write %q", name, strings.TrimRight(name, " \t")+":")
	}
	return Invalid("raw", "raw header name %q holds the byte %#02x, which is not allowed in a header name", name, c)
}

// badNameByte is the index of name's first byte outside RFC 5322 ftext,
// or -1.
func badNameByte(name []byte) int {
	for i, c := range name {
		if c < 33 || c > 126 || c == ':' {
			return i
		}
	}
	return -1
}

// ReadMessageID returns the normalised Message-ID header of a raw message,
// or "" when it has none. A header section over MaxHeaderBytes, an
// unparseable message, a repeated Message-ID or a malformed one is a
// CodeInvalid *Error with field raw.
func ReadMessageID(raw []byte) (string, error) {
	if _, ok := headerSectionLen(raw, MaxHeaderBytes); !ok {
		return "", errHeaderTooLarge()
	}
	fields, _, err := scanHeader(raw)
	if err != nil {
		return "", Invalid("raw", "raw is not an RFC 5322 message: %v", err)
	}
	if err := checkHeaderNames(fields); err != nil {
		return "", err
	}
	var values []string
	for _, f := range fields {
		if sameHeaderName(f.name, "Message-Id") {
			values = append(values, string(f.value))
		}
	}
	switch len(values) {
	case 0:
		return "", nil
	case 1:
	default:
		return "", Invalid("raw", "raw has %d Message-ID headers", len(values))
	}
	if err := CheckMessageIDShape(strings.TrimSpace(values[0])); err != nil {
		return "", err
	}
	id, err := NormalizeMessageID(values[0])
	if err != nil {
		return "", Invalid("raw", "raw Message-ID header: %s", errMessage(err))
	}
	return id, nil
}

// countAddresses checks a raw address header's value, named name, and
// returns how many addresses it holds and the first one's addr-spec.
func countAddresses(name string, v []byte) (int, string, error) {
	addrs, err := parseAddresses("raw", []string{string(v)})
	if err != nil {
		return 0, "", Invalid("raw", "raw %s header: %s", name, errMessage(err))
	}
	if len(addrs) == 0 {
		return 0, "", nil
	}
	return len(addrs), addrs[0].Address, nil
}

// bareAddress is a's address, lower-case ("" for nil): what picks a
// mailbox by From.
func bareAddress(a *mail.Address) string {
	if a == nil {
		return ""
	}
	return strings.ToLower(a.Address)
}
