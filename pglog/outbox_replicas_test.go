package pglog_test

import (
	"bytes"
	"context"
	"fmt"
	"net/mail"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/internal/testclock"
	"github.com/gmailrelay/gmailrelay/outbox"
	"github.com/gmailrelay/gmailrelay/policy"
	"github.com/gmailrelay/gmailrelay/relay"
)

// sendOrder is a Gmail client that records the Message-IDs it is handed,
// in order, shared by the replicas; a replica's view (gate) may hold its
// next send until the test lets it go.
type sendOrder struct {
	relay.Provider
	mu  sync.Mutex
	ids []string
}

func (s *sendOrder) record(raw []byte) {
	id := ""
	if m, err := mail.ReadMessage(bytes.NewReader(raw)); err == nil {
		id = m.Header.Get("Message-ID")
	}
	s.mu.Lock()
	s.ids = append(s.ids, id)
	s.mu.Unlock()
}

func (s *sendOrder) Sent() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.ids)
}

// gate is one replica's view of a sendOrder: while hold is set, its next
// send is recorded, then reported on entered and held until release.
type gate struct {
	*sendOrder
	hold     bool
	entered  chan struct{}
	released chan struct{}
}

func (g *gate) Send(ctx context.Context, mailbox string, raw []byte, threadID string) (relay.SentMessage, error) {
	g.record(raw)
	if g.hold {
		g.hold = false
		close(g.entered)
		<-g.released
	}
	return g.Provider.Send(ctx, mailbox, raw, threadID)
}

// replica is one relay on the shared log, with its outbox.
func replica(t *testing.T, s site, p relay.Provider, pol *policy.Policy) (*pgRelay, *outbox.Outbox) {
	t.Helper()
	svc := s.replica(t, relay.Config{Provider: p, Policy: pol})
	ob, err := outbox.New(outbox.Config{Log: svc.log, Relay: svc, Now: svc.now, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	return svc, ob
}

// queueSend sends a new message through svc that is queued (its send_at
// ahead, or its mailbox's queue not empty) and returns its Message-ID.
func queueSend(t *testing.T, svc *pgRelay, clock *testclock.Clock, key, mailbox string, sendAt time.Time) string {
	t.Helper()
	p, err := relay.Prepare(relay.SendRequest{Key: key, Mailbox: mailbox, To: relay.AddressList{"a@example.org"},
		Subject: "s", Text: key}, "", "order.example", clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	p.SendAt = sendAt
	r, err := svc.Send(context.Background(), p, relay.SendOptions{Queue: true})
	if err != nil || r.Job.State != gmailrelay.StateQueued {
		t.Fatalf("send %s: %s, %v; want queued", key, r.Job.State, err)
	}
	return p.MessageID
}

// The outbox's order is per mailbox, send_at then acceptance order
// (docs/design.md#the-outbox), with several replicas on one database too.
// Replica A's pass is delivering the mailbox's head job (its Gmail call
// held) when a send through B is queued behind the two jobs left: B's pass
// must not deliver it (were A's pass to claim only the jobs queued when it
// started, B's pass would deliver the new one first, reporting nothing
// left), and Gmail gets the four in acceptance order.
func TestOutboxKeepsMailboxOrderAcrossReplicas(t *testing.T) {
	s := newSite(t)
	ctx := context.Background()
	sent := &sendOrder{Provider: s.gm}
	ga := &gate{sendOrder: sent, entered: make(chan struct{}), released: make(chan struct{})}
	pol := policy.Default()
	pol.MsgIDDomain = "order.example"
	pol.VerifyHandle = policy.VerifyNever
	a, oa := replica(t, s, ga, pol)
	b, ob := replica(t, s, &gate{sendOrder: sent}, pol)
	var ids []string
	for i := 1; i <= 3; i++ {
		ids = append(ids, queueSend(t, a, s.clock, fmt.Sprintf("order:%d", i), "", s.clock.Now().Add(time.Minute)))
		s.clock.Advance(time.Millisecond)
	}
	s.clock.Advance(2 * time.Minute)
	ga.hold = true
	passA := make(chan outbox.Result, 1)
	go func() {
		res, err := oa.RunOnce(ctx)
		if err != nil {
			t.Error(err)
		}
		passA <- res
	}()
	<-ga.entered // A is sending job 1; jobs 2 and 3 wait behind it
	ids = append(ids, queueSend(t, b, s.clock, "order:4", "", time.Time{}))
	res, err := ob.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Delivered != 0 || res.Left != 3 || res.Next <= 0 {
		t.Errorf("B's pass while A's delivers the mailbox: %d delivered, %d left, next in %s; want 0, 3 (jobs 2..4 queued), a look again soon",
			res.Delivered, res.Left, res.Next)
	}
	close(ga.released)
	<-passA
	for range 5 {
		ra, err := oa.RunOnce(ctx)
		if err != nil {
			t.Fatal(err)
		}
		rb, err := ob.RunOnce(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if ra.Left == 0 && rb.Left == 0 {
			break
		}
	}
	if got := sent.Sent(); !slices.Equal(got, ids) {
		t.Errorf("Gmail got\n  %v\nwant the mailbox's acceptance order\n  %v", got, ids)
	}
	for i, id := range ids {
		if j, err := a.log.Get(ctx, id); err != nil || j.State != gmailrelay.StateSent {
			t.Errorf("job %d: %s, %v; want sent", i+1, j.State, err)
		}
	}
}

// A replica whose policy lacks a mailbox (a rolling change of the policy)
// never holds that mailbox's queue: its passes leave the job to a replica
// that has the mailbox, and count it as left. Were A's passes to claim the
// job, they would renew the claim on every pass, and B never deliver it.
func TestOutboxMailboxNotServedIsLeftToAnotherReplica(t *testing.T) {
	ctx := context.Background()
	const billing = "billing@order.example"
	s := siteWith(t, gmailfake.Options{Account: "default@order.example", Accounts: []string{billing}})
	clock, emu, gm := s.clock, s.emu, s.gm
	polA := policy.Default()
	polA.MsgIDDomain = "order.example"
	polA.VerifyHandle = policy.VerifyNever
	polB := *polA
	polB.Mailboxes = map[string]policy.Mailbox{
		policy.DefaultMailbox: {Name: policy.DefaultMailbox},
		"billing":             {Name: "billing", Address: billing},
	}
	_, oa := replica(t, s, gm, polA)
	b, ob := replica(t, s, gm, &polB)
	id := queueSend(t, b, clock, "billing:1", "billing", clock.Now().Add(time.Minute))
	clock.Advance(2 * time.Minute)
	for round := range 3 {
		ra, err := oa.RunOnce(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if round == 0 && (ra.Delivered != 0 || ra.Left != 1) {
			t.Errorf("A's pass (no billing mailbox): %d delivered, %d left; want 0 and 1", ra.Delivered, ra.Left)
		}
		if _, err := ob.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Second)
	}
	j, err := b.log.Get(ctx, id)
	if err != nil || j.State != gmailrelay.StateSent || emu.Deliveries(id) != 1 {
		t.Errorf("billing job after three rounds of passes on A then B: %s, %d deliveries, %v; want sent once by B", j.State, emu.Deliveries(id), err)
	}
}
