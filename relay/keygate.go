package relay

import (
	"context"
	"sync"
)

// keyGate lets one request per Message-ID through the admission of an
// attempt (front-door read, quota and fault decision, first commit) at a
// time in this process. Without it, concurrent duplicates each take a
// counted fault rule or quota before the log tells all but one that the
// job exists; the losers give theirs back, but by then the winner has
// attempted without the fault its rule was meant to inject. Across
// replicas the log's row lock still makes one attempt; only the fault
// decision can then miss the winner (documented in docs/operations.md).
// The zero value is ready to use.
type keyGate struct {
	mu   sync.Mutex
	busy map[string]chan struct{}
}

// enter waits until no other request holds id, then holds it; the
// returned function lets the next one in (calling it twice is harmless).
// It returns ctx's error if ctx ends while waiting.
func (g *keyGate) enter(ctx context.Context, id string) (func(), error) {
	for {
		g.mu.Lock()
		wait, held := g.busy[id]
		if !held {
			if g.busy == nil {
				g.busy = make(map[string]chan struct{})
			}
			done := make(chan struct{})
			g.busy[id] = done
			g.mu.Unlock()
			var once sync.Once
			return func() {
				once.Do(func() {
					g.mu.Lock()
					delete(g.busy, id)
					g.mu.Unlock()
					close(done)
				})
			}, nil
		}
		g.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}
