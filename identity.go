package gmailrelay

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Identity is what a log's Message-IDs are derived with: the Message-ID
// domain and, when the relay has a Message-ID secret, the secret's
// fingerprint (SecretFingerprint). A job key derives a different
// Message-ID under another identity, and the front door would take it for
// a new job: so the log remembers the identity it was created with, and a
// relay configured with another one refuses to start
// (docs/design.md#the-logs-identity) until an operator changes it on
// purpose (Rekey).
type Identity struct {
	MsgIDDomain string `json:"msgid_domain"`
	// SecretFingerprint is "" when no Message-ID secret is set.
	SecretFingerprint string `json:"secret_fingerprint,omitempty"`
}

// IsZero reports whether id is the zero Identity: a log opened with it
// checks and records nothing (tests, backup, check, compact).
func (id Identity) IsZero() bool { return id == Identity{} }

// String names the identity for messages: the Message-ID domain, and the
// secret's fingerprint when there is one (never the secret itself); no
// mention of a secret means none is set.
func (id Identity) String() string {
	s := fmt.Sprintf("Message-ID domain %q", id.MsgIDDomain)
	if id.SecretFingerprint == "" {
		return s
	}
	return s + " with the Message-ID secret of fingerprint " + id.SecretFingerprint
}

// Validate refuses an identity no log can record: an empty domain, one
// with characters outside a hostname's or longer than one, or a
// fingerprint that is not 16 lower-case hex digits. (The relay checks the
// domain's shape fully, label by label, before it gets here.)
func (id Identity) Validate() error {
	d := id.MsgIDDomain
	switch {
	case d == "":
		return errors.New("identity: empty Message-ID domain")
	case len(d) > 253:
		return errors.New("identity: Message-ID domain longer than 253 characters")
	case strings.IndexFunc(d, func(r rune) bool {
		return !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '-' || r == '.')
	}) >= 0:
		return fmt.Errorf("identity: Message-ID domain %q holds a character that is not a letter, digit, hyphen or dot", d)
	}
	if f := id.SecretFingerprint; f != "" {
		if _, err := hex.DecodeString(f); err != nil || len(f) != fingerprintDigits || strings.ToLower(f) != f {
			return fmt.Errorf("identity: secret fingerprint %q is not %d lower-case hex digits", f, fingerprintDigits)
		}
	}
	return nil
}

// fingerprintDigits is how many hex digits of the secret's SHA-256 a
// fingerprint keeps: enough to tell secrets apart, far too few to help
// anyone guess one.
const fingerprintDigits = 16

// SecretFingerprint is the fingerprint of a Message-ID secret: the first
// 16 hex digits of its SHA-256.
func SecretFingerprint(secret []byte) string {
	sum := sha256.Sum256(secret)
	return hex.EncodeToString(sum[:])[:fingerprintDigits]
}

// IdentityRecord is the identity a log stores: the current one, since
// when, and the earlier ones an operator replaced (Rekeyed), oldest first,
// for the operator's information. Jobs created under an earlier identity
// keep their Message-IDs and are found by key (Store.JobByKey).
type IdentityRecord struct {
	Identity
	Since    time.Time      `json:"since"`
	Previous []PastIdentity `json:"previous,omitempty"`
}

// PastIdentity is an identity the log had until an operator replaced it.
type PastIdentity struct {
	Identity
	Until time.Time `json:"until"`
}

// ErrIdentityMismatch is wrapped by the error a log's Open returns when
// the identity it was given differs from the stored one (see
// IdentityMismatchError).
var ErrIdentityMismatch = errors.New("acceptlog: the log's identity differs from the relay's")

// IdentityMismatchError is the refusal to open a log with another
// identity than its own. It names both and how to change the log's on
// purpose.
type IdentityMismatchError struct {
	Stored, Configured Identity
}

func (e *IdentityMismatchError) Error() string {
	how := "--msgid-domain " + e.Configured.MsgIDDomain
	if e.Configured.SecretFingerprint != "" {
		how += " --msgid-secret-file FILE"
	}
	return fmt.Sprintf("the log's Message-IDs are derived with %s, and this relay is configured with %s: "+
		"every job key would get a new Message-ID, and a retry could send it again. "+
		"Configure the relay with the log's identity; or, to change it on purpose, stop every relay on the log "+
		"and run gmailrelay rekey (--data FILE or --database URL) %s (old jobs keep their Message-IDs and replay by key); "+
		"or start with a new log", e.Stored, e.Configured, how)
}

// Unwrap makes the error match ErrIdentityMismatch.
func (e *IdentityMismatchError) Unwrap() error { return ErrIdentityMismatch }

// CheckIdentity decides what opening a log with the identity want does,
// given its stored record (nil when it has none): nothing when want is
// zero or is the stored identity; record want (the record to store) when
// none is stored — a new log, or one written before identities were kept,
// which adopts the configured one once; and an *IdentityMismatchError
// when another identity is stored.
func CheckIdentity(stored *IdentityRecord, want Identity, now time.Time) (*IdentityRecord, error) {
	switch {
	case want.IsZero():
		return nil, nil
	case stored == nil:
		if err := want.Validate(); err != nil {
			return nil, err
		}
		return &IdentityRecord{Identity: want, Since: now.UTC()}, nil
	case stored.Identity != want:
		return nil, &IdentityMismatchError{Stored: stored.Identity, Configured: want}
	}
	return nil, nil
}

// Rekeyed returns the record after an operator's rekey to next (stored is
// nil when the log has none yet): next is the identity from now on, and
// the one it replaces joins Previous. changed is false, and the record is
// stored's, when next already is the identity.
func Rekeyed(stored *IdentityRecord, next Identity, now time.Time) (_ IdentityRecord, changed bool, _ error) {
	if err := next.Validate(); err != nil {
		return IdentityRecord{}, false, err
	}
	if stored == nil {
		return IdentityRecord{Identity: next, Since: now.UTC()}, true, nil
	}
	if stored.Identity == next {
		return *stored, false, nil
	}
	prev := append(append([]PastIdentity(nil), stored.Previous...), PastIdentity{Identity: stored.Identity, Until: now.UTC()})
	return IdentityRecord{Identity: next, Since: now.UTC(), Previous: prev}, true, nil
}

// decodeIdentity reads a stored record; nil for none.

// ErrLocked is wrapped by what Rekey answers for a log a relay is using
// (the bbolt file's lock is held; on PostgreSQL, a relay is connected).
var ErrLocked = errors.New("acceptlog: the log is in use by a running gmailrelay")
