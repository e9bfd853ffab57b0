package sweeper_test

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmailrelay/gmailrelay/acceptlog"
	"github.com/gmailrelay/gmailrelay/acceptlog/acceptlogtest"
	"github.com/gmailrelay/gmailrelay/gmailapi"
	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/internal/testclock"
	"github.com/gmailrelay/gmailrelay/relay"
	"github.com/gmailrelay/gmailrelay/sweeper"
)

// hostClock is the relay host's wall clock: Google's (real) plus an offset
// that Step moves, as NTP or a skewed VM does, without real time passing.
type hostClock struct {
	mu   sync.Mutex
	real *testclock.Clock
	off  time.Duration
}

func (c *hostClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.real.Now().Add(c.off)
}

// Step moves the host's wall clock by d (either sign); real time stays.
func (c *hostClock) Step(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.off += d
}

// skewEnv is a relay (log, Gmail client, service, sweeper) on host time
// and the Gmail emulator on real time (Google's clock).
type skewEnv struct {
	logs lockedBuffer // the relay's log output
	t    *testing.T
	ctx  context.Context
	real *testclock.Clock
	host *hostClock
	srv  *gmailfake.Server
	log  *acceptlog.Log
	svc  *relay.Service
	sw   *sweeper.Sweeper
	keys int
}

func newSkewEnv(t *testing.T, emu gmailfake.Options, offset time.Duration) *skewEnv {
	t.Helper()
	real := testclock.New()
	host := &hostClock{real: real, off: offset}
	emu.Now = real.Now
	srv, url := gmailfake.NewTestServer(t, emu)
	lg := acceptlogtest.OpenPath(t, filepath.Join(t.TempDir(), "accept.db"), acceptlog.Options{Now: host.Now})
	gm, err := gmailapi.New(context.Background(), gmailapi.Config{Endpoint: url, Now: host.Now})
	if err != nil {
		t.Fatal(err)
	}
	e := &skewEnv{t: t, ctx: context.Background(), real: real, host: host, srv: srv, log: lg}
	e.svc, err = relay.New(context.Background(), relay.Config{Log: lg, Provider: gm, Policy: testPolicy(), Now: host.Now,
		Logger: zerolog.New(&e.logs), SendTimeout: time.Minute, Quota: relay.NewQuota(1<<30, host.Now)})
	if err != nil {
		t.Fatal(err)
	}
	cfg := sweeper.ConfigFor(e.svc)
	cfg.Interval = time.Hour
	e.sw = sweeper.New(cfg)
	return e
}

// lockedBuffer is a bytes.Buffer safe for concurrent writers.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (e *skewEnv) send(channel string) (string, relay.Result) {
	e.t.Helper()
	e.keys++
	p, err := relay.Prepare(relay.SendRequest{Key: fmt.Sprintf("k%d", e.keys), Channel: channel, From: gmailfake.DefaultAccount,
		To: relay.AddressList{"customer@example.net"}, Subject: "s", Text: "t"}, "", "relay.test", e.host.Now())
	if err != nil {
		e.t.Fatal(err)
	}
	res, err := e.svc.Send(e.ctx, p, relay.SendOptions{})
	if err != nil {
		e.t.Fatalf("send: %v", err)
	}
	return p.MessageID, res
}

// sendAmbiguous sends a message Gmail stores and answers 500 to.
func (e *skewEnv) sendAmbiguous(channel string) string {
	e.t.Helper()
	if _, err := e.srv.AddFault(gmailfake.Fault{Method: gmailfake.MethodSend, Action: gmailfake.ActionAcceptThenError, Status: 500, Count: 1}); err != nil {
		e.t.Fatal(err)
	}
	id, res := e.send(channel)
	if res.Job.State != acceptlog.StateUnknown {
		e.t.Fatalf("state %s, want unknown", res.Job.State)
	}
	return id
}

func (e *skewEnv) sweep() {
	e.t.Helper()
	if _, err := e.sw.RunOnce(e.ctx); err != nil {
		e.t.Fatalf("RunOnce: %v", err)
	}
}

func (e *skewEnv) job(id string) acceptlog.Job {
	e.t.Helper()
	j, err := e.log.Get(e.ctx, id)
	if err != nil {
		e.t.Fatal(err)
	}
	return j
}

// TestEmulatorSkewedClockStillSeesARewrittenCopy: the window check before
// a resend lists the Sent messages Gmail dated in the attempt's window. A
// relay host clock a few seconds off Google's looked in the wrong window:
// the ambiguous send Gmail stored under a Message-ID of its own was not
// seen, the job was resent and Gmail delivered it twice, and the verify
// pass, searching by the relay's id, never noticed (emulator ground truth;
// before the fix 2 deliveries at ±5 s and ±30 s). The window is now placed
// on Gmail's clock, measured from the Date of its answers, and the pass
// warns once that the host's clock is off.
func TestEmulatorSkewedClockStillSeesARewrittenCopy(t *testing.T) {
	for _, off := range []time.Duration{0, 5 * time.Second, -5 * time.Second, 30 * time.Second, -30 * time.Second} {
		t.Run(fmt.Sprintf("host-google=%s", off), func(t *testing.T) {
			e := newSkewEnv(t, gmailfake.Options{}, off)
			e.srv.SetRewrite(gmailfake.RewritePolicy{Mode: gmailfake.RewriteAlways})
			id := e.sendAmbiguous(retryChannel)
			e.srv.SetRewrite(gmailfake.RewritePolicy{})
			e.real.Advance(10 * time.Second)
			e.send(retryChannel) // a later confirmed send: the witness
			for range 4 {
				e.real.Advance(grace)
				e.sweep()
			}
			if d := e.srv.Deliveries(id); d != 1 {
				t.Errorf("emulator result: %d deliveries of %s, want 1 (job %s, %s)", d, id, e.job(id).State, e.job(id).LastReason)
			}
			if j := e.job(id); j.State != acceptlog.StateReview {
				t.Errorf("job %s, want review (a Gmail-made id in the attempt's window)", j.State)
			}
			warned, want := strings.Count(e.logs.String(), "clock is off Gmail's"), 1
			if off == 0 {
				want = 0
			}
			if warned != want {
				t.Errorf("%d warnings that the clock is off Gmail's, want %d", warned, want)
			}
		})
	}
}
