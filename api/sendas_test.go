package api_test

import (
	"encoding/base64"
	"fmt"
	"net/mail"
	"strings"
	"testing"
	"time"

	"google.golang.org/api/gmail/v1"
	"google.golang.org/api/option"

	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/relay"
)

// deliveredFrom returns the From address of the one copy the emulator
// delivered for messageID (ground truth: what recipients see).
func (e *env) deliveredFrom(messageID string) string {
	e.t.Helper()
	msgs := e.Emulator.Messages(messageID)
	if len(msgs) != 1 {
		e.t.Fatalf("%s: %d stored copies, want 1", messageID, len(msgs))
	}
	m, err := mail.ReadMessage(strings.NewReader(string(msgs[0].Raw)))
	if err != nil {
		e.t.Fatalf("%s: %v", messageID, err)
	}
	a, err := mail.ParseAddress(m.Header.Get("From"))
	if err != nil {
		e.t.Fatalf("%s: From %q: %v", messageID, m.Header.Get("From"), err)
	}
	return a.Address
}

// refreshSendAs runs the relay's send-as read and wants it to read n lists.
func (e *env) refreshSendAs(n int) {
	e.t.Helper()
	read, err := e.Service.RefreshSendAs(e.t.Context())
	if err != nil || read != n {
		e.t.Fatalf("RefreshSendAs: read %d, %v; want %d lists, no error", read, err, n)
	}
}

// wantFromNotVerified wants r to be 400 from_not_verified on field from,
// naming from and the verified addresses.
func wantFromNotVerified(t *testing.T, what string, r reply, from string, verified ...string) {
	t.Helper()
	ebody, _ := r.body["error"].(map[string]any)
	msg := fmt.Sprint(ebody["message"])
	if r.status != 400 || ebody["code"] != string(relay.CodeFromNotVerified) || ebody["field"] != "from" || !strings.Contains(msg, from) {
		t.Errorf("%s: %d %.400s, want 400 from_not_verified on field from naming %s", what, r.status, r.raw, from)
	}
	for _, v := range verified {
		if !strings.Contains(msg, v) {
			t.Errorf("%s: message %q does not name the verified address %s", what, msg, v)
		}
	}
}

// The same message from an address that is not a verified send-as alias:
// sent straight to the emulator, Gmail-like, it is delivered from the
// account's address (answered 200); through the relay it is refused 400
// from_not_verified on every path, and the emulator has no delivery; a
// --send-as alias and no From at all are sent. Emulator results.
func TestEmulatorUnverifiedFromRefusedBeforeGmail(t *testing.T) {
	e := newEnv(t, envOpts{})
	acct := e.Emulator.Account()
	e.Emulator.AddSendAs(gmailfake.Alias{Address: "sales@example.com"})
	e.refreshSendAs(1)
	svc := e.gmailClient()
	raw := func(from, id string) []byte {
		return []byte("From: Boss <" + from + ">\r\nTo: customer@example.org\r\nMessage-ID: " + id + "\r\nSubject: hi\r\n\r\nhi\r\n")
	}

	// Gmail's habit, in the emulator: sent directly, the From is replaced.
	direct := "<direct-ceo@x.example>"
	gm, err := gmail.NewService(t.Context(), option.WithEndpoint(e.EmulatorURL+"/"), option.WithoutAuthentication())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gm.Users.Messages.Send("me", &gmail.Message{Raw: base64.URLEncoding.EncodeToString(raw("ceo@example.com", direct))}).Do(); err != nil {
		t.Fatalf("sent directly: %v, want Gmail's 200", err)
	}
	if got := e.deliveredFrom(direct); got != acct {
		t.Fatalf("sent directly from ceo@example.com: delivered from %s, want the account's %s", got, acct)
	}
	e.Emulator.Reset()

	body := sendBody("from-ceo")
	body["from"] = "Boss <CEO@example.com>"
	r := e.must("POST", "/v1/send", apiToken, body)
	wantFromNotVerified(t, "JSON", r, "ceo@example.com", acct, "sales@example.com")
	e.wantNothing(relay.MessageID("from-ceo", domain))
	r = e.must("POST", "/v1/send", apiToken, raw("ceo@example.com", "<from-ceo@x.example>"))
	wantFromNotVerified(t, "raw", r, "ceo@example.com")
	_, err = svc.Users.Messages.Send("me", &gmail.Message{Raw: base64.URLEncoding.EncodeToString(raw("ceo@example.com", "<from-ceo-gmail@x.example>"))}).Do()
	wantGmail400(t, "Gmail path", err, "ceo@example.com", "not a verified send-as address")
	e.wantNothing("<from-ceo@x.example>")
	e.wantNothing("<from-ceo-gmail@x.example>")
	if n := e.Emulator.Deliveries(""); n != 0 {
		t.Fatalf("the emulator has %d deliveries after refused sends, want 0", n)
	}

	body = sendBody("from-sales")
	body["from"] = "Sales <Sales@Example.com>"
	if r := e.must("POST", "/v1/send", apiToken, body); r.status != 200 {
		t.Fatalf("from the verified alias: %d %.300s, want 200", r.status, r.raw)
	}
	if got := e.deliveredFrom(relay.MessageID("from-sales", domain)); got != "Sales@Example.com" && got != "sales@example.com" {
		t.Errorf("from the verified alias: delivered from %s, want sales@example.com", got)
	}
	if r := e.must("POST", "/v1/send", apiToken, sendBody("from-none")); r.status != 200 {
		t.Errorf("no from: %d %.300s, want 200 (the mailbox's default address)", r.status, r.raw)
	}
}

// The list is read again every hour on the relay's clock: an alias added
// in Gmail is refused until the next read, sent after it; each read is
// one Gmail call and one quota unit, counted by the relay.
func TestEmulatorSendAsRefreshedHourly(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.refreshSendAs(1)
	spent := e.Service.Quota().Spent()
	e.Emulator.AddSendAs(gmailfake.Alias{Address: "new@example.com"})
	body := sendBody("from-new")
	body["from"] = "new@example.com"
	wantFromNotVerified(t, "before the next read", e.must("POST", "/v1/send", apiToken, body), "new@example.com")

	e.Clock.Advance(relay.SendAsInterval - time.Minute)
	e.refreshSendAs(0) // not due yet
	wantFromNotVerified(t, "59 minutes later", e.must("POST", "/v1/send", apiToken, body), "new@example.com")

	e.Clock.Advance(time.Minute)
	e.refreshSendAs(1)
	if got := e.Service.Quota().Spent() - spent; got != relay.UnitsSendAsList {
		t.Errorf("quota the relay counted for the second read: %d units, want %d", got, relay.UnitsSendAsList)
	}
	if r := e.must("POST", "/v1/send", apiToken, body); r.status != 200 {
		t.Fatalf("after the hourly read: %d %.300s, want 200", r.status, r.raw)
	}
	if got := e.deliveredFrom(relay.MessageID("from-new", domain)); got != "new@example.com" {
		t.Errorf("delivered from %s, want new@example.com", got)
	}
	if calls := e.Emulator.Stats().Calls[gmailfake.MethodSendAs]; calls != 2 {
		t.Errorf("sendAs.list calls: %d, want 2 (start, one hour later)", calls)
	}
}

// A list that cannot be read does not block sends: with no list read yet
// a From is not checked (Gmail then replaces it, as the emulator shows);
// the read is tried again a minute later, and once a list is known a
// failed read keeps it. A job the front door answers is answered whatever
// the list says now.
func TestEmulatorSendAsUnreadableFailsOpen(t *testing.T) {
	e := newEnv(t, envOpts{})
	if _, err := e.Emulator.AddFault(gmailfake.Fault{Method: gmailfake.MethodSendAs, Action: gmailfake.ActionError, Status: 500}); err != nil {
		t.Fatal(err)
	}
	if read, err := e.Service.RefreshSendAs(t.Context()); read != 0 || err == nil {
		t.Fatalf("RefreshSendAs with Gmail failing: read %d, %v; want 0 and the error", read, err)
	}
	if _, _, ok := e.Service.Mailboxes()[0].SendAs(); ok {
		t.Fatal("a failed read left a list")
	}
	if m := e.must("GET", "/metrics", adminToken, nil); !strings.Contains(string(m.raw), `gmailrelay_mailbox_send_as_checked{mailbox="default"} 0`) {
		t.Errorf("/metrics does not say the From is unchecked:\n%s", m.raw)
	}
	body := sendBody("from-ceo-unchecked")
	body["from"] = "ceo@example.com"
	if r := e.must("POST", "/v1/send", apiToken, body); r.status != 200 {
		t.Fatalf("no list read yet: %d %.300s, want 200 (not checked)", r.status, r.raw)
	}
	id := relay.MessageID("from-ceo-unchecked", domain)
	if got := e.deliveredFrom(id); got != e.Emulator.Account() {
		t.Errorf("unchecked From: delivered from %s, want the account's (Gmail-like replacement)", got)
	}

	e.Clock.Advance(relay.SendAsRetry - time.Second)
	e.refreshSendAs(0) // the retry is not due yet
	e.Clock.Advance(time.Second)
	e.refreshSendAs(1)
	if m := e.must("GET", "/metrics", adminToken, nil); !strings.Contains(string(m.raw), `gmailrelay_mailbox_send_as_checked{mailbox="default"} 1`) {
		t.Errorf("/metrics does not say the From is checked after a read")
	}
	if r := e.must("POST", "/v1/send", apiToken, body); r.status != 200 || r.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("replay of the job sent before: %d %.300s, want 200 replayed", r.status, r.raw)
	}
	other := sendBody("from-ceo-checked")
	other["from"] = "ceo@example.com"
	wantFromNotVerified(t, "after a read", e.must("POST", "/v1/send", apiToken, other), "ceo@example.com")

	if _, err := e.Emulator.AddFault(gmailfake.Fault{Method: gmailfake.MethodSendAs, Action: gmailfake.ActionError, Status: 500}); err != nil {
		t.Fatal(err)
	}
	e.Clock.Advance(relay.SendAsInterval)
	if _, err := e.Service.RefreshSendAs(t.Context()); err == nil {
		t.Fatal("RefreshSendAs with Gmail failing: no error")
	}
	wantFromNotVerified(t, "after a failed read", e.must("POST", "/v1/send", apiToken, other), "ceo@example.com")
	if n := e.Emulator.Deliveries(relay.MessageID("from-ceo-checked", domain)); n != 0 {
		t.Errorf("refused job: %d deliveries, want 0", n)
	}
}
