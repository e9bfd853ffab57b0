package relay_test

import (
	"context"
	"testing"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/faultmodes"
	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/relay"
)

// prepareIn prepares the same message as env.prepare, under domain.
func (e *env) prepareIn(domain, key, text string) relay.Prepared {
	e.t.Helper()
	p, err := relay.Prepare(relay.SendRequest{Key: key, To: relay.AddressList{"customer@example.org"},
		Subject: "Your order", Text: text}, "", domain, e.clock.Now())
	if err != nil {
		e.t.Fatal(err)
	}
	return p
}

// After a rekey the same key derives another Message-ID; the front door
// finds the key's job and replays it: no second job, no second delivery
// (emulator results). The same key with other content is still a 422.
func TestEmulatorKeyOfAnEarlierDomainReplaysItsJob(t *testing.T) {
	e := newEnv(t, gmailfake.Options{})
	ctx := context.Background()
	const key = "cus_1:order.shipped:ord_1"
	first, err := e.svc.Send(ctx, e.prepareIn("old.example", key, "hello"), relay.SendOptions{})
	if err != nil || first.Job.State != gmailrelay.StateSent {
		t.Fatalf("first send: %s, %v", first.Job.State, err)
	}
	p := e.prepareIn("new.example", key, "hello")
	again, err := e.svc.Send(ctx, p, relay.SendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !again.Replayed || again.Job.MessageID != first.Job.MessageID || again.Job.GmailID != first.Job.GmailID {
		t.Errorf("send under the new domain: replayed %t, %s (gmail id %s); want a replay of %s (%s)",
			again.Replayed, again.Job.MessageID, again.Job.GmailID, first.Job.MessageID, first.Job.GmailID)
	}
	if got := e.emu.Deliveries(first.Job.MessageID); got != 1 {
		t.Errorf("emulator results: %d deliveries of %s, want 1", got, first.Job.MessageID)
	}
	if got := e.emu.Deliveries(p.MessageID); got != 0 {
		t.Errorf("emulator results: %d deliveries of the new domain's %s, want 0", got, p.MessageID)
	}
	if _, err := e.log.Get(ctx, p.MessageID); err == nil {
		t.Errorf("a job %s was created under the new domain", p.MessageID)
	}
	_, err = e.svc.Send(ctx, e.prepareIn("new.example", key, "other text"), relay.SendOptions{})
	if got := relay.ErrorCode(err); got != relay.CodeMismatch {
		t.Errorf("other content under the key: %v, want %s", err, relay.CodeMismatch)
	}
}

// A retryable failure of the earlier domain is retried as that job, with
// its own stored message: the one delivery carries the earlier
// Message-ID, never the new domain's.
func TestEmulatorRetryOfAnEarlierDomainsJobKeepsItsMessageID(t *testing.T) {
	e := newEnv(t, gmailfake.Options{})
	ctx := context.Background()
	one := 1
	if _, err := e.faults.Add(faultmodes.Spec{Mode: faultmodes.FailBeforeForward, Count: &one}); err != nil {
		t.Fatal(err)
	}
	const key = "cus_2:order.paid:ord_2"
	old := e.prepareIn("old.example", key, "x")
	if res, err := e.svc.Send(ctx, old, relay.SendOptions{}); err != nil || res.Job.State != gmailrelay.StateFailed {
		t.Fatalf("first send: %s, %v; want failed (fail-before-forward)", res.Job.State, err)
	}
	p := e.prepareIn("new.example", key, "x")
	res, err := e.svc.Send(ctx, p, relay.SendOptions{})
	if err != nil || res.Job.State != gmailrelay.StateSent || res.Job.MessageID != old.MessageID || res.Job.Attempts != 2 {
		t.Fatalf("retry under the new domain: %s %s attempts %d, %v; want %s sent after 2 attempts",
			res.Job.MessageID, res.Job.State, res.Job.Attempts, err, old.MessageID)
	}
	if got := e.emu.Deliveries(old.MessageID); got != 1 {
		t.Errorf("emulator results: %d deliveries of %s, want 1", got, old.MessageID)
	}
	if got := e.emu.Deliveries(p.MessageID); got != 0 {
		t.Errorf("emulator results: %d deliveries carrying the new domain's %s, want 0", got, p.MessageID)
	}
}
