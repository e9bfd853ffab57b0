package outbox_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmailrelay/gmailrelay/acceptlog"
	"github.com/gmailrelay/gmailrelay/acceptlog/acceptlogtest"
	"github.com/gmailrelay/gmailrelay/faultmodes"
	"github.com/gmailrelay/gmailrelay/gmailapi"
	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/internal/testclock"
	"github.com/gmailrelay/gmailrelay/outbox"
	"github.com/gmailrelay/gmailrelay/policy"
	"github.com/gmailrelay/gmailrelay/relay"
)

const domain = "inbound.example.com"

// env is a relay and its outbox wired to the Gmail emulator (Gmail-like
// quota answers) through Google's real client, on an injected clock.
type env struct {
	t      *testing.T
	clock  *testclock.Clock
	emu    *gmailfake.Server
	url    string
	path   string
	policy *policy.Policy
	faults *faultmodes.Set
	perMin int
	log    *acceptlog.Log
	svc    *relay.Service
	box    *outbox.Outbox
}

func newEnv(t *testing.T, perMinute, dailyLimit int) *env {
	t.Helper()
	e := &env{t: t, clock: testclock.New(), path: filepath.Join(t.TempDir(), "accept.db"), perMin: perMinute}
	e.emu, e.url = gmailfake.NewTestServer(t, gmailfake.Options{Now: e.clock.Now, QuotaPerMinute: perMinute})
	e.policy = policy.Default()
	e.policy.Mailboxes = map[string]policy.Mailbox{policy.DefaultMailbox: {Name: policy.DefaultMailbox, DailySendLimit: dailyLimit}}
	e.faults = faultmodes.New(faultmodes.Options{Seed: 1, Now: e.clock.Now})
	e.open()
	return e
}

// open (re)opens the log, the service and the outbox: a restart.
func (e *env) open() {
	e.t.Helper()
	ctx := context.Background()
	e.log = acceptlogtest.OpenPath(e.t, e.path, acceptlog.Options{Now: e.clock.Now})
	gm, err := gmailapi.New(ctx, gmailapi.Config{Endpoint: e.url})
	if err != nil {
		e.t.Fatal(err)
	}
	e.svc, err = relay.New(ctx, relay.Config{Log: e.log, Provider: gm, Policy: e.policy, Faults: e.faults,
		Now: e.clock.Now, Logger: zerolog.Nop(), SendTimeout: 5 * time.Second, Quota: relay.NewQuota(e.perMin, e.clock.Now)})
	if err != nil {
		e.t.Fatal(err)
	}
	e.box, err = outbox.New(outbox.Config{Service: e.svc, Logger: zerolog.Nop()})
	if err != nil {
		e.t.Fatal(err)
	}
}

// restart closes the log and opens everything again on the same file.
func (e *env) restart() {
	e.t.Helper()
	if err := e.log.Close(); err != nil {
		e.t.Fatal(err)
	}
	e.open()
}

func (e *env) prepare(i int) relay.Prepared {
	e.t.Helper()
	p, err := relay.Prepare(relay.SendRequest{Key: fmt.Sprintf("burst:%d", i), To: relay.AddressList{"customer@example.org"},
		Subject: "Your order", Text: fmt.Sprintf("order %d", i)}, "", domain, e.clock.Now())
	if err != nil {
		e.t.Fatal(err)
	}
	return p
}

// send sends job i, queueing when busy.
func (e *env) send(i int) relay.Result {
	e.t.Helper()
	res, err := e.svc.Send(context.Background(), e.prepare(i), relay.SendOptions{Queue: true})
	if err != nil {
		e.t.Fatalf("send %d: %v", i, err)
	}
	return res
}

// drain runs outbox passes, advancing the clock to each pass's Next, until
// the queue is empty or limit of emulated time has passed. each, when set,
// runs after every pass. It returns the emulated time spent.
func (e *env) drain(limit time.Duration, each func()) time.Duration {
	e.t.Helper()
	start := e.clock.Now()
	for {
		res, err := e.box.RunOnce(context.Background())
		if err != nil {
			e.t.Fatal(err)
		}
		if each != nil {
			each()
		}
		if res.Left == 0 {
			return e.clock.Now().Sub(start)
		}
		if e.clock.Now().Sub(start) > limit {
			e.t.Fatalf("queue still holds %d jobs after %s of emulated time", res.Left, limit)
		}
		e.clock.Advance(max(res.Next, time.Millisecond))
	}
}

func (e *env) state(p relay.Prepared) acceptlog.State {
	e.t.Helper()
	j, err := e.log.Get(context.Background(), p.MessageID)
	if err != nil {
		e.t.Fatal(err)
	}
	return j.State
}
