package relay_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/internal/testenv"
	"github.com/gmailrelay/gmailrelay/relay"
)

// Emulator results: a raw message of Gmail's full 35 MB goes through
// intake, the log and Gmail's upload endpoint and is delivered once; one
// byte more is too_large (413) at intake, before anything is logged or
// sent.
func TestEmulatorSends35MBThroughUploadPath(t *testing.T) {
	if testing.Short() {
		t.Skip("moves 35 MB through the log and the emulator")
	}
	e := newEnv(t, gmailfake.Options{})
	ctx := context.Background()
	// The env's 2 s send deadline is too short for 35 MB under -race.
	svc := e.te.Replica(testenv.Options{Policy: e.policy, SendTimeout: 2 * time.Minute}).Service
	head := "From: shop@example.com\r\nTo: customer@example.org\r\nMessage-ID: <big-35mb@example.com>\r\nSubject: big\r\n\r\n"
	line := strings.Repeat("x", 998) + "\r\n"
	body := strings.Repeat(line, (relay.MaxMessageBytes-len(head))/len(line))
	raw := head + body + strings.Repeat("y", relay.MaxMessageBytes-len(head)-len(body))
	if len(raw) != relay.MaxMessageBytes {
		t.Fatalf("built %d bytes, want %d", len(raw), relay.MaxMessageBytes)
	}
	p, err := relay.PrepareRaw([]byte(raw), "", "", svcDomain)
	if err != nil {
		t.Fatalf("35 MB refused at intake: %v", err)
	}
	res, err := svc.Send(ctx, p, relay.SendOptions{})
	if err != nil || res.Job.State != gmailrelay.StateSent {
		t.Fatalf("35 MB send: %s %v (last error %q), want sent", res.Job.State, err, res.Job.LastError)
	}
	if got := e.emu.Deliveries(p.MessageID); got != 1 {
		t.Errorf("emulator deliveries of the 35 MB message = %d, want 1", got)
	}
	if got := e.emu.Stats().Calls["send"]; got != 1 {
		t.Errorf("emulator send calls = %d, want 1", got)
	}

	_, err = relay.PrepareRaw([]byte(raw+"z"), "", "", svcDomain)
	if relay.ErrorCode(err) != relay.CodeTooLarge {
		t.Fatalf("35 MB + 1 byte: err %v, want too_large", err)
	}
}
