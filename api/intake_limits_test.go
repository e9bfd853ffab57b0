package api_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/api/gmail/v1"
	"google.golang.org/api/googleapi"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/relay"
)

// Security audit, items A–D, through the HTTP surface: each refusal here
// was a 200 before the fix.

// wantGmail400 checks err is Gmail's 400 INVALID_ARGUMENT whose message
// holds each of parts.
func wantGmail400(t *testing.T, what string, err error, parts ...string) {
	t.Helper()
	var gerr *googleapi.Error
	if !errors.As(err, &gerr) || gerr.Code != 400 || len(gerr.Errors) == 0 || gerr.Errors[0].Reason != "invalidArgument" {
		t.Errorf("%s: %v, want googleapi 400 invalidArgument", what, err)
		return
	}
	for _, p := range parts {
		if !strings.Contains(gerr.Message, p) {
			t.Errorf("%s: message %q does not say %q", what, gerr.Message, p)
		}
	}
}

// wantNothing checks the relay logged no job for id and Gmail got nothing.
func (e *env) wantNothing(id string) {
	e.t.Helper()
	if _, err := e.Log.Get(context.Background(), id); !errors.Is(err, gmailrelay.ErrNotFound) {
		e.t.Errorf("%s: log Get = %v, want ErrNotFound", id, err)
	}
	if d := e.Emulator.Deliveries(id); d != 0 {
		e.t.Errorf("%s: %d deliveries, want 0", id, d)
	}
}

// A: threadId on the Gmail-compatible path, from the JSON body or the
// upload's metadata part, is checked as /v1/send's thread_id is.
func TestGmailPathRefusesBadThreadID(t *testing.T) {
	e := newEnv(t, envOpts{})
	svc := e.gmailClient()
	for i, threadID := range []string{"x\r\nBcc: evil@example.com", strings.Repeat("a", 129), strings.Repeat("a", 8<<20), "a b"} {
		id := fmt.Sprintf("<thread-%d@x.example>", i)
		raw := "From: me@example.org\r\nTo: a@example.org\r\nMessage-ID: " + id + "\r\n\r\nhi\r\n"
		// JSON, as a client writes it (the fast raw-only reader is not it).
		r := e.must("POST", "/gmail/v1/users/me/messages/send", apiToken,
			map[string]any{"raw": base64.RawURLEncoding.EncodeToString([]byte(raw)), "threadId": threadID})
		ebody, _ := r.body["error"].(map[string]any)
		if r.status != 400 || ebody["status"] != "INVALID_ARGUMENT" || !strings.Contains(fmt.Sprint(ebody["message"]), "threadId") {
			t.Errorf("JSON threadId #%d: %d %.300s, want 400 INVALID_ARGUMENT naming threadId", i, r.status, r.raw)
		}
		// Upload, multipart/related: the threadId is in the metadata part.
		_, err := svc.Users.Messages.Send("me", &gmail.Message{ThreadId: threadID}).
			Media(strings.NewReader(raw), googleapi.ContentType("message/rfc822")).Do()
		wantGmail400(t, fmt.Sprintf("multipart threadId #%d", i), err, "threadId")
		e.wantNothing(id)
	}
	// A real thread id is still taken, and stored, on both paths (Gmail
	// threads on it only with matching References and Subject).
	first, err := svc.Users.Messages.Send("me", &gmail.Message{Raw: base64.URLEncoding.EncodeToString(
		[]byte("To: a@example.org\r\nMessage-ID: <t-first@x.example>\r\n\r\nhi\r\n"))}).Do()
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"<t-json@x.example>", "<t-upload@x.example>"} {
		raw := "To: a@example.org\r\nMessage-ID: " + id + "\r\n\r\nhi\r\n"
		call := svc.Users.Messages.Send("me", &gmail.Message{ThreadId: first.ThreadId, Raw: base64.URLEncoding.EncodeToString([]byte(raw))})
		if id == "<t-upload@x.example>" {
			call = svc.Users.Messages.Send("me", &gmail.Message{ThreadId: first.ThreadId}).
				Media(strings.NewReader(raw), googleapi.ContentType("message/rfc822"))
		}
		if _, err := call.Do(); err != nil {
			t.Errorf("%s with threadId %s: %v", id, first.ThreadId, err)
		}
		if j, _ := e.job(id); j.ThreadIDIn != first.ThreadId {
			t.Errorf("%s: thread_id_in %q, want %q", id, j.ThreadIDIn, first.ThreadId)
		}
	}
}

// B, C: what decodes or reads as a line break in a header the address
// parser never sees, refused on the Gmail-compatible path and on /v1/send.
func TestRawHeaderLineBreaksRefused(t *testing.T) {
	e := newEnv(t, envOpts{})
	svc := e.gmailClient()
	for i, tt := range []struct{ line, header string }{
		{"Subject: =?utf-8?q?hi=0D=0ABcc:_evil@example.com?=", "Subject"},
		{"X-Note: =?utf-8?b?eA0KQmNjOiBldmlsQGV4YW1wbGUuY29t?=", "X-Note"},
		{"Sender: =?utf-8?q?A=0D=0ABcc:_e@x.com?= <s@x.com>", "Sender"},
		{"Subject: hi\x85Bcc: evil@example.com", "Subject"},
	} {
		id := fmt.Sprintf("<hdr-%d@x.example>", i)
		raw := "From: me@example.org\r\nTo: a@example.org\r\nMessage-ID: " + id + "\r\n" + tt.line + "\r\n\r\nhi\r\n"
		_, err := svc.Users.Messages.Send("me", &gmail.Message{Raw: base64.URLEncoding.EncodeToString([]byte(raw))}).Do()
		wantGmail400(t, tt.line, err, tt.header)
		r := e.must("POST", "/v1/send", apiToken, []byte(raw))
		ebody, _ := r.body["error"].(map[string]any)
		if r.status != 400 || ebody["field"] != "raw" || !strings.Contains(fmt.Sprint(ebody["message"]), tt.header) {
			t.Errorf("rfc822 %q: %d %s, want 400 field raw naming %s", tt.line, r.status, r.raw, tt.header)
		}
		e.wantNothing(id)
	}
}

// D: at most relay.MaxRecipients addresses in to, cc and bcc together, on
// both paths, for a mailbox whose max_recipients allows that many; and a
// header section of at most relay.MaxHeaderBytes.
func TestRecipientAndHeaderCaps(t *testing.T) {
	e := newEnv(t, envOpts{policy: maxRecipients(relay.MaxRecipients)})
	svc := e.gmailClient()
	all := make([]string, relay.MaxRecipients+1)
	for i := range all {
		all[i] = fmt.Sprintf("r%d@example.org", i)
	}
	body := sendBody("cap-over")
	body["to"] = all
	r := e.must("POST", "/v1/send", apiToken, body)
	if ebody, _ := r.body["error"].(map[string]any); r.status != 400 || ebody["field"] != "to" ||
		!strings.Contains(fmt.Sprint(ebody["message"]), fmt.Sprint(relay.MaxRecipients)) {
		t.Errorf("%d addresses in to: %d %.300s, want 400 field to naming the cap", len(all), r.status, r.raw)
	}
	e.wantNothing(relay.MessageID("cap-over", domain))
	body = sendBody("cap-at")
	body["to"], body["bcc"] = all[:relay.MaxRecipients-1], all[relay.MaxRecipients]
	if r := e.must("POST", "/v1/send", apiToken, body); r.status != 200 {
		t.Errorf("%d addresses: %d %.300s, want 200", relay.MaxRecipients, r.status, r.raw)
	}

	raw := func(id string, to []string) string {
		return "To: " + strings.Join(to, ", ") + "\r\nMessage-ID: " + id + "\r\n\r\nhi\r\n"
	}
	_, err := svc.Users.Messages.Send("me", &gmail.Message{Raw: base64.URLEncoding.EncodeToString([]byte(raw("<cap-over@x.example>", all)))}).Do()
	wantGmail400(t, "raw over the cap", err, "2001", "To, Cc and Bcc")
	e.wantNothing("<cap-over@x.example>")
	if _, err := svc.Users.Messages.Send("me", &gmail.Message{Raw: base64.URLEncoding.EncodeToString(
		[]byte(raw("<cap-at@x.example>", all[:relay.MaxRecipients])))}).Do(); err != nil {
		t.Errorf("raw at the cap: %v", err)
	}

	bomb := "To: a@example.org\r\nMessage-ID: <bomb@x.example>\r\n" + strings.Repeat("a:\r\n", relay.MaxHeaderBytes/4) + "\r\nhi\r\n"
	_, err = svc.Users.Messages.Send("me", &gmail.Message{}).Media(strings.NewReader(bomb), googleapi.ContentType("message/rfc822")).Do()
	wantGmail400(t, "header section over the cap", err, "header section")
	e.wantNothing("<bomb@x.example>")
}
