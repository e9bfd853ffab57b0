package sweeper

import (
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay/internal/testclock"
)

// Without Config.Mono the monotonic clock is the one time.Now puts in its
// readings; a manual clock's readings carry none, and no step is ever
// looked for.
func TestClockReadingWithoutMono(t *testing.T) {
	w := clockWatch{base: time.Now()}
	now, r, ok := w.reading(time.Now)
	if !ok || r.mono < 0 || r.wall != now.Round(0) || r.wall == now {
		t.Errorf("time.Now: reading %+v ok %v, want the wall time without its monotonic reading, and a monotonic reading", r, ok)
	}
	if _, _, ok := w.reading(testclock.New().Now); ok {
		t.Errorf("a manual clock gave a monotonic reading")
	}
	mono := time.Duration(0)
	w = clockWatch{mono: func() time.Duration { mono += time.Millisecond; return mono }}
	if _, r, ok := w.reading(testclock.New().Now); !ok || r.mono != 1500*time.Microsecond || r.noise != time.Millisecond {
		t.Errorf("Config.Mono read around Now: reading %+v ok %v, want mono 1.5ms (between the two reads), noise 1ms", r, ok)
	}
}

// A step is a move of the wall clock more than stepTolerance (plus a
// thousandth of the time between the passes, NTP's slewing) away from the
// monotonic clock's.
func TestClockObserveTolerance(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name       string
		mono, wall time.Duration // how far each moved between the passes
		want       time.Duration // the step found, 0 for none
	}{
		{"none", 5 * time.Second, 5 * time.Second, 0},
		{"within the tolerance", 5 * time.Second, 7 * time.Second, 0},
		{"forward", 5 * time.Second, 8 * time.Second, 3 * time.Second},
		{"back", 5 * time.Second, 2 * time.Second, -3 * time.Second},
		{"slewed for an hour", time.Hour, time.Hour + 5*time.Second, 0},
		{"forward an hour", 5 * time.Second, time.Hour + 5*time.Second, time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var w clockWatch
			if _, ok := w.observe(clockReading{wall: t0, mono: time.Minute}); ok {
				t.Fatalf("a step at the first reading")
			}
			wall := t0.Add(tc.wall)
			st, ok := w.observe(clockReading{wall: wall, mono: time.Minute + tc.mono})
			if ok != (tc.want != 0) || st.size != tc.want {
				t.Fatalf("step %s (found %v), want %s", st.size, ok, tc.want)
			}
			if !ok {
				return
			}
			if want := wall.Add(max(-tc.want, 0)); !st.fence.Equal(want) || st.at != time.Minute+tc.mono {
				t.Errorf("step %+v, want fence %s (after every time stamped before it) at the pass's monotonic reading", st, want)
			}
			if len(w.steps) != 1 {
				t.Errorf("%d steps remembered, want 1", len(w.steps))
			}
		})
	}
}
