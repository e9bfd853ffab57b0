package relay

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"unicode/utf8"

	"github.com/gmailrelay/gmailrelay/internal/rfc5322"
)

// maxMessageIDLen bounds a Message-ID so that its header line stays well
// inside RFC 5322's 998-character line limit.
const maxMessageIDLen = 900

// maxKeyLen bounds a job key; keys are hashed, but they are also stored in the
// log and shown to people.
const maxKeyLen = 1024

// MessageID derives the deterministic Message-ID of a job key under the
// default scheme (no Message-ID secret):
// "<job-" + the first 32 hex digits of sha256(key) + "@" + domain + ">".
// It is the same computation as the n8n Code node recipe, so both sides can
// compute it. MessageID does not validate its inputs: check the domain once
// with ValidDomain and the key with JobKey or Prepare. A relay configured
// with a secret derives its Message-IDs through its IDScheme instead.
func MessageID(key, domain string) string {
	return NewIDScheme(domain, nil).MessageID(key)
}

// IDScheme is how a relay derives a job's Message-ID from its key: the
// Message-ID domain and, when the relay has one, the Message-ID secret.
// Without a secret the local part is "job-" + the first 32 hex digits of
// sha256(key), which anyone who knows (or guesses) a key can compute;
// with one it is "job-" + the first 32 hex digits of
// HMAC-SHA256(secret, key), which only holders of the secret can. The
// zero IDScheme has an empty domain, which Prepare refuses.
type IDScheme struct {
	domain string
	secret []byte
}

// NewIDScheme returns the scheme of domain and secret (nil or empty: the
// default, unkeyed scheme). The secret is kept, not copied: the caller
// must not change it afterwards. Neither is validated here: Prepare
// refuses a bad domain as the relay's own misconfiguration.
func NewIDScheme(domain string, secret []byte) IDScheme {
	if len(secret) == 0 {
		secret = nil
	}
	return IDScheme{domain: domain, secret: secret}
}

// Domain is the right side of the Message-IDs the scheme derives.
func (s IDScheme) Domain() string { return s.domain }

// Keyed reports whether the scheme has a Message-ID secret (HMAC-SHA256).
func (s IDScheme) Keyed() bool { return s.secret != nil }

// Name names the derivation for people and API answers: "sha256" or
// "hmac-sha256". It never shows the secret.
func (s IDScheme) Name() string {
	if s.Keyed() {
		return "hmac-sha256"
	}
	return "sha256"
}

// String names the scheme without its secret, so that printing one (a
// %v in a log line) cannot leak it.
func (s IDScheme) String() string { return s.Name() + " @" + s.domain }

// GoString is String, for %#v.
func (s IDScheme) GoString() string { return s.String() }

// MessageID derives key's Message-ID: "<job-" + 32 hex digits + "@" +
// domain + ">", the digits from sha256(key) or, with a secret,
// HMAC-SHA256(secret, key). Like the package's MessageID it does not
// validate its inputs.
func (s IDScheme) MessageID(key string) string {
	var sum []byte
	if s.secret != nil {
		m := hmac.New(sha256.New, s.secret)
		m.Write([]byte(key))
		sum = m.Sum(make([]byte, 0, sha256.Size))
	} else {
		d := sha256.Sum256([]byte(key))
		sum = d[:]
	}
	return "<job-" + hex.EncodeToString(sum[:16]) + "@" + s.domain + ">"
}

// JobKey joins a job's source-event identity into a key,
// "customer_id:event_type:order_id". All three parts are required; a blank
// part, or one holding ':', is a CodeInvalid error naming its field
// (job.customer_id, job.event_type or job.order_id). The parts are used as given (not
// trimmed), so the key matches what the n8n recipe computes.
func JobKey(customerID, eventType, orderID string) (string, error) {
	parts := []struct{ field, value string }{
		{"job.customer_id", customerID},
		{"job.event_type", eventType},
		{"job.order_id", orderID},
	}
	for _, p := range parts {
		if strings.TrimSpace(p.value) == "" {
			return "", Invalid(p.field, "%s is required", p.field)
		}
		// ':' joins the parts: "a:b"+"c" and "a"+"b:c" would share a key.
		if strings.Contains(p.value, ":") {
			return "", Invalid(p.field, "%s must not contain ':', which separates the key's parts", p.field)
		}
	}
	key := customerID + ":" + eventType + ":" + orderID
	if err := validKey("job", key); err != nil {
		return "", err
	}
	return key, nil
}

// validKey checks a job key from any source: not blank, valid UTF-8, no
// control characters, at most maxKeyLen bytes.
func validKey(field, key string) error {
	switch {
	case strings.TrimSpace(key) == "":
		return Invalid(field, "key is empty")
	case len(key) > maxKeyLen:
		return Invalid(field, "key is longer than %d bytes", maxKeyLen)
	case !utf8.ValidString(key):
		return Invalid(field, "key is not valid UTF-8")
	}
	for _, r := range key {
		if r < 0x20 || r == 0x7f {
			return Invalid(field, "key contains a control character")
		}
	}
	return nil
}

// NormalizeMessageID checks a Message-ID and returns it in angle brackets.
// It accepts "<left@right>" or "left@right", with surrounding spaces
// trimmed. Both sides must be non-empty and made of RFC 5322 atext and dots
// (the right side may instead be a domain literal in square brackets);
// anything else — CR, LF, inner spaces, a missing or second "@", extra or
// unbalanced angle brackets, non-ASCII — is a CodeInvalid error with field
// "message_id".
func NormalizeMessageID(s string) (string, error) {
	const field = "message_id"
	if strings.ContainsAny(s, "\r\n\x00") {
		return "", Invalid(field, "Message-ID contains CR, LF or NUL")
	}
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "<") != strings.HasSuffix(s, ">") || s == "<" || s == ">" {
		return "", Invalid(field, "Message-ID has unbalanced angle brackets")
	}
	if strings.HasPrefix(s, "<") {
		s = s[1 : len(s)-1]
	}
	if s == "" {
		return "", Invalid(field, "Message-ID is empty")
	}
	if len(s)+2 > maxMessageIDLen {
		return "", Invalid(field, "Message-ID is longer than %d bytes", maxMessageIDLen)
	}
	left, right, ok := strings.Cut(s, "@")
	if !ok {
		return "", Invalid(field, "Message-ID has no @")
	}
	if left == "" || right == "" {
		return "", Invalid(field, "Message-ID has an empty part")
	}
	if !isIDText(left) {
		return "", Invalid(field, "Message-ID left part has characters outside RFC 5322 atext")
	}
	if !isIDText(right) && !isDomainLiteral(right) {
		return "", Invalid(field, "Message-ID right part has characters outside RFC 5322 atext")
	}
	return "<" + s + ">", nil
}

// isIDText reports whether s is made of atext and dots only.
func isIDText(s string) bool {
	for i := 0; i < len(s); i++ {
		if !rfc5322.IsAtext(s[i]) && s[i] != '.' {
			return false
		}
	}
	return true
}

// isDomainLiteral reports whether s is "[dtext]" (RFC 5322 no-fold-literal).
func isDomainLiteral(s string) bool {
	if len(s) < 2 || s[0] != '[' || s[len(s)-1] != ']' {
		return false
	}
	for i := 1; i < len(s)-1; i++ {
		c := s[i]
		if c < 0x21 || c > 0x7e || c == '[' || c == ']' || c == '\\' {
			return false
		}
	}
	return true
}

// ValidDomain checks that domain is a hostname usable as the right side of
// a derived Message-ID: dot-separated labels of letters, digits and hyphens,
// each 1 to 63 characters and not starting or ending with a hyphen, at most
// 253 characters in all, no trailing dot. A bad domain is a CodeInvalid
// error with field "domain".
func ValidDomain(domain string) error {
	const field = "domain"
	if domain == "" {
		return Invalid(field, "domain is empty")
	}
	if len(domain) > 253 {
		return Invalid(field, "domain is longer than 253 characters")
	}
	for rest := domain; ; {
		label, after, more := strings.Cut(rest, ".")
		rest = after
		if label == "" {
			return Invalid(field, "domain %q has an empty label", domain)
		}
		if len(label) > 63 {
			return Invalid(field, "domain %q has a label longer than 63 characters", domain)
		}
		if label[0] == '-' || label[len(label)-1] == '-' {
			return Invalid(field, "domain %q has a label starting or ending with a hyphen", domain)
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-') {
				return Invalid(field, "domain %q has a character that is not a letter, digit or hyphen", domain)
			}
		}
		if !more {
			return nil
		}
	}
}
