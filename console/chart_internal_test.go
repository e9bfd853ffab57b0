package console

import (
	"context"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay"
)

// linesOnly is a Relay that has only lines (the rest panics if called).
type linesOnly struct {
	Relay
	lines []gmailrelay.Line // ascending Seq, possibly with gaps
	calls int
}

func (f *linesOnly) Lines(_ context.Context, after uint64, limit int) ([]gmailrelay.Line, uint64, error) {
	f.calls++
	var out []gmailrelay.Line
	for _, l := range f.lines {
		if l.Seq > after {
			if len(out) == limit {
				return out, out[len(out)-1].Seq, nil
			}
			out = append(out, l)
		}
	}
	return out, 0, nil
}

func TestTailSearchWithGaps(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)
	f := &linesOnly{}
	// Seqs 1..40 without 10..19 (retention dropped them): 30 lines, a minute apart.
	for s := uint64(1); s <= 40; s++ {
		if s >= 10 && s < 20 {
			continue
		}
		f.lines = append(f.lines, gmailrelay.Line{Seq: s, Time: t0.Add(time.Duration(s) * time.Minute)})
	}
	for _, hint := range []uint64{0, 1, 30, 40, 41, 1000} {
		got, err := lastSeq(context.Background(), f, hint)
		if err != nil || got != 40 {
			t.Errorf("lastSeq(hint %d) = %d, %v; want 40", hint, got, err)
		}
	}
	for _, tc := range []struct {
		at        time.Duration
		wantFirst uint64 // the first line after the cursor (0: none)
	}{
		{0, 1}, {5 * time.Minute, 5}, {12 * time.Minute, 20}, {20 * time.Minute, 20}, {40 * time.Minute, 40}, {41 * time.Minute, 0},
	} {
		cur, err := firstAtOrAfter(context.Background(), f, t0.Add(tc.at), 40)
		if err != nil {
			t.Fatal(err)
		}
		next, _, _ := f.Lines(context.Background(), cur, 1)
		got := uint64(0)
		if len(next) > 0 {
			got = next[0].Seq
		}
		if got != tc.wantFirst {
			t.Errorf("firstAtOrAfter(+%v) = cursor %d, first line after it %d; want %d", tc.at, cur, got, tc.wantFirst)
		}
	}
	if got, err := lastSeq(context.Background(), &linesOnly{}, 5); err != nil || got != 0 {
		t.Errorf("lastSeq of an empty log = %d, %v; want 0", got, err)
	}
}

func TestChartCountsOnlyNewLines(t *testing.T) {
	now := time.Date(2026, 12, 2, 10, 0, 30, 0, time.UTC)
	f := &linesOnly{}
	add := func(at time.Time, k gmailrelay.Kind) {
		f.lines = append(f.lines, gmailrelay.Line{Seq: uint64(len(f.lines) + 1), Time: at, Kind: k})
	}
	add(now.Add(-2*time.Hour), gmailrelay.KindForwarding) // before the hour: not counted
	add(now.Add(-30*time.Minute), gmailrelay.KindForwarding)
	add(now.Add(-30*time.Minute), gmailrelay.KindEffect)
	add(now, gmailrelay.KindForwarding)
	c := &chartCache{}
	ch, err := c.build(context.Background(), f, now, uint64(len(f.lines)))
	if err != nil {
		t.Fatal(err)
	}
	if ch.Attempts != 2 || ch.Effect != 1 || ch.LastMinute != 1 || len(ch.Bars) != chartMinutes {
		t.Fatalf("chart: attempts %d effects %d last minute %d bars %d; want 2, 1, 1, %d",
			ch.Attempts, ch.Effect, ch.LastMinute, len(ch.Bars), chartMinutes)
	}
	add(now, gmailrelay.KindForwarding)
	f.calls = 0
	ch, err = c.build(context.Background(), f, now, uint64(len(f.lines)))
	if err != nil {
		t.Fatal(err)
	}
	if ch.Attempts != 3 || ch.LastMinute != 2 {
		t.Errorf("after one more line: attempts %d, last minute %d; want 3, 2", ch.Attempts, ch.LastMinute)
	}
	if f.calls != 1 {
		t.Errorf("a warm build made %d Lines calls, want 1 (only the new lines)", f.calls)
	}
	// An hour later the old minutes fall out.
	ch, _ = c.build(context.Background(), f, now.Add(time.Hour), uint64(len(f.lines)))
	if ch.Attempts != 0 {
		t.Errorf("an hour later: %d attempts, want 0", ch.Attempts)
	}
}
