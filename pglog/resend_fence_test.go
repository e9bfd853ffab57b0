package pglog_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/policy"
	"github.com/gmailrelay/gmailrelay/relay"
	"github.com/gmailrelay/gmailrelay/sweeper"
)

// heldAttempter holds its first Attempt until released: the sweeper is
// between recording a job's last miss (a write, which ends its claim) and
// its resend's transaction (the window list, the budget, the raw message).
type heldAttempter struct {
	svc         *pgRelay
	in, release chan struct{}
	once        sync.Once
}

func (h *heldAttempter) Attempt(ctx context.Context, r relay.AttemptRequest) (relay.Result, error) {
	h.once.Do(func() { close(h.in); <-h.release })
	return h.svc.Attempt(ctx, r)
}

// Two replicas' sweepers never both resend one ambiguous send. Replica A
// records the job's last miss and goes to resend it; meanwhile replica B's
// pass takes the job (due, its checks done) and resends it: Gmail delivers
// and answers 500, so the job is unknown again at attempt 2. A's resend,
// decided on attempt 1, is then refused. Without that fence it would go
// out too: two deliveries (emulator ground truth) of a message that had
// gone once.
func TestEmulatorTwoSweepersNeverResendOneJobTwice(t *testing.T) {
	s := newSite(t)
	ctx := context.Background()
	pol := quietPolicy()
	ch := pol.Channels[policy.DefaultChannel]
	ch.Checks = 1
	pol.Channels[policy.DefaultChannel] = ch
	svcs := [2]*pgRelay{s.replica(t, relay.Config{Provider: s.gm, Policy: pol}),
		s.replica(t, relay.Config{Provider: s.gm, Policy: pol})}
	fault := func(action string) {
		t.Helper()
		if _, err := s.emu.AddFault(gmailfake.Fault{Method: gmailfake.MethodSend, Action: action, Status: 500}); err != nil {
			t.Fatal(err)
		}
	}
	// The first attempt: Gmail answers 500 and stores nothing, so the
	// job is unknown and every search misses.
	fault(gmailfake.ActionError)
	p, err := relay.Prepare(relay.SendRequest{Key: "fence:1", To: relay.AddressList{"a@example.org"}, Subject: "s", Text: "b"},
		"", pol.MsgIDDomain, s.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	if res, _ := svcs[0].Send(ctx, p, relay.SendOptions{}); res.Job.State != gmailrelay.StateUnknown {
		t.Fatalf("first attempt left the job %s, want unknown", res.Job.State)
	}
	s.clock.Advance(ch.Grace + time.Second)

	held := &heldAttempter{svc: svcs[0], in: make(chan struct{}), release: make(chan struct{})}
	cfgA := svcs[0].sweeperConfig()
	cfgA.Attempter, cfgA.DisableWitness = held, true // the miss counts without a witness
	cfgB := svcs[1].sweeperConfig()
	cfgB.DisableWitness = true
	doneA := make(chan error, 1)
	go func() {
		_, err := sweeper.New(cfgA).RunOnce(ctx)
		doneA <- err
	}()
	<-held.in
	fault(gmailfake.ActionAcceptThenError) // B's resend: delivered, answered 500
	if _, err := sweeper.New(cfgB).RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	mid, err := svcs[1].log.Get(ctx, p.MessageID)
	if err != nil {
		t.Fatal(err)
	}
	if mid.State != gmailrelay.StateUnknown || mid.Attempts != 2 || s.emu.Deliveries(p.MessageID) != 1 {
		t.Fatalf("after B's resend: %s, %d attempts, %d deliveries; want unknown, 2, 1",
			mid.State, mid.Attempts, s.emu.Deliveries(p.MessageID))
	}
	close(held.release)
	if err := <-doneA; err != nil {
		t.Fatal(err)
	}
	if got := s.emu.Deliveries(p.MessageID); got != 1 {
		t.Errorf("deliveries = %d, want 1: A resent a job B had resent after A decided", got)
	}
	end, err := svcs[0].log.Get(ctx, p.MessageID)
	if err != nil {
		t.Fatal(err)
	}
	if end.Attempts != 2 {
		t.Errorf("attempts = %d, want 2 (A's stale resend makes none)", end.Attempts)
	}
}
