package relay_test

import (
	"reflect"
	"testing"

	"github.com/gmailrelay/gmailrelay/relay"
)

// TestSummarize: the To addresses (bare) and the decoded Subject of a
// stored message; an encoded CR LF in the subject becomes spaces; an
// unparseable message or a missing header gives empty fields, never nil.
func TestSummarize(t *testing.T) {
	for _, tc := range []struct {
		name string
		raw  string
		want relay.Summary
	}{
		{"plain", "To: Ann <ann@example.com>, bob@example.org\r\nSubject: Your invoice\r\n\r\nbody",
			relay.Summary{To: []string{"ann@example.com", "bob@example.org"}, Subject: "Your invoice"}},
		{"encoded", "To: ann@example.com\r\nSubject: =?utf-8?q?Re=C3=A7u_=0D=0ABcc:_x@evil.test?=\r\n\r\n",
			relay.Summary{To: []string{"ann@example.com"}, Subject: "Reçu   Bcc: x@evil.test"}},
		{"no headers", "From: a@example.com\r\n\r\nbody", relay.Summary{To: []string{}}},
		{"not a message", "", relay.Summary{To: []string{}}},
	} {
		if got := relay.Summarize([]byte(tc.raw)); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: got %#v, want %#v", tc.name, got, tc.want)
		}
	}
}
