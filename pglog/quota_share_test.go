package pglog_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/policy"
	"github.com/gmailrelay/gmailrelay/relay"
	"github.com/gmailrelay/gmailrelay/sweeper"
)

// The quota is shared between replicas
// (docs/design.md#several-relays-on-one-postgresql). Two
// replicas of a mailbox with quota_per_minute 1000 (ten sends), Gmail's
// own budget 1000 too, the clock stopped: sending through both until both
// refuse, they take 1000 units together, and Gmail never answers a rate
// limit. With a bucket of 1000 each, the replicas would take 2000 units,
// and Gmail would refuse what went beyond its budget. Once one replica's log is
// closed, the other's next sweeper pass gives it the whole budget: a
// minute later it makes ten sends alone.
func TestEmulatorQuotaPerMinuteIsSharedByReplicas(t *testing.T) {
	const perMinute = 1000
	ctx := context.Background()
	s := siteWith(t, gmailfake.Options{QuotaPerMinute: perMinute})
	clock, emu, gm := s.clock, s.emu, s.gm
	pol := policy.Default()
	pol.VerifyHandle = policy.VerifyNever
	pol.Mailboxes = map[string]policy.Mailbox{policy.DefaultMailbox: {Name: policy.DefaultMailbox, QuotaPerMinute: perMinute}}
	type replica struct {
		svc *pgRelay
		sw  *sweeper.Sweeper
	}
	var rs [2]replica
	for i := range rs {
		o := replicaOptions(relay.Config{Provider: gm, Policy: pol})
		o.QuotaPerMinute = -1 // the policy's, shared
		svc := relayOf(s.env.Replica(o))
		rs[i] = replica{svc, sweeper.New(svc.sweeperConfig())}
	}
	pass := func(r replica) {
		t.Helper()
		if _, err := r.sw.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
	}
	n := 0
	send := func(svc *pgRelay) bool {
		t.Helper()
		n++
		p, err := relay.Prepare(relay.SendRequest{Key: fmt.Sprintf("share:%d", n), To: relay.AddressList{"a@example.org"},
			Subject: "s", Text: "b"}, "", pol.MsgIDDomain, clock.Now())
		if err != nil {
			t.Fatal(err)
		}
		r, err := svc.Send(ctx, p, relay.SendOptions{})
		var re *relay.Error
		if errors.As(err, &re) && re.Code == relay.CodeRateLimited {
			return false
		}
		if err != nil {
			t.Fatalf("send %d: %v; want sent or refused for quota", n, err)
		}
		// Not sent: Gmail refused it (the relay took more than its quota).
		return r.Job.State == gmailrelay.StateSent
	}
	// Sends through both, alternately, until neither sends.
	drain := func(rs ...replica) (sent int) {
		t.Helper()
		open := len(rs)
		done := make([]bool, len(rs))
		for open > 0 && sent < 100 {
			for i, r := range rs {
				if done[i] {
					continue
				}
				if send(r.svc) {
					sent++
				} else {
					done[i] = true
					open--
				}
			}
		}
		return sent
	}
	for _, r := range rs {
		pass(r) // as the replicas' sweepers do every few seconds
	}
	if got, want := drain(rs[0], rs[1])*relay.UnitsSend, perMinute; got != want {
		t.Errorf("two replicas sent %d units at once, want %d (quota_per_minute, shared)", got, want)
	}
	if st := emu.Stats(); st.RateLimited != 0 {
		t.Fatalf("Gmail answered %d rate limits, want 0 (the replicas together took more than quota_per_minute)", st.RateLimited)
	}

	if err := rs[1].svc.log.Close(); err != nil {
		t.Fatal(err)
	}
	pass(rs[0])
	clock.Advance(time.Minute)
	if got, want := drain(rs[0])*relay.UnitsSend, perMinute; got != want {
		t.Errorf("the replica left alone sent %d units a minute later, want %d (all of quota_per_minute)", got, want)
	}
	if st := emu.Stats(); st.RateLimited != 0 {
		t.Errorf("Gmail answered %d rate limits, want 0", st.RateLimited)
	}
}
