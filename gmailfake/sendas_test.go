package gmailfake_test

import (
	"net/mail"
	"strings"
	"testing"

	"github.com/gmailrelay/gmailrelay/gmailfake"
)

// fromOf returns the From address of the copy the emulator stored and
// delivered for messageID: the ground truth of what recipients see.
func fromOf(t *testing.T, srv *gmailfake.Server, messageID string) string {
	t.Helper()
	msgs := srv.Messages(messageID)
	if len(msgs) != 1 {
		t.Fatalf("%s: %d stored copies, want 1", messageID, len(msgs))
	}
	m, err := mail.ReadMessage(strings.NewReader(string(msgs[0].Raw)))
	if err != nil {
		t.Fatalf("%s: stored copy: %v", messageID, err)
	}
	a, err := mail.ParseAddress(m.Header.Get("From"))
	if err != nil {
		t.Fatalf("%s: stored From %q: %v", messageID, m.Header.Get("From"), err)
	}
	return a.Address
}

// Gmail's habit, emulated: a From that is not a verified send-as address
// of the account is replaced by the account's address and the send is
// still answered 200 (reports in google_workspace_mcp PR #1075 and
// simstudioai/sim #7651); the account's own address and a verified alias
// are kept; a pending alias is replaced like any stranger.
func TestGmailLikeUnverifiedFromIsReplaced(t *testing.T) {
	srv, svc, _ := emulator(t, gmailfake.Options{Account: "shop@example.com",
		SendAs: []gmailfake.Alias{{Address: "Sales@Example.com"}, {Address: "later@example.com", Pending: true}}})
	for i, tc := range []struct{ from, want string }{
		{"Shop <shop@example.com>", "shop@example.com"},
		{"Sales <sales@example.com>", "sales@example.com"}, // verified alias, other case
		{"Boss <ceo@example.com>", "shop@example.com"},     // a stranger: replaced
		{"Later <later@example.com>", "shop@example.com"},  // pending: replaced
	} {
		id := msgID(100 + i)
		raw := strings.Replace(rawMessage(id, "a@example.org", "from"), "From: Shop <shop@example.com>", "From: "+tc.from, 1)
		if sent := send(t, svc, raw); sent.Id == "" {
			t.Fatalf("%s: no id in the 200 answer", tc.from)
		}
		if got := fromOf(t, srv, id); got != tc.want {
			t.Errorf("From %s: the delivered copy is from %s, want %s", tc.from, got, tc.want)
		}
		if d := srv.Deliveries(id); d != 1 {
			t.Errorf("From %s: %d deliveries, want 1 (Gmail answers 200 and sends)", tc.from, d)
		}
	}
}

// users.settings.sendAs.list answers the account's address (primary,
// default, accepted) and its aliases with their verification, costs one
// unit, and sees an alias added later (AddSendAs).
func TestGmailLikeSendAsList(t *testing.T) {
	srv, svc, _ := emulator(t, gmailfake.Options{Account: "shop@example.com",
		SendAs: []gmailfake.Alias{{Address: "sales@example.com"}, {Address: "later@example.com", Pending: true}}})
	r, err := svc.Users.Settings.SendAs.List("me").Do()
	if err != nil {
		t.Fatal(err)
	}
	if len(r.SendAs) != 3 {
		t.Fatalf("sendAs: %d entries, want 3", len(r.SendAs))
	}
	if p := r.SendAs[0]; p.SendAsEmail != "shop@example.com" || !p.IsPrimary || !p.IsDefault || p.VerificationStatus != "accepted" {
		t.Errorf("first entry %+v, want the primary, default, accepted account address", p)
	}
	if a := r.SendAs[1]; a.SendAsEmail != "sales@example.com" || a.IsPrimary || a.VerificationStatus != "accepted" {
		t.Errorf("second entry %+v, want sales@ accepted", a)
	}
	if a := r.SendAs[2]; a.SendAsEmail != "later@example.com" || a.VerificationStatus != "pending" {
		t.Errorf("third entry %+v, want later@ pending", a)
	}
	if st := srv.Stats(); st.Calls[gmailfake.MethodSendAs] != 1 || st.QuotaUnits != gmailfake.CostSendAs {
		t.Errorf("stats %+v, want one sendas call costing %d unit", st, gmailfake.CostSendAs)
	}
	srv.AddSendAs(gmailfake.Alias{Address: "later@example.com"})
	r, err = svc.Users.Settings.SendAs.List("me").Do()
	if err != nil || len(r.SendAs) != 3 || r.SendAs[2].VerificationStatus != "accepted" {
		t.Fatalf("after AddSendAs: %+v, %v; want later@ accepted", r, err)
	}
	if _, err := srv.AddFault(gmailfake.Fault{Method: gmailfake.MethodSendAs, Action: gmailfake.ActionError, Status: 503}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Users.Settings.SendAs.List("me").Do(); err == nil || !strings.Contains(err.Error(), "503") {
		t.Errorf("with a sendas fault: %v, want a 503", err)
	}
}
