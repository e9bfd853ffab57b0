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
	busy map[string]*gateHold
}

// gateHold is one request's hold on a Message-ID. done is made only when
// another request waits (most holds are never waited on); all its fields
// are guarded by the gate's mutex.
type gateHold struct {
	g        *keyGate
	id       string
	done     chan struct{}
	released bool
}

// enter waits until no other request holds id, then holds it; the
// returned hold's release lets the next one in (calling it twice is
// harmless). It returns ctx's error if ctx ends while waiting.
func (g *keyGate) enter(ctx context.Context, id string) (*gateHold, error) {
	for {
		g.mu.Lock()
		other, held := g.busy[id]
		if !held {
			if g.busy == nil {
				g.busy = make(map[string]*gateHold)
			}
			h := &gateHold{g: g, id: id}
			g.busy[id] = h
			g.mu.Unlock()
			return h, nil
		}
		if other.done == nil {
			other.done = make(chan struct{})
		}
		done := other.done
		g.mu.Unlock()
		select {
		case <-done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// release lets the next request for the id in.
func (h *gateHold) release() {
	h.g.mu.Lock()
	defer h.g.mu.Unlock()
	if h.released {
		return
	}
	h.released = true
	delete(h.g.busy, h.id)
	if h.done != nil {
		close(h.done)
	}
}
