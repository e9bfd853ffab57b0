package pglog_test

import (
	"context"
	"testing"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/policy"
	"github.com/gmailrelay/gmailrelay/relay"
)

// On a log replicas share, Gmail's limits are enforced before sending
// too: more recipients than max_recipients and a From that is not a
// verified send-as address are refused, nothing is logged or delivered,
// and no quota unit or daily budget is kept for them (emulator results).
func TestEmulatorSharedLogEnforcesGmailLimits(t *testing.T) {
	ctx := context.Background()
	s := newSite(t)
	clock, emu := s.clock, s.emu
	pol := policy.Default()
	pol.VerifyHandle = policy.VerifyNever
	pol.Mailboxes = map[string]policy.Mailbox{policy.DefaultMailbox: {Name: policy.DefaultMailbox, MaxRecipients: 2}}
	o := replicaOptions(relay.Config{Provider: s.gm, Policy: pol})
	o.QuotaPerMinute = -1 // the policy's
	r := relayOf(s.env.Replica(o))
	svc, lg := r.Service, r.log
	if n, err := svc.RefreshSendAs(ctx); n != 1 || err != nil {
		t.Fatalf("RefreshSendAs: %d, %v", n, err)
	}
	box, err := svc.MailboxOf(policy.DefaultMailbox)
	if err != nil {
		t.Fatal(err)
	}
	spent, left := box.Quota().Spent(), box.Budget().Left()
	send := func(key string, m relay.Message) error {
		p, err := relay.Prepare(relay.SendRequest{Key: key, From: m.From, To: m.To, Subject: "s", Text: "t"}, "", pol.MsgIDDomain, clock.Now())
		if err != nil {
			t.Fatal(err)
		}
		_, err = svc.Send(ctx, p, relay.SendOptions{})
		return err
	}
	err = send("three", relay.Message{To: relay.AddressList{"a@x.example", "b@x.example", "c@x.example"}})
	if e, ok := err.(*relay.Error); !ok || e.Code != relay.CodeInvalid || e.Field != "to" {
		t.Errorf("3 recipients, max_recipients 2: %v, want invalid_argument on to", err)
	}
	err = send("ceo", relay.Message{From: "ceo@example.com", To: relay.AddressList{"a@x.example"}})
	if relay.ErrorCode(err) != relay.CodeFromNotVerified {
		t.Errorf("from ceo@example.com: %v, want from_not_verified", err)
	}
	jobs, _, err := lg.List(ctx, gmailrelay.ListOptions{})
	if err != nil || len(jobs) != 0 {
		t.Errorf("the log holds %d jobs (%v) after refused sends", len(jobs), err)
	}
	if d := emu.Deliveries(""); d != 0 {
		t.Errorf("%d deliveries after refused sends", d)
	}
	if s, l := box.Quota().Spent(), box.Budget().Left(); s != spent || l != left {
		t.Errorf("quota spent %d → %d, budget left %d → %d: a refused send kept units", spent, s, left, l)
	}
	if err := send("ok", relay.Message{From: emu.Account(), To: relay.AddressList{"a@x.example", "b@x.example"}}); err != nil {
		t.Errorf("2 recipients from the account: %v", err)
	}
	if d := emu.Deliveries(relay.MessageID("ok", pol.MsgIDDomain)); d != 1 {
		t.Errorf("%d deliveries of the accepted send, want 1", d)
	}

}
