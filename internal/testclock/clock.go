// Package testclock is a manual clock for tests: time moves only when the
// test says so, so nothing ever sleeps to wait for background work.
package testclock

import (
	"sync"
	"time"
)

// Clock is a manually advanced clock, safe for concurrent use.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// New returns a clock reading a fixed, arbitrary instant.
func New() *Clock {
	return &Clock{t: time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)}
}

// Now returns the clock's reading.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock forward by d (nothing for d <= 0: time never
// runs backwards).
func (c *Clock) Advance(d time.Duration) {
	if d <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// At returns a clock reading t.
func At(t time.Time) *Clock { return &Clock{t: t} }
