// Package faulttest holds what the tests of fault-rule Sets sharing one
// Store have in common, whichever Store they share (faultmodes' in-memory
// one, pglog's PostgreSQL one).
package faulttest

import (
	"sync"
	"sync/atomic"

	"github.com/gmailrelay/gmailrelay/faultmodes"
)

// DecideSpread makes n decisions at once for one attempt (channel
// default, no key), the even ones on a and the odd ones on b as two
// replicas of the relay would, and returns how many of them fired mode.
func DecideSpread(a, b *faultmodes.Set, n int, mode faultmodes.Mode) int {
	sets := [2]*faultmodes.Set{a, b}
	var fired atomic.Int32
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if sets[i%2].Decide("default", "", "<x@y>").Mode == mode {
				fired.Add(1)
			}
		})
	}
	wg.Wait()
	return int(fired.Load())
}
