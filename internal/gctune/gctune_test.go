package gctune

import (
	"runtime/debug"
	"testing"
)

func TestApplySetsTheLimitUnlessGOMEMLIMITIsSet(t *testing.T) {
	prevPercent := debug.SetGCPercent(100)
	prevLimit := debug.SetMemoryLimit(-1)
	t.Cleanup(func() {
		debug.SetGCPercent(prevPercent)
		debug.SetMemoryLimit(prevLimit)
	})
	env := map[string]string{}
	getenv := func(k string) string { return env[k] }

	if !Apply(getenv, Limit(32<<20)) {
		t.Fatal("Apply without GOMEMLIMIT = false, want true")
	}
	if got, want := debug.SetMemoryLimit(-1), int64(192<<20); got != want {
		t.Errorf("memory limit after Apply = %d, want %d (64 MiB + 4 × 32 MiB)", got, want)
	}
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("GC percent after Apply = %d, want Go's default 100", got)
	}

	debug.SetMemoryLimit(1 << 40)
	env = map[string]string{"GOMEMLIMIT": "200MiB"}
	if Apply(getenv, Limit(32<<20)) {
		t.Error("Apply with GOMEMLIMIT set = true, want false")
	}
	if got := debug.SetMemoryLimit(-1); got != 1<<40 {
		t.Errorf("with GOMEMLIMIT set, Apply changed the memory limit to %d", got)
	}
}
