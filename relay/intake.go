package relay

import (
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

	"github.com/gmailrelay/gmailrelay/policy"
)

// MaxMessageBytes is the largest raw message the relay accepts: Gmail's
// 35 MB upload ceiling. Larger messages are a CodeTooLarge error.
const MaxMessageBytes = 35 << 20

// MaxHeaderBytes bounds a raw message's header section (everything before
// the blank line that ends it, line endings included, as sent). Reading a
// header keeps a record of every field, so without a bound a message of
// millions of one-byte header lines cost dozens of times its size. 1 MiB
// is generous: Postfix's header_size_limit is 100 KiB, and that is for
// one header. A larger header section is a CodeInvalid error (field raw).
const MaxHeaderBytes = 1 << 20

// MaxRecipients bounds the addresses of To, Cc and Bcc together, on every
// path, before the mailbox is known: it bounds the memory a request costs
// and is the most a mailbox's max_recipients may allow. More is a
// CodeInvalid error naming the field.
const MaxRecipients = policy.MaxRecipientsCeiling

// DefaultMaxRecipients is the recipients a message a mailbox takes when
// its policy sets no max_recipients: Workspace's limit for messages sent
// through the Gmail API ("Gmail sending limits in Google Workspace",
// support.google.com/a/answer/166852). Service.Send holds every new job
// to its mailbox's limit (checkLimits).
const DefaultMaxRecipients = policy.DefaultMaxRecipients

// DefaultChannel is the channel of a request that names none.
const DefaultChannel = "default"

// AddressList is a list of address lists as a send request carries it:
// each string may itself hold several comma-separated addresses. Its JSON
// shapes are a string or a list of strings (UnmarshalJSON).
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
	// Recipients counts the addresses in To, Cc and Bcc, in that order:
	// Service.Send holds them to the mailbox's max_recipients.
	Recipients [3]int
	// recipientsField is the field a refusal of Recipients names: "" for
	// the to, cc and bcc fields themselves, "raw" for a raw message.
	recipientsField string
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
//
// Prepare derives Message-IDs with the default scheme (no secret): it is
// NewIDScheme(domain, nil).Prepare. A relay derives them with its own
// IDScheme.
func Prepare(req SendRequest, headerKey, domain string, now time.Time) (Prepared, error) {
	return NewIDScheme(domain, nil).Prepare(req, headerKey, now)
}

// Prepare is the package's Prepare with the Message-IDs of s: a key's
// Message-ID is s.MessageID(key), and a raw message is checked as
// s.PrepareRaw checks it.
func (s IDScheme) Prepare(req SendRequest, headerKey string, now time.Time) (Prepared, error) {
	if err := checkDomain(s.domain); err != nil {
		return Prepared{}, err
	}
	channel, err := checkChannel(req.Channel)
	if err != nil {
		return Prepared{}, err
	}
	if err := CheckThreadID("thread_id", req.ThreadID); err != nil {
		return Prepared{}, err
	}
	threadID := req.ThreadID
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
		p, err := s.PrepareRaw(raw, key, channel)
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
	id := s.MessageID(key)
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
		Recipients:  [3]int{len(v.to), len(v.cc), len(v.bcc)},
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

// maxThreadIDLen bounds a Gmail thread id; Gmail's are 16 hex digits.
const maxThreadIDLen = 128

// CheckThreadID refuses a thread id that is not "" (none) and not the shape
// of a Gmail thread id, [A-Za-z0-9_-]{1,128}: a CodeInvalid *Error naming
// field (thread_id on /v1/send, threadId on the Gmail-compatible path).
// Service.Send checks Prepared.ThreadID again, so a caller that sets it
// without this check cannot get a bad one into the log.
func CheckThreadID(field, id string) error {
	if len(id) > maxThreadIDLen {
		return Invalid(field, "%s is %d bytes, more than a Gmail thread id's %d", field, len(id), maxThreadIDLen)
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return Invalid(field, "%s %q is not a valid Gmail thread id (letters, digits, _ and -)", field, fieldName(id))
		}
	}
	return nil
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
