package relay_test

import (
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay/relay"
)

// TestStructuredSenderIsOneAddress: headers.Sender on the JSON path must
// hold exactly one address, as a raw message's Sender must; two addresses,
// none or a malformed one are 400 naming headers.Sender.
func TestStructuredSenderIsOneAddress(t *testing.T) {
	send := func(sender string) (relay.Prepared, error) {
		return relay.Prepare(relay.SendRequest{Key: "c:e:1", To: relay.AddressList{"a@example.org"},
			Subject: "s", Text: "b", Headers: map[string]string{"sender": sender}}, "", testDomain, time.Unix(0, 0))
	}
	for _, bad := range []string{"a@x.com, b@x.com", "Team: a@x.com, b@x.com;", "", "no-at-sign"} {
		_, err := send(bad)
		wantInvalidSaying(t, err, "headers.Sender")
	}
	for _, ok := range []string{"a@x.com", "Shop Desk <desk@x.com>"} {
		if _, err := send(ok); err != nil {
			t.Errorf("Sender %q refused: %v", ok, err)
		}
	}
}
