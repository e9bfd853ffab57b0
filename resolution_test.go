package gmailrelay

import (
	"testing"
	"time"
)

func TestResolution(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	fwd := Line{Kind: KindForwarding, State: StateForwarding, Time: t0}
	unknown := Line{Kind: KindAmbiguous, State: StateUnknown, Time: t0.Add(time.Second)}
	for _, c := range []struct {
		name  string
		j     Job
		lines []Line
		by    string
		after time.Duration
		ok    bool
	}{
		{"answered", Job{State: StateSent}, []Line{fwd, {Kind: KindEffect, Source: SourceResponse, State: StateSent, Time: t0.Add(time.Second)}}, ResolvedByResponse, 0, true},
		{"history", Job{State: StateSent, AmbiguousAt: t0.Add(time.Second)}, []Line{fwd, unknown, {Kind: KindEffect, Source: SourceHistory, State: StateSent, Time: t0.Add(6 * time.Second)}}, ResolvedByHistory, 5 * time.Second, true},
		{"search", Job{State: StateSent, AmbiguousAt: t0.Add(time.Second)}, []Line{fwd, unknown, {Kind: KindSearch, Time: t0.Add(3 * time.Minute)}, {Kind: KindEffect, Source: SourceSearch, State: StateSent, Time: t0.Add(3 * time.Minute)}}, ResolvedBySearch, 3*time.Minute - time.Second, true},
		{"human", Job{State: StateAbandoned, AmbiguousAt: t0.Add(time.Second)}, []Line{fwd, unknown, {Kind: KindReview, State: StateReview}, {Kind: KindResolved, State: StateAbandoned, Time: t0.Add(time.Hour)}}, ResolvedByHuman, time.Hour - time.Second, true},
		{"failed", Job{State: StateFailed}, []Line{fwd, {Kind: KindNotSent, State: StateFailed, Time: t0}}, ResolvedByResponse, 0, true},
		{"unknown", Job{State: StateUnknown}, []Line{fwd, unknown}, "", 0, false},
		{"review", Job{State: StateReview}, []Line{fwd, {Kind: KindReview, State: StateReview}}, "", 0, false},
	} {
		by, after, ok := Resolution(c.j, c.lines)
		if by != c.by || after != c.after || ok != c.ok {
			t.Errorf("%s: %q %s %v, want %q %s %v", c.name, by, after, ok, c.by, c.after, c.ok)
		}
	}
}
