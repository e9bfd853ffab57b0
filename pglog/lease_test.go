package pglog_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/api"
	"github.com/gmailrelay/gmailrelay/internal/testclock"
	"github.com/gmailrelay/gmailrelay/internal/testenv"
	"github.com/gmailrelay/gmailrelay/policy"
	"github.com/gmailrelay/gmailrelay/relay"
	"github.com/gmailrelay/gmailrelay/sweeper"
)

// answer is what a Send returned.
type answer struct {
	res relay.Result
	err error
}

// sendInFlight starts svc.Send(p) and returns once stuck holds its Gmail
// call in flight; the Send's answer comes on the channel when stuck is
// released.
func sendInFlight(ctx context.Context, svc *pgRelay, p relay.Prepared, stuck *stuckProvider) <-chan answer {
	answered := make(chan answer, 1)
	go func() {
		res, err := svc.Send(ctx, p, relay.SendOptions{})
		answered <- answer{res, err}
	}()
	<-stuck.forwarded
	return answered
}

// stuckProvider forwards sends to Gmail and then holds the answer until
// release is closed: the attempt is in flight (or, never released, the
// replica "died" right after its message reached Gmail).
type stuckProvider struct {
	relay.Provider
	forwarded chan struct{}
	release   chan struct{}
}

func (p *stuckProvider) Send(ctx context.Context, mailbox string, raw []byte, threadID string) (relay.SentMessage, error) {
	m, err := p.Provider.Send(ctx, mailbox, raw, threadID)
	close(p.forwarded)
	<-p.release
	return m, err
}

// Replica A dies mid-attempt (its message reached Gmail, the outcome is
// never recorded). Replica B starting on the same log leaves A's attempt
// alone while its lease runs (and the clock margin after it, see
// relay.LeaseMargin); once it has run out, B's sweeper turns the
// job unknown (lease_expired) and reconciles it by search: sent, one
// delivery at the emulator (emulator results).
func TestReplicaKilledMidAttemptIsTakenOverAfterItsLease(t *testing.T) {
	url := databaseURL(t)
	ctx := context.Background()
	clock := testclock.New()
	// The emulator on the host's clock, the relays on the manual one.
	ground := testenv.Start(t, testenv.Options{HostClock: true, Now: clock.Now, OpenLog: pgOpener(url, freshSchema(t, url))})
	emu, gm := ground.Emulator, ground.Provider
	pol := policy.Default()
	pol.MsgIDDomain = "lease.example"
	pol.VerifyHandle = policy.VerifyNever
	newService := func(p relay.Provider) *pgRelay {
		return newReplica(ground, relay.Config{Provider: p, Policy: pol})
	}

	stuck := &stuckProvider{Provider: gm, forwarded: make(chan struct{}), release: make(chan struct{})}
	a := newService(stuck)
	srvA := httptest.NewServer(api.New(a.apiConfig()))
	defer srvA.Close()
	answered := make(chan struct{})
	go func() {
		defer close(answered)
		resp, err := http.Post(srvA.URL+"/v1/send", "application/json",
			strings.NewReader(`{"key":"cus_1:order.paid:ord_1","to":"a@example.org","subject":"s","body":"b"}`))
		if err == nil {
			resp.Body.Close()
		}
	}()
	defer func() { close(stuck.release); <-answered }()
	<-stuck.forwarded

	b := newService(gm)
	jobs, err := b.log.ByState(ctx, gmailrelay.StateForwarding, 0)
	if err != nil || len(jobs) != 1 {
		t.Fatalf("forwarding jobs after replica B started: %d (%v), want A's one, untouched", len(jobs), err)
	}
	id := jobs[0].MessageID
	sw := sweeper.New(b.sweeperConfig())
	if _, err := sw.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if j, _ := b.log.Get(ctx, id); j.State != gmailrelay.StateForwarding {
		t.Fatalf("within the lease the job is %s, want still forwarding (A's)", j.State)
	}

	clock.Advance(b.Lease() + relay.LeaseMargin + time.Second)
	if _, err := sw.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	j, err := b.log.Get(ctx, id)
	if err != nil || j.State != gmailrelay.StateUnknown || j.LastReason != gmailrelay.ReasonLeaseExpired {
		t.Fatalf("after the lease: %s %s (%v), want unknown lease_expired", j.State, j.LastReason, err)
	}

	clock.Advance(pol.Channels[policy.DefaultChannel].Grace + time.Second)
	if _, err := sw.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if j, _ := b.log.Get(ctx, id); j.State != gmailrelay.StateSent {
		t.Errorf("after B's search the job is %s, want sent", j.State)
	}
	if got := emu.Deliveries(id); got != 1 {
		t.Errorf("emulator results: %d deliveries of %s, want 1", got, id)
	}
}

// The lease is the owner's: replica A waits up to 5 minutes on Gmail,
// replica B only 10 s. Thirty seconds into A's call (past B's own lease,
// well within A's), B takes nothing; A's answer is recorded: sent, with
// its effect line. Were the lease measured by B's own deadline, B would
// turn the job unknown (lease_expired) at 20 s, and A's confirmed send
// would lose its effect and its caller get an error. Past A's lease, B
// does take the next stuck attempt.
func TestEmulatorLeaseIsTheOwnersNotTheRecoverers(t *testing.T) {
	s := newSite(t)
	ctx := context.Background()
	pol := quietPolicy()
	stuck := &stuckProvider{Provider: s.gm, forwarded: make(chan struct{}), release: make(chan struct{})}
	a := s.replica(t, relay.Config{Provider: stuck, Policy: pol, SendTimeout: 5 * time.Minute})
	b := s.replica(t, relay.Config{Provider: s.gm, Policy: pol, SendTimeout: 10 * time.Second})
	p, err := relay.Prepare(relay.SendRequest{Key: "lease:owner", To: relay.AddressList{"a@example.org"}, Subject: "s", Text: "b"},
		"", pol.MsgIDDomain, s.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	answered := sendInFlight(ctx, a, p, stuck)
	s.clock.Advance(30 * time.Second)
	if n, err := b.RecoverExpired(ctx); err != nil || n != 0 {
		t.Errorf("B recovered %d jobs (%v) 30 s into A's 10 min lease, want 0", n, err)
	}
	close(stuck.release)
	got := <-answered
	if got.err != nil || got.res.Job.State != gmailrelay.StateSent {
		t.Fatalf("A's answer: %s, %v; want sent", got.res.Job.State, got.err)
	}
	j, err := b.log.Get(ctx, p.MessageID)
	if err != nil || j.State != gmailrelay.StateSent || j.Effects != 1 || !j.LeaseUntil.IsZero() {
		t.Errorf("job: %s, %d effects, lease %v (%v); want sent with one effect and no lease", j.State, j.Effects, j.LeaseUntil, err)
	}
	if lines, _ := b.log.JobLines(ctx, p.MessageID); testenv.Count(lines, gmailrelay.KindEffect) != 1 {
		t.Errorf("effect lines = %d, want 1 (A's answer)", testenv.Count(lines, gmailrelay.KindEffect))
	}
}
