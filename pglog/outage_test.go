package pglog_test

import (
	"context"
	"errors"
	"testing"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/pglog/pgtest"
	"github.com/gmailrelay/gmailrelay/relay"
	"github.com/gmailrelay/gmailrelay/sweeper"
)

// cutAfterSend is Gmail with the database lost right after Gmail
// accepted a send, before the relay records its answer.
type cutAfterSend struct {
	relay.Provider
	proxy *pgtest.Proxy
	armed bool
}

func (c *cutAfterSend) Send(ctx context.Context, mailbox string, raw []byte, threadID string) (relay.SentMessage, error) {
	m, err := c.Provider.Send(ctx, mailbox, raw, threadID)
	if c.armed {
		c.proxy.Cut()
	}
	return m, err
}

func outageSend(t *testing.T, svc *pgRelay, s site, key string) (relay.Prepared, error) {
	t.Helper()
	p, err := relay.Prepare(relay.SendRequest{Key: key, To: relay.AddressList{"customer@example.org"}, Subject: "s", Text: "x"},
		"", "relay.example.com", s.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	_, err = svc.Send(context.Background(), p, relay.SendOptions{})
	return p, err
}

func wantLogUnavailable(t *testing.T, err error, what string) {
	t.Helper()
	var re *relay.Error
	if !errors.As(err, &re) || re.Code != relay.CodeUnavailable || re.RetryAfter <= 0 {
		t.Fatalf("%s: err = %v, want code unavailable with a Retry-After", what, err)
	}
}

// TestDatabaseLostAnswers503AndRecovers (emulator results): with the
// database lost (every connection cut, new ones closed), a send answers
// 503 unavailable with a Retry-After and reaches nobody, the log reports
// its writes refused, and the LogWatch's probes fail; once the database
// is back a probe succeeds, without a restart, and the caller's retries
// send each message once. A send whose answer from Gmail the lost
// database did not record is made unknown by the LogWatch, replayed to
// the caller's retry and found by the sweeper: one delivery.
func TestDatabaseLostAnswers503AndRecovers(t *testing.T) {
	ctx := context.Background()
	s := newSite(t)
	proxy, viaProxy := pgtest.NewProxy(t, s.url)
	gmail := &cutAfterSend{Provider: s.gm, proxy: proxy}
	o := replicaOptions(relay.Config{Provider: gmail, Policy: quietPolicy()})
	o.OpenLog = pgOpener(viaProxy, s.schema)
	svc := relayOf(s.env.Replica(o))
	watch := relay.NewLogWatch(svc.Service, 0)
	before, err := outageSend(t, svc, s, "k:before")
	if err != nil {
		t.Fatal(err)
	}

	proxy.Cut()
	lost, err := outageSend(t, svc, s, "k:lost")
	wantLogUnavailable(t, err, "send with the database lost")
	if err := gmailrelay.WritesRefused(svc.log); err == nil {
		t.Fatal("WritesRefused = nil with the database lost")
	}
	if c := watch.RunOnce(ctx); c.Refused == nil || !c.Probed {
		t.Fatalf("watch pass with the database lost = %+v, want a refused probe", c)
	}
	_, err = outageSend(t, svc, s, "k:lost")
	wantLogUnavailable(t, err, "the caller's retry with the database lost")
	if got := s.emu.Deliveries(lost.MessageID); got != 0 {
		t.Fatalf("emulator deliveries of a send answered 503 = %d, want 0", got)
	}

	proxy.Restore()
	if c := watch.RunOnce(ctx); c.Refused != nil {
		t.Fatalf("watch pass with the database back = %+v, want writes taken", c)
	}
	if _, err := outageSend(t, svc, s, "k:lost"); err != nil {
		t.Fatalf("the caller's retry with the database back: %v", err)
	}

	gmail.armed = true
	mid, err := outageSend(t, svc, s, "k:mid")
	gmail.armed = false
	wantLogUnavailable(t, err, "send whose answer the lost database did not record")
	proxy.Restore()
	if c := watch.RunOnce(ctx); c.Refused != nil || c.Settled != 1 {
		t.Fatalf("watch pass with the database back = %+v, want 1 attempt settled", c)
	}
	j, err := svc.log.Get(ctx, mid.MessageID)
	if err != nil || j.State != gmailrelay.StateUnknown || j.LastReason != gmailrelay.ReasonOutcomeNotLogged {
		t.Fatalf("job %s: %s (%s), %v; want unknown (outcome_not_logged)", mid.MessageID, j.State, j.LastReason, err)
	}
	if _, err := outageSend(t, svc, s, "k:mid"); err != nil {
		t.Fatalf("the caller's retry of the unknown job: %v", err)
	}
	s.clock.Advance(quietPolicy().Channels["default"].Grace + 1)
	if _, err := sweeper.New(svc.sweeperConfig()).RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{before.MessageID, lost.MessageID, mid.MessageID} {
		j, err := svc.log.Get(ctx, id)
		if err != nil || j.State != gmailrelay.StateSent {
			t.Errorf("job %s: %s, %v; want sent", id, j.State, err)
		}
		if got := s.emu.Deliveries(id); got != 1 {
			t.Errorf("emulator deliveries of %s = %d, want 1", id, got)
		}
	}
}
