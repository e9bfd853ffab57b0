package testenv_test

import (
	"context"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/faultmodes"
	"github.com/gmailrelay/gmailrelay/internal/testenv"
	"github.com/gmailrelay/gmailrelay/relay"
)

// TestEmulatorSendSurvivesRestart: the harness's relay sends through the
// emulator (one delivery, ground truth), logs it as sent, and after a
// restart on the same file replays it without a second delivery.
func TestEmulatorSendSurvivesRestart(t *testing.T) {
	e := testenv.New(t, testenv.Options{})
	p, err := relay.Prepare(relay.SendRequest{Key: "k1", To: relay.AddressList{"a@example.org"}, Subject: "s", Text: "t"},
		"", "inbound.example.com", e.Clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := e.Service.Send(ctx, p, relay.SendOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := e.Job(p.MessageID).State; got != gmailrelay.StateSent {
		t.Fatalf("state %s, want sent", got)
	}
	e.Restart()
	res, err := e.Service.Send(ctx, p, relay.SendOptions{})
	if err != nil || !res.Replayed {
		t.Fatalf("send after restart: %+v, %v; want a replay", res, err)
	}
	if got := e.Emulator.Deliveries(p.MessageID); got != 1 {
		t.Errorf("emulator deliveries %d, want 1", got)
	}
	if got := testenv.Count(e.Lines(p.MessageID), gmailrelay.KindEffect); got != 1 {
		t.Errorf("effect lines %d, want 1", got)
	}
}

func TestWantInvalidAcceptsTheNamedField(t *testing.T) {
	testenv.WantInvalid(t, relay.Invalid("to", "bad"), "to")
}

// TestReplicaSharesTheLogAndEmulator: a Replica is another relay over the
// same log and emulator (emulator results): a send through the replica
// of one accepted by the first is a replay, delivered once; a replica's
// Options.Faults are the rules its Gmail client is wrapped with.
func TestReplicaSharesTheLogAndEmulator(t *testing.T) {
	e := testenv.New(t, testenv.Options{})
	faults := faultmodes.New(faultmodes.Options{Now: e.Now})
	r := e.Replica(testenv.Options{Faults: faults})
	if r.Store != e.Store || r.Emulator != e.Emulator || r.Faults != faults {
		t.Fatalf("replica: store shared %v, emulator shared %v, faults given %v; want all", r.Store == e.Store, r.Emulator == e.Emulator, r.Faults == faults)
	}
	p, err := relay.Prepare(relay.SendRequest{Key: "k1", To: relay.AddressList{"a@example.org"}, Subject: "s", Text: "t"},
		"", "inbound.example.com", e.Clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := e.Service.Send(ctx, p, relay.SendOptions{}); err != nil {
		t.Fatal(err)
	}
	res, err := r.Service.Send(ctx, p, relay.SendOptions{})
	if err != nil || !res.Replayed {
		t.Fatalf("send through the replica: %+v, %v; want a replay", res, err)
	}
	if got := e.Emulator.Deliveries(p.MessageID); got != 1 {
		t.Errorf("emulator deliveries %d, want 1", got)
	}
}

// TestHostClockRunsTheRelayOnTimeNow: with HostClock there is no manual
// clock, and the relay stamps its lines with the host's time.
func TestHostClockRunsTheRelayOnTimeNow(t *testing.T) {
	before := time.Now()
	e := testenv.New(t, testenv.Options{HostClock: true})
	if e.Clock != nil {
		t.Fatalf("Clock %v with HostClock, want none", e.Clock)
	}
	p, err := relay.Prepare(relay.SendRequest{Key: "k1", To: relay.AddressList{"a@example.org"}, Subject: "s", Text: "t"},
		"", "inbound.example.com", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	res, err := e.Service.Send(context.Background(), p, relay.SendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if at := res.Job.CreatedAt; at.Before(before) || at.After(time.Now()) {
		t.Errorf("job created at %s, want between %s and now", at, before)
	}
}
