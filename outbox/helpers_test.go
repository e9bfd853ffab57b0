package outbox_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/acceptlog"
	"github.com/gmailrelay/gmailrelay/faultmodes"
	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/internal/testclock"
	"github.com/gmailrelay/gmailrelay/internal/testenv"
	"github.com/gmailrelay/gmailrelay/outbox"
	"github.com/gmailrelay/gmailrelay/policy"
	"github.com/gmailrelay/gmailrelay/relay"
)

const domain = "inbound.example.com"

// env is a relay and its outbox wired to the Gmail emulator (Gmail-like
// quota answers) through Google's real client, on an injected clock: the
// shared testenv harness with an outbox on top.
type env struct {
	te     *testenv.Env
	t      *testing.T
	clock  *testclock.Clock
	emu    *gmailfake.Server
	policy *policy.Policy
	faults *faultmodes.Set
	log    *acceptlog.Log
	svc    *relay.Service
	box    *outbox.Outbox
}

func newEnv(t *testing.T, perMinute, dailyLimit int) *env {
	t.Helper()
	pol := policy.Default()
	pol.Mailboxes = map[string]policy.Mailbox{policy.DefaultMailbox: {Name: policy.DefaultMailbox, DailySendLimit: dailyLimit}}
	return newEnvFrom(t, testenv.New(t, testenv.Options{Emulator: gmailfake.Options{QuotaPerMinute: perMinute}, Policy: pol, QuotaPerMinute: perMinute}))
}

// newEnvFrom puts an outbox on a harness the test set up itself.
func newEnvFrom(t *testing.T, te *testenv.Env) *env {
	t.Helper()
	e := &env{te: te, t: t, clock: te.Clock, emu: te.Emulator, policy: te.Policy, faults: te.Faults}
	e.build()
	return e
}

// build takes the harness's log and service and puts an outbox on them.
func (e *env) build() {
	e.t.Helper()
	e.log, e.svc = e.te.Log, e.te.Service
	var err error
	if e.box, err = outbox.New(outbox.Config{Log: e.log, Relay: e.svc, Now: e.clock.Now, Logger: zerolog.Nop()}); err != nil {
		e.t.Fatal(err)
	}
}

// restart closes the log and opens everything again on the same file.
func (e *env) restart() {
	e.t.Helper()
	e.te.Restart()
	e.build()
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

func (e *env) state(p relay.Prepared) gmailrelay.State {
	e.t.Helper()
	j, err := e.log.Get(context.Background(), p.MessageID)
	if err != nil {
		e.t.Fatal(err)
	}
	return j.State
}
