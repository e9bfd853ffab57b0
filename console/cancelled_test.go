package console_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/relay"
)

// A queued job cancelled with the API token says on its page that an API
// caller cancelled it while it was queued, not that "a human decided not
// to send".
func TestCancelledJobPageNamesTheAPICaller(t *testing.T) {
	e := newEnv(t, envOpts{})
	p, err := relay.Prepare(relay.SendRequest{Key: "cus_1:later:1", To: relay.AddressList{"customer@example.com"},
		Subject: "Later", Text: "Tomorrow."}, "", domain, e.Clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	p.SendAt = e.Clock.Now().Add(24 * time.Hour)
	res, err := e.Service.Send(context.Background(), p, relay.SendOptions{Queue: true})
	if err != nil || res.Job.State != "queued" {
		t.Fatalf("send for later: %v %v", res.Job.State, err)
	}
	if _, err := e.Service.Cancel(context.Background(), res.Job.MessageID, "api"); err != nil {
		t.Fatal(err)
	}
	if st := e.state(res.Job.MessageID); st != gmailrelay.StateAbandoned {
		t.Fatalf("state %s, want abandoned", st)
	}
	c := e.client()
	c.mustSignIn(adminToken)
	page := c.get(jobPath(res.Job.MessageID))
	if !strings.Contains(page.body, "cancelled while queued by an API caller") || strings.Contains(page.body, "a human decided not to send") {
		t.Fatalf("job page does not say an API caller cancelled it:\n%s", page.body)
	}
}
