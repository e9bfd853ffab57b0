// Package gctune sets the garbage collector of a relay process.
//
// A relay holds a small live heap (connections, the policy, the log's
// buffers; the log's data is bbolt's mapping, not heap) and allocates fast
// (≈ 250 allocations a send), so with Go's default GOGC=100 the collector
// and the allocator took ≈ 22 % of the relay's CPU in the send benchmark,
// and GC percent 400 cut its CPU a send by ≈ 13 % (docs/benchmarks.md,
// issue 16: emulator results). A GC percent of 400 lets the heap grow
// to five times the live heap between collections; a soft memory limit
// bounds what that can cost when the live heap itself is large (many big
// messages at once): near the limit the runtime collects more often again.
//
// GOGC and GOMEMLIMIT, when set in the environment, win: the runtime has
// read them at start and Apply leaves both alone.
package gctune

import (
	"runtime/debug"
)

// Percent is the GC percent Apply sets.
const Percent = 400

// Limit is the soft memory limit Apply sets for a relay that handles at
// most maxInflight bytes of request bodies at once (a message costs the
// relay a few copies of itself, see api.DefaultMaxInflightBytes): 64 MiB
// for the rest of the process plus four times the bodies.
func Limit(maxInflight int64) int64 { return 64<<20 + 4*maxInflight }

// Apply sets the GC percent to Percent and the soft memory limit to limit
// bytes unless getenv finds GOGC or GOMEMLIMIT set; it reports whether it
// did.
func Apply(getenv func(string) string, limit int64) bool {
	if getenv("GOGC") != "" || getenv("GOMEMLIMIT") != "" {
		return false
	}
	debug.SetGCPercent(Percent)
	debug.SetMemoryLimit(limit)
	return true
}
