package testenv

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/gmailrelay/gmailrelay/relay"
)

// Unreachable is a relay.Provider whose sends do not reach Gmail (a
// *relay.NotReachedError, as a refused connection gives) while Down is set
// or Left is above zero (each such send counts Left down); Calls counts
// every send. Set Provider to the real one.
type Unreachable struct {
	relay.Provider
	Down  atomic.Bool
	Left  atomic.Int32
	Calls atomic.Int32
}

// Send implements relay.Provider.
func (u *Unreachable) Send(ctx context.Context, mailbox string, raw []byte, threadID string) (relay.SentMessage, error) {
	u.Calls.Add(1)
	if u.Down.Load() || u.Left.Add(-1) >= 0 {
		return relay.SentMessage{}, &relay.NotReachedError{Err: errors.New("dial tcp: connection refused")}
	}
	return u.Provider.Send(ctx, mailbox, raw, threadID)
}
