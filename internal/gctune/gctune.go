// Package gctune sets the soft memory limit of a relay process.
//
// The relay holds request bodies in memory while it checks and sends them,
// up to --max-inflight-bytes of them at once, and a message costs it a few
// copies of itself. Go's collector lets the heap grow to twice what is live
// before it collects; under a soft memory limit it collects more often as
// the heap nears the limit, so the process stays near 64 MiB plus four
// times the bodies it admits (docs/operations.md). The GC percent is Go's
// default: raising it cut the relay's CPU a send, but a bare reverse proxy's
// by as much, and no figure a user sees (docs/benchmarks.md, "Beside a bare
// proxy").
//
// GOMEMLIMIT, when set in the environment, wins: the runtime has read it
// at start and Apply leaves it alone.
package gctune

import (
	"runtime/debug"
)

// Limit is the soft memory limit Apply sets for a relay that handles at
// most maxInflight bytes of request bodies at once (a message costs the
// relay a few copies of itself, see api.DefaultMaxInflightBytes): 64 MiB
// for the rest of the process plus four times the bodies.
func Limit(maxInflight int64) int64 { return 64<<20 + 4*maxInflight }

// Apply sets the soft memory limit to limit bytes unless getenv finds
// GOMEMLIMIT set; it reports whether it did.
func Apply(getenv func(string) string, limit int64) bool {
	if getenv("GOMEMLIMIT") != "" {
		return false
	}
	debug.SetMemoryLimit(limit)
	return true
}
