package gctune

import (
	"runtime/debug"
	"testing"
)

func TestApplySetsPercentAndLimitUnlessTheEnvironmentDoes(t *testing.T) {
	prevPercent := debug.SetGCPercent(100)
	prevLimit := debug.SetMemoryLimit(-1)
	t.Cleanup(func() {
		debug.SetGCPercent(prevPercent)
		debug.SetMemoryLimit(prevLimit)
	})
	env := map[string]string{}
	getenv := func(k string) string { return env[k] }

	if !Apply(getenv, Limit(32<<20)) {
		t.Fatal("Apply with neither GOGC nor GOMEMLIMIT set = false, want true")
	}
	if got := debug.SetGCPercent(Percent); got != Percent {
		t.Errorf("GC percent after Apply = %d, want %d", got, Percent)
	}
	if got, want := debug.SetMemoryLimit(-1), int64(192<<20); got != want {
		t.Errorf("memory limit after Apply = %d, want %d (64 MiB + 4 × 32 MiB)", got, want)
	}

	for _, k := range []string{"GOGC", "GOMEMLIMIT"} {
		debug.SetGCPercent(100)
		env = map[string]string{k: "200"}
		if Apply(getenv, Limit(32<<20)) {
			t.Errorf("Apply with %s set = true, want false", k)
		}
		if got := debug.SetGCPercent(100); got != 100 {
			t.Errorf("with %s set, Apply changed the GC percent to %d", k, got)
		}
	}
}
