// Package lifecycle is the Start/Stop of a background loop, shared by the
// sweeper, the outbox and the retention pass: started once, stopped by
// cancelling its context, Stop waiting for the loop to return; Repeat,
// the timer loop they run; and Wake, which cuts Repeat's wait short.
package lifecycle

import (
	"context"
	"sync"
	"time"
)

// Loop runs one background function. The zero value is ready to use and
// safe for concurrent use.
type Loop struct {
	mu      sync.Mutex
	started bool
	cancel  context.CancelFunc
	done    chan struct{}
}

// Start runs fn in the background with a context that ends when ctx does
// or Stop is called. Starting a started (or stopped) Loop does nothing.
func (l *Loop) Start(ctx context.Context, fn func(ctx context.Context)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.started {
		return
	}
	l.started = true
	ctx, l.cancel = context.WithCancel(ctx)
	l.done = make(chan struct{})
	go func(done chan struct{}) {
		defer close(done)
		fn(ctx)
	}(l.done)
}

// Stop cancels fn's context and blocks until fn has returned. It is safe
// to call twice, and without Start.
func (l *Loop) Stop() {
	l.mu.Lock()
	cancel, done := l.cancel, l.done
	l.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
}

// Repeat runs pass at once and then again after the delay pass returns,
// or sooner when wake delivers (a nil wake never does), until ctx ends. A
// wake while a delay runs replaces it.
func Repeat(ctx context.Context, wake <-chan struct{}, pass func(ctx context.Context) time.Duration) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-wake:
		}
		timer.Reset(pass(ctx)) // Go ≥ 1.23: Reset never leaves a stale tick behind
	}
}

// Wake delivers on wake, Repeat's channel, without blocking: when the
// channel is full a wake is already pending and one more adds nothing.
func Wake(wake chan<- struct{}) {
	select {
	case wake <- struct{}{}:
	default:
	}
}

// Sleep waits d in real time, or until ctx is done; it reports whether the
// whole wait elapsed (a d ≤ 0 does not wait and reports true).
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
