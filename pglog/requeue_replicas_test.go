package pglog_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/internal/testenv"
	"github.com/gmailrelay/gmailrelay/outbox"
	"github.com/gmailrelay/gmailrelay/relay"
)

// While Gmail cannot be reached, a mailbox's deliveries wait behind the
// job that did not reach it on every replica, as on one: two replicas on
// one database, six queued jobs, Gmail down for 10 s with both outboxes
// passing every second make the calls one replica makes (5 s, then 10 s
// backoff: 2), not one per job and replica. Were each replica's claims to
// hold a different head, every job would be tried (11 calls), each
// attempt counting against the daily budget. Once Gmail is back, all six are
// delivered once.
func TestEmulatorGmailUnreachableHoldsTheMailboxOnEveryReplica(t *testing.T) {
	s := newSite(t)
	ctx := context.Background()
	prov := &testenv.Unreachable{Provider: s.gm}
	pol := quietPolicy()
	var svcs []*pgRelay
	var boxes []*outbox.Outbox
	for range 2 {
		svc, ob := replica(t, s, prov, pol)
		svcs, boxes = append(svcs, svc), append(boxes, ob)
	}
	pass := func() {
		t.Helper()
		for _, ob := range boxes {
			if _, err := ob.RunOnce(ctx); err != nil {
				t.Fatal(err)
			}
		}
		s.clock.Advance(time.Second)
	}
	var ids []string
	for i := range 6 {
		p, err := relay.Prepare(relay.SendRequest{Key: fmt.Sprintf("down:%d", i), To: relay.AddressList{"a@example.org"},
			Subject: "s", Text: "b"}, "", pol.MsgIDDomain, s.clock.Now())
		if err != nil {
			t.Fatal(err)
		}
		p.SendAt = s.clock.Now().Add(time.Minute)
		if _, err := svcs[0].Send(ctx, p, relay.SendOptions{Queue: true}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, p.MessageID)
		s.clock.Advance(time.Millisecond)
	}
	prov.Down.Store(true)
	s.clock.Advance(time.Minute)
	for range 10 {
		pass()
	}
	if n := prov.Calls.Load(); n > 2 {
		t.Errorf("%d send calls to an unreachable Gmail in 10 s over two replicas; want at most 2 (the head job, 5 s backoff)", n)
	}
	prov.Down.Store(false)
	for range 120 {
		pass()
	}
	for _, id := range ids {
		j, err := svcs[0].log.Get(ctx, id)
		if err != nil || j.State != gmailrelay.StateSent || s.emu.Deliveries(id) != 1 {
			t.Errorf("%s: %s, %d deliveries, %v; want sent once", id, j.State, s.emu.Deliveries(id), err)
		}
	}
}
