package testenv_test

import (
	"context"
	"testing"

	"github.com/gmailrelay/gmailrelay"
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
