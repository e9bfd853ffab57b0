package relay_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay/relay"
)

// The HMAC test vectors were computed apart from this code (Python's hmac
// module): HMAC-SHA256(secret, "cus_123:order.shipped:ord_456"), its first
// 32 hex digits.
const (
	vectorKey     = "cus_123:order.shipped:ord_456"
	vectorDomain  = "inbound.yourdomain.com"
	vectorSecretA = "0123456789abcdef0123456789abcdef"
	vectorSecretB = "another-secret-of-32-bytes-00000"
)

// TestIDSchemeVectors: without a secret the scheme is the package's
// MessageID (sha256); with one it is HMAC-SHA256(secret, key), and another
// secret derives another Message-ID for the same key.
func TestIDSchemeVectors(t *testing.T) {
	for _, tt := range []struct {
		name   string
		secret []byte
		want   string
	}{
		{"no secret", nil, "<job-1ca74402c25f227b40cf235d910d7664@inbound.yourdomain.com>"},
		{"empty secret is none", []byte{}, "<job-1ca74402c25f227b40cf235d910d7664@inbound.yourdomain.com>"},
		{"secret A", []byte(vectorSecretA), "<job-b6e4c550ea21656260e0b77b6134d3ac@inbound.yourdomain.com>"},
		{"secret B", []byte(vectorSecretB), "<job-dabca82433d3c2c62835cb98c40c478f@inbound.yourdomain.com>"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := relay.NewIDScheme(vectorDomain, tt.secret)
			if got := s.MessageID(vectorKey); got != tt.want {
				t.Fatalf("MessageID = %s, want %s", got, tt.want)
			}
			if s.Keyed() != (len(tt.secret) > 0) {
				t.Errorf("Keyed = %t with a secret of %d bytes", s.Keyed(), len(tt.secret))
			}
		})
	}
}

// TestIDSchemeNeverShowsTheSecret: printing a scheme, however, names the
// derivation and the domain, never the secret.
func TestIDSchemeNeverShowsTheSecret(t *testing.T) {
	s := relay.NewIDScheme(vectorDomain, []byte(vectorSecretA))
	for _, verb := range []string{"%v", "%+v", "%#v", "%s"} {
		if out := fmt.Sprintf(verb, s); strings.Contains(out, vectorSecretA) || !strings.Contains(out, "hmac-sha256") {
			t.Errorf("Sprintf(%s) = %q", verb, out)
		}
	}
	if got := relay.NewIDScheme(vectorDomain, nil).Name(); got != "sha256" {
		t.Errorf("Name without a secret = %q", got)
	}
}

// TestIDSchemePrepareUsesTheSecret: every derivation of a keyed scheme —
// a structured send, a raw message without a Message-ID, the check of a
// raw message's Message-ID against its key, and the reserved namespace —
// uses the HMAC, not sha256(key).
func TestIDSchemePrepareUsesTheSecret(t *testing.T) {
	s := relay.NewIDScheme(testDomain, []byte(vectorSecretA))
	const key = "cust:evt:1"
	want, plain := s.MessageID(key), relay.MessageID(key, testDomain)
	if want == plain {
		t.Fatal("the keyed and the plain scheme derive one Message-ID")
	}
	p, err := s.Prepare(relay.SendRequest{Key: key, To: relay.AddressList{"a@example.com"}, Subject: "s", Text: "t"}, "", time.Unix(0, 0))
	if err != nil || p.MessageID != want {
		t.Fatalf("Prepare: %s, %v; want %s", p.MessageID, err, want)
	}
	noID := "From: a@example.com\r\nTo: b@example.com\r\nSubject: s\r\n\r\nbody\r\n"
	if p, err := s.PrepareRaw([]byte(noID), key, ""); err != nil || p.MessageID != want {
		t.Fatalf("PrepareRaw without a Message-ID: %s, %v; want %s", p.MessageID, err, want)
	}
	if p, err := s.PrepareRaw([]byte(rawWithID(want)), key, ""); err != nil || p.MessageID != want {
		t.Fatalf("PrepareRaw with the key's Message-ID: %s, %v", p.MessageID, err)
	}
	// The plain scheme's Message-ID is in the relay's namespace but not
	// the key's under this scheme: refused, on both raw paths.
	_, err = s.PrepareRaw([]byte(rawWithID(plain)), key, "")
	wantReserved(t, err)
	_, err = s.PrepareRawClaim([]byte(rawWithID(plain)), key, "")
	wantReserved(t, err)
	if p, err := s.PrepareRawClaim([]byte(rawWithID(want)), key, ""); err != nil || p.Key != key || p.MessageID != want {
		t.Fatalf("PrepareRawClaim with the key: %+v, %v", p, err)
	}
	if err := s.CheckReserved(want, key); err != nil {
		t.Errorf("CheckReserved of the key's own: %v", err)
	}
	wantReserved(t, s.CheckReserved(plain, key))
}
