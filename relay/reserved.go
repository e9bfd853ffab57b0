package relay

import "strings"

// reservedPrefix starts the local part of every Message-ID the relay
// derives from a key.
const reservedPrefix = "job-"

// CheckReservedMessageID guards the relay's own Message-ID namespace: the
// ids MessageID derives, "<job-…@domain>". A caller's Message-ID (raw MIME,
// the Gmail-compatible path) whose local part starts with "job-" and whose
// right side is domain, both ignoring ASCII case, may be used only with the
// key that derives it: MessageID(key, domain) equal to id but for ASCII
// case. Otherwise anyone who can compute a key's Message-ID (keys are often
// guessable) could claim it first, and the key's own send would be refused
// for good. Such an id without its key is a CodeReservedMessageID *Error
// with field message_id; any other id, of any shape, is nil (the shape
// checks are CheckMessageIDShape's). id may be given with or without angle
// brackets and surrounding blanks. It judges with the default scheme
// (no secret): NewIDScheme(domain, nil).CheckReserved.
func CheckReservedMessageID(id, key, domain string) error {
	return NewIDScheme(domain, nil).CheckReserved(id, key)
}

// CheckReserved is CheckReservedMessageID with the Message-IDs of s: a
// reserved id is accepted only with the key whose s.MessageID it is (with
// a secret, the HMAC of the key, so that nobody without the secret can
// name a key's Message-ID, let alone claim it).
func (s IDScheme) CheckReserved(id, key string) error {
	domain := s.domain
	if !reservedShape(id, domain) {
		return nil
	}
	bare := strings.TrimSpace(id)
	if !strings.HasPrefix(bare, "<") {
		bare = "<" + bare + ">"
	}
	if key != "" && equalFoldASCII(bare, s.MessageID(key)) {
		return nil
	}
	return &Error{Code: CodeReservedMessageID, Field: "message_id",
		Message: "Message-ID " + clip(id, 120) + " is in the relay's own namespace (<job-…@" + domain +
			">): it may only be sent with the key that derives it (Idempotency-Key)"}
}

// reservedShape reports whether id, angle brackets and surrounding blanks
// aside, is "job-…@domain" ignoring ASCII case. The right side is what
// follows the last "@", so an id with several is judged by its last.
func reservedShape(id, domain string) bool {
	s := strings.TrimSpace(id)
	s = strings.TrimPrefix(s, "<")
	s = strings.TrimSuffix(s, ">")
	at := strings.LastIndexByte(s, '@')
	if at < 0 || domain == "" {
		return false
	}
	left, right := s[:at], s[at+1:]
	return len(left) >= len(reservedPrefix) && equalFoldASCII(left[:len(reservedPrefix)], reservedPrefix) &&
		equalFoldASCII(right, domain)
}

// equalFoldASCII reports whether a and b are equal but for the case of
// ASCII letters (strings.EqualFold would also fold Unicode, e.g. the
// Kelvin sign to "k").
func equalFoldASCII(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		if lowerASCII(a[i]) != lowerASCII(b[i]) {
			return false
		}
	}
	return true
}

// clip shortens s for an error message to at most n bytes (and an
// ellipsis).
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
