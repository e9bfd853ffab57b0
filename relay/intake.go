package relay

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/mail"
	"regexp"
	"strings"
	"time"
)

// MaxMessageBytes is the largest raw message the relay accepts: Gmail's
// 35 MB upload ceiling. Larger messages are a CodeTooLarge error.
const MaxMessageBytes = 35 << 20

// DefaultChannel is the channel of a request that names none.
const DefaultChannel = "default"

// AddressList is a list of address lists as a send request carries it:
// each string may itself hold several comma-separated addresses. (The
// HTTP shapes that decode into it, a string or a list of strings, are the
// api package's.)
type AddressList []string

// JobRef is a job's source-event identity; its key is
// customer_id:event_type:order_id (see JobKey).
type JobRef struct {
	CustomerID string
	EventType  string
	OrderID    string
}

// SendRequest is what a caller asks to send: a job key (Key, Job, or the
// Idempotency-Key header, which Prepare takes separately) and either the
// parts of a message or a raw RFC 5322 message. It is a domain value: the
// api package decodes POST /v1/send's JSON body into it.
type SendRequest struct {
	Key     string
	Job     *JobRef
	Channel string
	From    string
	To      AddressList
	Cc      AddressList
	Bcc     AddressList
	ReplyTo AddressList
	Subject string
	Text    string
	HTML    string
	// Body is an alias of Text (the field name n8n recipes use).
	Body     string
	Headers  map[string]string
	ThreadID string
	// Raw is a base64url RFC 5322 message, padded or not; standard base64
	// is accepted too, and whitespace is ignored.
	Raw string
	// SendAt (RFC 3339) asks for delivery not before then: the job is
	// queued until it is due. Not part of the fingerprint.
	SendAt string
	// WhenBusy is what a send does when the mailbox's budget is spent:
	// "queue" (the default: 202 queued) or "reject" (429 + Retry-After).
	WhenBusy string
	// Mailbox names the mailbox to send as (the policy's mailboxes); ""
	// picks it by the From address. Not part of the fingerprint (From is).
	Mailbox string
}

// fieldName bounds a client-chosen name before it is echoed as an error's
// field.
func fieldName(name string) string {
	if len(name) > 64 {
		return name[:64]
	}
	return name
}

// Prepared is a validated job ready for the log and Gmail.
type Prepared struct {
	Key       string // the job key; for a raw message sent without one, its Message-ID
	MessageID string // normalised, in angle brackets
	Channel   string
	ThreadID  string
	// Raw is the RFC 5322 message to send, carrying MessageID, with CRLF
	// line endings.
	Raw []byte
	// Fingerprint is the hex sha256 of the normalised request: the same
	// content gives the same fingerprint whatever the Date, the key's source
	// (key, job or Idempotency-Key), the address formatting or the JSON
	// field order. A different fingerprint under the same key is a 422.
	Fingerprint string
	// SendAt is the caller's "not before" (zero: at once); set by the
	// caller of Prepare from SendRequest.Schedule.
	SendAt time.Time
	// From is the message's From address, bare and lower-case ("" when
	// the message has none: Gmail fills in the mailbox's own).
	From string
	// Mailbox is the mailbox the caller named (SendRequest.Mailbox), ""
	// for none; Service.Send picks the mailbox from it or from From.
	Mailbox string
}

// Prepare validates a send request and builds the message it asks for.
//
// The key comes from req.Key, then req.Job, then headerKey (the
// Idempotency-Key header); two of them given and different is an error
// (field key, job or Idempotency-Key), and none is an error (field key)
// unless req.Raw carries a Message-ID, which is then the key. The channel
// defaults to DefaultChannel. req.Raw together with any message part is an
// error (field raw); req.Raw alone is handled as PrepareRaw does. req.Body is
// an alias of req.Text; both given and different is an error (field body).
// domain is the relay's Message-ID domain; an invalid one is a CodeInternal
// error (configuration, not input). now becomes the Date header.
//
// Every input error is a CodeInvalid *Error naming the field; a message
// over MaxMessageBytes is CodeTooLarge.
func Prepare(req SendRequest, headerKey, domain string, now time.Time) (Prepared, error) {
	if err := checkDomain(domain); err != nil {
		return Prepared{}, err
	}
	channel, err := checkChannel(req.Channel)
	if err != nil {
		return Prepared{}, err
	}
	threadID, err := checkThreadID(req.ThreadID)
	if err != nil {
		return Prepared{}, err
	}
	key, err := resolveKey(req, headerKey)
	if err != nil {
		return Prepared{}, err
	}
	if req.Raw != "" {
		if part := structuredPart(req); part != "" {
			return Prepared{}, Invalid("raw", "raw cannot be combined with %s: send the whole message in raw", part)
		}
		raw, err := DecodeRaw(req.Raw)
		if err != nil {
			return Prepared{}, err
		}
		p, err := PrepareRaw(raw, key, channel, domain)
		if err != nil {
			return Prepared{}, err
		}
		p.ThreadID, p.Mailbox = threadID, req.Mailbox
		return p, nil
	}
	if key == "" {
		return Prepared{}, Invalid("key", "no key: give key, job or an Idempotency-Key header")
	}
	text := req.Text
	if req.Body != "" {
		if text != "" && text != req.Body {
			return Prepared{}, Invalid("body", "body is an alias of text, and the two differ")
		}
		text = req.Body
	}
	m := Message{
		From: req.From, To: req.To, Cc: req.Cc, Bcc: req.Bcc, ReplyTo: req.ReplyTo,
		Subject: req.Subject, Text: text, HTML: req.HTML, Headers: req.Headers,
	}
	id := MessageID(key, domain)
	raw, v, err := buildMIME(m, id, now)
	if err != nil {
		return Prepared{}, err
	}
	if len(raw) > MaxMessageBytes {
		return Prepared{}, tooLarge(len(raw))
	}
	return Prepared{
		Key:         key,
		MessageID:   id,
		Channel:     channel,
		ThreadID:    threadID,
		Raw:         raw,
		Fingerprint: structuredFingerprint(v, channel, threadID),
		From:        bareAddress(v.from),
		Mailbox:     req.Mailbox,
	}, nil
}

// resolveKey picks the job key from its three sources; "" when none is
// given.
func resolveKey(req SendRequest, headerKey string) (string, error) {
	type source struct{ field, key string }
	var sources []source
	if req.Key != "" {
		if err := validKey("key", req.Key); err != nil {
			return "", err
		}
		sources = append(sources, source{"key", req.Key})
	}
	if req.Job != nil {
		k, err := JobKey(req.Job.CustomerID, req.Job.EventType, req.Job.OrderID)
		if err != nil {
			return "", err
		}
		sources = append(sources, source{"job", k})
	}
	if headerKey != "" {
		if err := validKey("Idempotency-Key", headerKey); err != nil {
			return "", err
		}
		sources = append(sources, source{"Idempotency-Key", headerKey})
	}
	if len(sources) == 0 {
		return "", nil
	}
	for _, s := range sources[1:] {
		if s.key != sources[0].key {
			return "", Invalid(s.field, "%s gives key %q but %s gives %q", s.field, s.key, sources[0].field, sources[0].key)
		}
	}
	return sources[0].key, nil
}

// structuredPart names the first message part set in req, or "".
func structuredPart(req SendRequest) string {
	switch {
	case req.From != "":
		return "from"
	case len(req.To) > 0:
		return "to"
	case len(req.Cc) > 0:
		return "cc"
	case len(req.Bcc) > 0:
		return "bcc"
	case len(req.ReplyTo) > 0:
		return "reply_to"
	case req.Subject != "":
		return "subject"
	case req.Text != "":
		return "text"
	case req.HTML != "":
		return "html"
	case req.Body != "":
		return "body"
	case len(req.Headers) > 0:
		return "headers"
	}
	return ""
}

// DecodeRaw decodes a base64 raw message as Gmail's "raw" field carries it:
// base64url or standard, padded or not, line-wrapped or not. Errors are
// *Error: CodeInvalid on field "raw", or CodeTooLarge.
func DecodeRaw(s string) ([]byte, error) {
	if len(s) > MaxMessageBytes/3*4+MaxMessageBytes/38 {
		return nil, tooLarge(len(s) / 4 * 3)
	}
	s = strings.Map(func(r rune) rune {
		if r == ' ' || r == '\t' || r == '\r' || r == '\n' {
			return -1
		}
		return r
	}, s)
	s = strings.TrimRight(s, "=")
	enc := base64.RawURLEncoding
	if strings.ContainsAny(s, "+/") {
		enc = base64.RawStdEncoding
	}
	raw, err := enc.DecodeString(s)
	if err != nil {
		return nil, Invalid("raw", "raw is not base64url: %v", err)
	}
	return raw, nil
}

// channelName is what a channel name may look like.
var channelName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// checkChannel returns the channel, DefaultChannel when empty.
func checkChannel(channel string) (string, error) {
	if channel == "" {
		return DefaultChannel, nil
	}
	if !channelName.MatchString(channel) {
		return "", Invalid("channel", "channel %q is not a valid name (letters, digits, _ . -; at most 64)", fieldName(channel))
	}
	return channel, nil
}

// threadIDPattern is what a Gmail thread id may look like.
var threadIDPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)

func checkThreadID(id string) (string, error) {
	if id != "" && !threadIDPattern.MatchString(id) {
		return "", Invalid("thread_id", "thread_id %q is not a valid Gmail thread id", fieldName(id))
	}
	return id, nil
}

// checkDomain reports a bad Message-ID domain as the relay's own
// configuration error, not the caller's.
func checkDomain(domain string) error {
	if err := ValidDomain(domain); err != nil {
		return &Error{Code: CodeInternal, Message: "the relay's Message-ID domain is misconfigured", Err: err}
	}
	return nil
}

func tooLarge(n int) *Error {
	return &Error{Code: CodeTooLarge, Field: "raw", Message: fmt.Sprintf("message is about %d bytes, more than Gmail accepts (%d)", n, MaxMessageBytes)}
}

// errMessage is the client-safe message of err.
func errMessage(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Message
	}
	return err.Error()
}

// structuredFingerprint hashes the validated content of a structured
// request in a canonical JSON form.
func structuredFingerprint(v validated, channel, threadID string) string {
	formatAll := func(addrs []*mail.Address) []string {
		out := make([]string, len(addrs))
		for i, a := range addrs {
			out[i] = formatAddress(a)
		}
		return out
	}
	canon := struct {
		Kind     string      `json:"kind"`
		Channel  string      `json:"channel"`
		ThreadID string      `json:"thread_id"`
		From     []string    `json:"from"`
		To       []string    `json:"to"`
		Cc       []string    `json:"cc"`
		Bcc      []string    `json:"bcc"`
		ReplyTo  []string    `json:"reply_to"`
		Subject  string      `json:"subject"`
		Text     string      `json:"text"`
		HTML     string      `json:"html"`
		Headers  [][2]string `json:"headers"`
	}{
		Kind: "structured", Channel: channel, ThreadID: threadID,
		From: formatAll(nonNil(v.from)), To: formatAll(v.to), Cc: formatAll(v.cc),
		Bcc: formatAll(v.bcc), ReplyTo: formatAll(v.replyTo),
		Subject: v.subject, Text: v.text, HTML: v.html,
	}
	for _, name := range v.headerNames {
		canon.Headers = append(canon.Headers, [2]string{name, v.headers[name]})
	}
	data, err := json.Marshal(canon)
	if err != nil {
		panic("relay: marshal fingerprint: " + err.Error()) // strings and slices always marshal
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

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
// Refused with a CodeInvalid *Error, field raw: an unparseable message
// (as net/mail.ReadMessage reads it), NUL bytes, a bare CR in the header
// section, a repeated Message-ID/From/Sender/To/Cc/Bcc/Reply-To/Subject/
// Date header, malformed addresses, no recipient (To, Cc or Bcc), a header
// name with whitespace before its colon (obsolete "Name :" syntax) or other
// bytes outside RFC 5322 ftext, a header line that starts with a colon, a
// control or line-breaking character in a header value
// (checkRawHeaderValues), a malformed Message-ID, a Message-ID that is not
// the key's ("Message-ID mismatch"), and no Message-ID with no key. A
// Message-ID that fails CheckMessageIDShape is refused with field
// message_id. Prepared.Raw may share raw's bytes: the caller must not
// change raw afterwards. A key or channel that is not valid is an error naming that
// field. Over MaxMessageBytes is CodeTooLarge. A bad domain is a
// CodeInternal error.
func PrepareRaw(raw []byte, key, channel, domain string) (Prepared, error) {
	if err := checkDomain(domain); err != nil {
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
	if len(raw) > MaxMessageBytes {
		return Prepared{}, tooLarge(len(raw))
	}
	norm, err := normalizeLineEndings(raw)
	if err != nil {
		return Prepared{}, err
	}
	var buf [32]headerField // enough for most messages: no allocation
	fields, _, err := scanHeader(norm, buf[:0])
	if err != nil {
		return Prepared{}, Invalid("raw", "raw is not an RFC 5322 message: %v", err)
	}
	if err := checkHeaderNames(fields); err != nil {
		return Prepared{}, err
	}
	if err := checkRawHeaderValues(fields); err != nil {
		return Prepared{}, err
	}
	once, err := onceHeaderValues(fields)
	if err != nil {
		return Prepared{}, err
	}
	recipients, from := 0, ""
	for _, i := range [...]int{hTo, hCc, hBcc, hReplyTo, hFrom} {
		if !once[i].present {
			continue
		}
		n, first, err := countAddresses(onceHeaders[i], once[i].value)
		if err != nil {
			return Prepared{}, err
		}
		if i == hFrom {
			if n != 1 {
				return Prepared{}, Invalid("raw", "raw From header must hold exactly one address")
			}
			from = strings.ToLower(string(first))
		}
		if i != hReplyTo && i != hFrom {
			recipients += n
		}
	}
	if recipients == 0 {
		return Prepared{}, Invalid("raw", "raw has no recipients (To, Cc or Bcc)")
	}
	p := Prepared{Key: key, Channel: channel, From: from}
	if once[hMessageID].present {
		value := string(once[hMessageID].value)
		if err := CheckMessageIDShape(strings.TrimSpace(value)); err != nil {
			return Prepared{}, err
		}
		id, err := NormalizeMessageID(value)
		if err != nil {
			return Prepared{}, Invalid("raw", "raw Message-ID header: %s", errMessage(err))
		}
		if key == "" {
			p.Key = id
		} else if want := MessageID(key, domain); id != want {
			return Prepared{}, Invalid("raw", "Message-ID mismatch: raw carries %s but the key gives %s", id, want)
		}
		p.MessageID = id
	} else {
		if key == "" {
			return Prepared{}, Invalid("raw", "raw has no Message-ID and no key was given")
		}
		p.MessageID = MessageID(key, domain)
		injected := make([]byte, 0, len(norm)+len(p.MessageID)+14)
		injected = append(injected, "Message-ID: "+p.MessageID+"\r\n"...)
		norm = append(injected, norm...)
		if len(norm) > MaxMessageBytes {
			return Prepared{}, tooLarge(len(norm))
		}
	}
	p.Raw = norm
	sum := sha256.Sum256(norm)
	var fp [2 * sha256.Size]byte // one allocation (the string), not two
	hex.Encode(fp[:], sum[:])
	p.Fingerprint = string(fp[:])
	return p, nil
}

// normalizeLineEndings turns bare LF into CRLF and refuses NUL anywhere and
// a bare CR in the header section, where readers disagree about it.
// A message whose line endings are all CRLF already (the usual case) is
// returned as it is, not copied: PrepareRaw's Prepared.Raw then shares
// raw's bytes.
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
// or "" when it has none. An unparseable message, a repeated Message-ID or
// a malformed one is a CodeInvalid *Error with field raw.
func ReadMessageID(raw []byte) (string, error) {
	var buf [32]headerField
	fields, _, err := scanHeader(raw, buf[:0])
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
// returns how many addresses it holds and the first one's addr-spec:
// simpleAddressList when it can read the value, net/mail (parseAddresses)
// when it cannot.
func countAddresses(name string, v []byte) (int, []byte, error) {
	if n, first, ok := simpleAddressList(v); ok {
		return n, first, nil
	}
	addrs, err := parseAddresses("raw", []string{string(v)})
	if err != nil {
		return 0, nil, Invalid("raw", "raw %s header: %s", name, errMessage(err))
	}
	if len(addrs) == 0 {
		return 0, nil, nil
	}
	return len(addrs), []byte(addrs[0].Address), nil
}

// bareAddress is a's address, lower-case ("" for nil): what picks a
// mailbox by From.
func bareAddress(a *mail.Address) string {
	if a == nil {
		return ""
	}
	return strings.ToLower(a.Address)
}
