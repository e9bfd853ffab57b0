package relay_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/acceptlog"
	"github.com/gmailrelay/gmailrelay/faultmodes"
	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/internal/testclock"
	"github.com/gmailrelay/gmailrelay/internal/testenv"
	"github.com/gmailrelay/gmailrelay/policy"
	"github.com/gmailrelay/gmailrelay/relay"
)

const svcDomain = "inbound.example.com"

// env is a relay wired to the Gmail emulator through Google's real client
// (the shared testenv harness, under the names these tests use).
type env struct {
	te     *testenv.Env
	t      *testing.T
	clock  *testclock.Clock
	emu    *gmailfake.Server
	emuURL string
	log    *acceptlog.Log
	svc    *relay.Service
	faults *faultmodes.Set
	policy *policy.Policy
}

func newEnv(t *testing.T, opts gmailfake.Options) *env {
	t.Helper()
	te := testenv.New(t, testenv.Options{Emulator: opts, SendTimeout: 2 * time.Second})
	e := &env{te: te, t: t, clock: te.Clock, emu: te.Emulator, emuURL: te.EmulatorURL, faults: te.Faults, policy: te.Policy}
	e.log, e.svc = te.Log, te.Service
	return e
}

// open (re)opens the log and the service against endpoint.
func (e *env) open(endpoint string) {
	e.t.Helper()
	e.te.Open(endpoint)
	e.log, e.svc = e.te.Log, e.te.Service
}

// budget is the default mailbox's daily sending budget.
func (e *env) budget() *relay.Budget {
	e.t.Helper()
	m, err := e.svc.MailboxOf(policy.DefaultMailbox)
	if err != nil {
		e.t.Fatal(err)
	}
	return m.Budget()
}

func (e *env) prepare(key, text string) relay.Prepared {
	e.t.Helper()
	p, err := relay.Prepare(relay.SendRequest{Key: key, To: relay.AddressList{"customer@example.org"},
		Subject: "Your order", Text: text}, "", svcDomain, e.clock.Now())
	if err != nil {
		e.t.Fatal(err)
	}
	return p
}

// inReview sends a billing message through a fault that accepts the
// message and then answers 500, so the job ends in review (billing never
// retries an unknown outcome); it returns the prepared message.
func (e *env) inReview(ctx context.Context, key string) relay.Prepared {
	e.t.Helper()
	if _, err := e.emu.AddFault(gmailfake.Fault{Method: "send", Action: "accept-then-error", Status: 500}); err != nil {
		e.t.Fatal(err)
	}
	p := e.prepare(key, "x")
	p.Channel = "billing"
	if _, err := e.svc.Send(ctx, p, relay.SendOptions{}); err != nil {
		e.t.Fatal(err)
	}
	return p
}

// together runs f(0) … f(n-1) each in its own goroutine, released by one
// signal so that they overlap, and returns when all have returned.
func together(n int, f func(i int)) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			f(i)
		})
	}
	close(start)
	wg.Wait()
}

func (e *env) lines(id string) []gmailrelay.Line { return e.te.Lines(id) }

func count(lines []gmailrelay.Line, k gmailrelay.Kind) int { return testenv.Count(lines, k) }

// wantOne checks that the emulator delivered Message-ID id exactly once and
// that the job has exactly one line of kind k.
func (e *env) wantOne(t *testing.T, id string, k gmailrelay.Kind) {
	t.Helper()
	if got := e.emu.Deliveries(id); got != 1 {
		t.Errorf("emulator has %d deliveries of %s, want 1", got, id)
	}
	if got := count(e.lines(id), k); got != 1 {
		t.Errorf("%s lines = %d, want 1", k, got)
	}
}

func TestEmulatorSendThenResendSameKeyReplays(t *testing.T) {
	e := newEnv(t, gmailfake.Options{})
	ctx := context.Background()
	p := e.prepare("cus_1:order.shipped:ord_1", "hello")
	first, err := e.svc.Send(ctx, p, relay.SendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if first.Job.State != gmailrelay.StateSent || first.Replayed {
		t.Fatalf("first send: state %s replayed %v, want sent, not replayed", first.Job.State, first.Replayed)
	}
	second, err := e.svc.Send(ctx, e.prepare("cus_1:order.shipped:ord_1", "hello"), relay.SendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !second.Replayed || second.Job.GmailID != first.Job.GmailID {
		t.Errorf("second send: replayed %v gmail id %q, want replayed with %q", second.Replayed, second.Job.GmailID, first.Job.GmailID)
	}
	e.wantOne(t, p.MessageID, gmailrelay.KindEffect)
}

func TestEmulatorSameKeyDifferentContentIsMismatch(t *testing.T) {
	e := newEnv(t, gmailfake.Options{})
	ctx := context.Background()
	if _, err := e.svc.Send(ctx, e.prepare("k1", "one"), relay.SendOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err := e.svc.Send(ctx, e.prepare("k1", "two"), relay.SendOptions{})
	if got := relay.ErrorCode(err); got != relay.CodeMismatch {
		t.Fatalf("error code = %s (%v), want %s", got, err, relay.CodeMismatch)
	}
	if got := e.emu.Deliveries(relay.MessageID("k1", svcDomain)); got != 1 {
		t.Errorf("emulator has %d deliveries, want 1", got)
	}
}

func TestEmulatorConcurrentIdenticalSendsForwardOnce(t *testing.T) {
	e := newEnv(t, gmailfake.Options{})
	// Provider latency keeps the first send in flight while the others arrive.
	if _, err := e.emu.AddFault(gmailfake.Fault{Method: "send", Action: "latency", Latency: 300 * time.Millisecond, Count: -1}); err != nil {
		t.Fatal(err)
	}
	p := e.prepare("race-key", "body")
	var mu sync.Mutex
	outcomes := map[string]int{}
	together(20, func(int) {
		res, err := e.svc.Send(context.Background(), p, relay.SendOptions{})
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err != nil:
			outcomes[string(relay.ErrorCode(err))]++
		case res.Replayed:
			outcomes["replayed"]++
		default:
			outcomes[string(res.Job.State)]++
		}
	})
	if outcomes["sent"] != 1 || outcomes["sent"]+outcomes["replayed"]+outcomes[string(relay.CodeInFlight)] != 20 {
		t.Errorf("outcomes = %v, want exactly one sent and the rest in_flight or replayed", outcomes)
	}
	e.wantOne(t, p.MessageID, gmailrelay.KindForwarding)
}

// TestEmulatorClassificationRows drives each row of the outcome table with
// an emulator fault and checks the job's state, the log and the emulator.
func TestEmulatorClassificationRows(t *testing.T) {
	tests := []struct {
		name      string
		fault     gmailfake.Fault
		state     gmailrelay.State
		retryable bool
		delivered int
	}{
		{"accept-then-error 500 is unknown", gmailfake.Fault{Method: "send", Action: "accept-then-error", Status: 500}, gmailrelay.StateUnknown, false, 1},
		{"500 is unknown", gmailfake.Fault{Method: "send", Action: "error", Status: 500}, gmailrelay.StateUnknown, false, 0},
		{"503 is unknown", gmailfake.Fault{Method: "send", Action: "error", Status: 503}, gmailrelay.StateUnknown, false, 0},
		{"429 is failed retryable", gmailfake.Fault{Method: "send", Action: "error", Status: 429}, gmailrelay.StateFailed, true, 0},
		{"403 rate is failed retryable", gmailfake.Fault{Method: "send", Action: "error", Status: 403}, gmailrelay.StateFailed, true, 0},
		{"400 is failed for good", gmailfake.Fault{Method: "send", Action: "error", Status: 400}, gmailrelay.StateFailed, false, 0},
		{"401 is failed for good", gmailfake.Fault{Method: "send", Action: "error", Status: 401}, gmailrelay.StateFailed, false, 0},
		{"timeout after write is unknown", gmailfake.Fault{Method: "send", Action: "latency", Latency: 3 * time.Second}, gmailrelay.StateUnknown, false, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, gmailfake.Options{})
			if _, err := e.emu.AddFault(tt.fault); err != nil {
				t.Fatal(err)
			}
			p := e.prepare("row:"+tt.name, "x")
			res, err := e.svc.Send(context.Background(), p, relay.SendOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if res.Job.State != tt.state || res.Job.Retryable != tt.retryable {
				t.Errorf("job %s retryable=%v, want %s retryable=%v", res.Job.State, res.Job.Retryable, tt.state, tt.retryable)
			}
			if got := e.emu.Deliveries(p.MessageID); got != tt.delivered {
				t.Errorf("emulator has %d deliveries, want %d", got, tt.delivered)
			}
			if got := gmailrelay.Fold(e.lines(p.MessageID)); got != tt.state {
				t.Errorf("fold of lines = %s, want %s", got, tt.state)
			}
		})
	}
}

func TestConnectionRefusedIsFailedRetryable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there now
	e := newEnv(t, gmailfake.Options{})
	e.log.Close()
	e.open(dead)
	p := e.prepare("refused", "x")
	res, err := e.svc.Send(context.Background(), p, relay.SendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Job.State != gmailrelay.StateFailed || !res.Job.Retryable || res.Job.LastReason != "not_reached" {
		t.Errorf("job %s retryable=%v reason=%q, want failed retryable not_reached", res.Job.State, res.Job.Retryable, res.Job.LastReason)
	}
	// The caller's retry, with Gmail back, sends exactly once.
	e.log.Close()
	e.open(e.emuURL)
	res, err = e.svc.Send(context.Background(), p, relay.SendOptions{})
	if err != nil || res.Job.State != gmailrelay.StateSent {
		t.Fatalf("retry: %v %v, want sent", res.Job.State, err)
	}
	if got := e.emu.Deliveries(p.MessageID); got != 1 {
		t.Errorf("emulator has %d deliveries, want 1", got)
	}
	if res.Job.Attempts != 2 {
		t.Errorf("attempts = %d, want 2", res.Job.Attempts)
	}
}

func TestEmulatorFailBeforeForwardThenRetryGivesOneEffect(t *testing.T) {
	e := newEnv(t, gmailfake.Options{})
	one := 1
	if _, err := e.faults.Add(faultmodes.Spec{Mode: faultmodes.FailBeforeForward, Count: &one}); err != nil {
		t.Fatal(err)
	}
	p := e.prepare("fbf", "x")
	res, err := e.svc.Send(context.Background(), p, relay.SendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Job.State != gmailrelay.StateFailed || !res.Job.Retryable || e.emu.Deliveries(p.MessageID) != 0 {
		t.Fatalf("after fault: %s retryable=%v, emulator %d deliveries; want failed retryable, 0", res.Job.State, res.Job.Retryable, e.emu.Deliveries(p.MessageID))
	}
	res, err = e.svc.Send(context.Background(), p, relay.SendOptions{})
	if err != nil || res.Job.State != gmailrelay.StateSent {
		t.Fatalf("retry: %v %v", res.Job.State, err)
	}
	lines := e.lines(p.MessageID)
	if got := count(lines, gmailrelay.KindEffect); got != 1 {
		t.Errorf("effect lines = %d, want 1", got)
	}
	if got := count(lines, gmailrelay.KindFault); got != 1 {
		t.Errorf("fault lines = %d, want 1", got)
	}
	if got := e.emu.Deliveries(p.MessageID); got != 1 {
		t.Errorf("emulator has %d deliveries, want 1", got)
	}
}

func TestEmulatorDropResponseLeavesUnknownAndRetryDoesNotForward(t *testing.T) {
	e := newEnv(t, gmailfake.Options{})
	if _, err := e.faults.Add(faultmodes.Spec{Mode: faultmodes.ForwardThenDropResponse}); err != nil {
		t.Fatal(err)
	}
	p := e.prepare("drop", "x")
	res, err := e.svc.Send(context.Background(), p, relay.SendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Dropped || res.Job.State != gmailrelay.StateUnknown {
		t.Fatalf("dropped=%v state=%s, want dropped unknown", res.Dropped, res.Job.State)
	}
	res, err = e.svc.Send(context.Background(), p, relay.SendOptions{})
	if err != nil || !res.Replayed || res.Job.State != gmailrelay.StateUnknown {
		t.Fatalf("retry: replayed=%v state=%s err=%v, want a replay of unknown", res.Replayed, res.Job.State, err)
	}
	e.wantOne(t, p.MessageID, gmailrelay.KindForwarding)
}

func TestRestartTurnsForwardingIntoUnknown(t *testing.T) {
	e := newEnv(t, gmailfake.Options{})
	ctx := context.Background()
	id := relay.MessageID("crashed", svcDomain)
	// A crash between "logged forwarding" and the outcome: write it, close.
	_, _, err := e.log.Mutate(ctx, id, func(cur *gmailrelay.Job) (gmailrelay.Change, error) {
		j := gmailrelay.Job{MessageID: id, Key: "crashed", Channel: "default", Mailbox: "me", State: gmailrelay.StateForwarding, Attempts: 1}
		return gmailrelay.Change{Job: &j, Raw: []byte("To: a@example.org\r\nMessage-ID: " + id + "\r\n\r\nx"), Lines: []gmailrelay.Line{
			{Kind: gmailrelay.KindReceived, Attempt: 1},
			{Kind: gmailrelay.KindForwarding, Attempt: 1, State: gmailrelay.StateForwarding},
		}}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	e.log.Close()
	e.open(e.emuURL)
	j, err := e.log.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if j.State != gmailrelay.StateUnknown || j.NextCheckAt.IsZero() {
		t.Errorf("state %s next check %v, want unknown with a check scheduled", j.State, j.NextCheckAt)
	}
	lines := e.lines(id)
	last := lines[len(lines)-1]
	if last.Kind != gmailrelay.KindAmbiguous || last.Reason != "recovered_after_restart" {
		t.Errorf("last line %s %q, want ambiguous recovered_after_restart", last.Kind, last.Reason)
	}
}

func TestUnknownChannelIsInvalid(t *testing.T) {
	e := newEnv(t, gmailfake.Options{})
	p := e.prepare("chan", "x")
	p.Channel = "nope"
	_, err := e.svc.Send(context.Background(), p, relay.SendOptions{})
	var re *relay.Error
	if !errors.As(err, &re) || re.Code != relay.CodeInvalid || re.Field != "channel" {
		t.Fatalf("err = %v, want invalid_argument on channel", err)
	}
}

func TestEmulatorResolveReview(t *testing.T) {
	e := newEnv(t, gmailfake.Options{})
	ctx := context.Background()
	p := e.inReview(ctx, "resolve-me")
	if _, err := e.svc.Resolve(ctx, relay.ResolveRequest{ID: p.MessageID, Action: "frobnicate", Actor: "op", Seen: relay.AnyAttempts}); relay.ErrorCode(err) != relay.CodeInvalid {
		t.Errorf("bad action: %v, want invalid_argument", err)
	}
	res, err := e.svc.Resolve(ctx, relay.ResolveRequest{ID: p.MessageID, Action: relay.ActionMarkSent, Note: "found it in Sent", Actor: "op", Seen: relay.AnyAttempts})
	if err != nil || res.Job.State != gmailrelay.StateSent || res.Job.Effects != 1 {
		t.Fatalf("mark-sent: %+v %v", res.Job, err)
	}
	if _, err := e.svc.Resolve(ctx, relay.ResolveRequest{ID: p.MessageID, Action: relay.ActionAbandon, Actor: "op", Seen: relay.AnyAttempts}); relay.ErrorCode(err) != relay.CodeConflict {
		t.Errorf("resolving a sent job: %v, want conflict", err)
	}
	if got := e.emu.Deliveries(p.MessageID); got != 1 {
		t.Errorf("emulator has %d deliveries, want 1", got)
	}
}
