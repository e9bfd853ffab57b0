package api_test

import (
	"encoding/base64"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/api/gmail/v1"

	"github.com/gmailrelay/gmailrelay/policy"
	"github.com/gmailrelay/gmailrelay/relay"
)

// maxRecipients gives the default mailbox max_recipients n.
func maxRecipients(n int) func(*policy.Policy) {
	return func(p *policy.Policy) {
		m := p.MailboxList()[0]
		m.MaxRecipients = n
		p.Mailboxes = map[string]policy.Mailbox{m.Name: m}
	}
}

// addresses returns n distinct recipient addresses.
func addresses(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("r%d@example.org", i)
	}
	return out
}

// Gmail's limit for API sends (support.google.com/a/answer/166852): 101
// recipients are refused 400 naming the list that passes 100, on the
// JSON path, a raw message on /v1/send and the Gmail-compatible path,
// with nothing logged and no delivery in the emulator; 100 are sent.
func TestEmulatorHundredRecipientsByDefault(t *testing.T) {
	e := newEnv(t, envOpts{})
	all := addresses(101)

	body := sendBody("rcpt-over")
	body["to"], body["cc"], body["bcc"] = all[:50], all[50:100], all[100:]
	r := e.must("POST", "/v1/send", apiToken, body)
	if ebody, _ := r.body["error"].(map[string]any); r.status != 400 || ebody["field"] != "bcc" ||
		!strings.Contains(fmt.Sprint(ebody["message"]), "101") || !strings.Contains(fmt.Sprint(ebody["message"]), "100") {
		t.Errorf("101 recipients: %d %.300s, want 400 field bcc naming 101 and 100", r.status, r.raw)
	}
	e.wantNothing(relay.MessageID("rcpt-over", domain))

	raw := func(id string, to []string) []byte {
		return []byte("From: me@example.com\r\nTo: " + strings.Join(to, ", ") + "\r\nMessage-ID: " + id + "\r\n\r\nhi\r\n")
	}
	r = e.must("POST", "/v1/send", apiToken, raw("<rcpt-over@x.example>", all))
	if ebody, _ := r.body["error"].(map[string]any); r.status != 400 || ebody["field"] != "raw" || !strings.Contains(fmt.Sprint(ebody["message"]), "101") {
		t.Errorf("raw, 101 recipients: %d %.300s, want 400 field raw naming 101", r.status, r.raw)
	}
	svc := e.gmailClient()
	_, err := svc.Users.Messages.Send("me", &gmail.Message{Raw: base64.URLEncoding.EncodeToString(raw("<rcpt-over-gmail@x.example>", all))}).Do()
	wantGmail400(t, "Gmail path, 101 recipients", err, "101", "max_recipients")
	e.wantNothing("<rcpt-over@x.example>")
	e.wantNothing("<rcpt-over-gmail@x.example>")
	if n := e.Emulator.Deliveries(""); n != 0 {
		t.Fatalf("the emulator has %d deliveries after three refused sends, want 0", n)
	}

	body = sendBody("rcpt-at")
	body["to"], body["cc"] = all[:60], all[60:100]
	if r := e.must("POST", "/v1/send", apiToken, body); r.status != 200 {
		t.Errorf("100 recipients: %d %.300s, want 200", r.status, r.raw)
	}
	if _, err := svc.Users.Messages.Send("me", &gmail.Message{Raw: base64.URLEncoding.EncodeToString(raw("<rcpt-at@x.example>", all[:100]))}).Do(); err != nil {
		t.Errorf("Gmail path, 100 recipients: %v", err)
	}
	if d1, d2 := e.Emulator.Deliveries(relay.MessageID("rcpt-at", domain)), e.Emulator.Deliveries("<rcpt-at@x.example>"); d1 != 1 || d2 != 1 {
		t.Errorf("deliveries at 100 recipients: %d and %d, want 1 each", d1, d2)
	}
}

// A mailbox's max_recipients moves the limit both ways.
func TestEmulatorMaxRecipientsPerMailbox(t *testing.T) {
	for _, tt := range []struct {
		max, n int
		want   int
	}{{10, 11, 400}, {10, 10, 200}, {250, 250, 200}, {250, 251, 400}} {
		e := newEnv(t, envOpts{policy: maxRecipients(tt.max)})
		key := fmt.Sprintf("rcpt-%d-%d", tt.max, tt.n)
		body := sendBody(key)
		body["to"] = addresses(tt.n)
		r := e.must("POST", "/v1/send", apiToken, body)
		if r.status != tt.want {
			t.Errorf("max_recipients %d, %d recipients: %d %.300s, want %d", tt.max, tt.n, r.status, r.raw, tt.want)
		}
		want := 0
		if tt.want == 200 {
			want = 1
		}
		if d := e.Emulator.Deliveries(relay.MessageID(key, domain)); d != want {
			t.Errorf("max_recipients %d, %d recipients: %d deliveries, want %d", tt.max, tt.n, d, want)
		}
	}
}
