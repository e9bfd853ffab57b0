package relay_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/gmailrelay/gmailrelay/relay"
)

func wantReserved(t testing.TB, err error) {
	t.Helper()
	var e *relay.Error
	if !errors.As(err, &e) || e.Code != relay.CodeReservedMessageID || e.Field != "message_id" {
		t.Fatalf("err = %v, want code %s, field message_id", err, relay.CodeReservedMessageID)
	}
}

// TestPrepareRawReservedNamespace: a raw message may carry a Message-ID of
// the relay's own shape only with the key that derives it (ASCII case
// aside); without a key, or with another key, it is refused with
// reserved_message_id, on PrepareRaw, Prepare's raw field and the Gmail
// path's PrepareRawClaim.
func TestPrepareRawReservedNamespace(t *testing.T) {
	const key = "cust:evt:1"
	id := relay.MessageID(key, testDomain)
	upper := "<JOB-" + strings.ToUpper(id[5:])
	for _, squat := range []string{id, upper, "<job-anything@" + testDomain + ">", "<Job-1@INBOUND.yourdomain.COM>"} {
		_, err := relay.PrepareRaw([]byte(rawWithID(squat)), "", "", testDomain)
		wantReserved(t, err)
		_, err = relay.PrepareRaw([]byte(rawWithID(squat)), "cust:evt:2", "", testDomain)
		wantReserved(t, err)
		_, err = relay.PrepareRawClaim([]byte(rawWithID(squat)), "", "", testDomain)
		wantReserved(t, err)
		_, err = relay.PrepareRawClaim([]byte(rawWithID(squat)), "cust:evt:2", "", testDomain)
		wantReserved(t, err)
	}
	for _, claimed := range []string{id, upper} {
		p, err := relay.PrepareRaw([]byte(rawWithID(claimed)), key, "", testDomain)
		if err != nil || p.Key != key || p.MessageID != claimed {
			t.Fatalf("PrepareRaw with the key: %+v, %v", p, err)
		}
		p, err = relay.PrepareRawClaim([]byte(rawWithID(claimed)), key, "", testDomain)
		if err != nil || p.Key != key || p.MessageID != claimed {
			t.Fatalf("PrepareRawClaim with the key: %+v, %v", p, err)
		}
	}
	// Not the relay's shape: the Message-ID is the key; a claim is unused.
	for _, free := range []string{"<job-1@other.example>", "<jobs-1@" + testDomain + ">", "<x.job-1@" + testDomain + ">"} {
		p, err := relay.PrepareRawClaim([]byte(rawWithID(free)), key, "", testDomain)
		if err != nil || p.Key != free {
			t.Fatalf("%s: %+v, %v; want its own key", free, p, err)
		}
	}
}

// FuzzReservedMessageID drives arbitrary Message-IDs and keys through
// CheckReservedMessageID: it never panics; an id is accepted with a key
// only when MessageID(key, domain) equals it but for ASCII case; every id
// of the reserved shape without its key is refused.
func FuzzReservedMessageID(f *testing.F) {
	for _, s := range []struct{ id, key string }{
		{relay.MessageID("cust:evt:1", testDomain), "cust:evt:1"},
		{relay.MessageID("cust:evt:1", testDomain), ""},
		{strings.ToUpper(relay.MessageID("cust:evt:1", testDomain)), "cust:evt:1"},
		{"<job-x@" + testDomain + ">", "k"},
		{" job-x@INBOUND.yourdomain.com ", ""},
		{"<job-a@b@" + testDomain + ">", ""},
		{"<m1@example.com>", ""},
		{"<job-\u212a@" + testDomain + ">", ""},
		{"", ""},
	} {
		f.Add(s.id, s.key)
	}
	f.Fuzz(func(t *testing.T, id, key string) {
		err := relay.CheckReservedMessageID(id, key, testDomain)
		if err != nil {
			wantReserved(t, err)
		}
		s := strings.TrimSpace(id)
		s = strings.TrimSuffix(strings.TrimPrefix(s, "<"), ">")
		at := strings.LastIndex(s, "@")
		reserved := at >= 4 && asciiLower(s[:4]) == "job-" && asciiLower(s[at+1:]) == asciiLower(testDomain)
		derived := key != "" && asciiLower("<"+s+">") == asciiLower(relay.MessageID(key, testDomain))
		switch {
		case !reserved && err != nil:
			t.Fatalf("%q (key %q) is not of the reserved shape but was refused: %v", id, key, err)
		case reserved && derived && err != nil:
			t.Fatalf("%q with the key %q that derives it was refused: %v", id, key, err)
		case reserved && !derived && err == nil:
			t.Fatalf("%q of the reserved shape was accepted with key %q, which does not derive it", id, key)
		}
	})
}

// asciiLower lowers ASCII letters only.
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}
