package console

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/gmailrelay/gmailrelay"
)

// The log offers lines in ascending order only (Lines(after, limit), a
// cursor seek). The tail and the chart find their place in it by binary
// search over sequence numbers — O(log lines) seeks, never a scan.

// lastSeq returns the Seq of the newest line (0 for an empty log). hint is a
// guess (the line counter); it is checked, and the search widens past it
// when lines were written meanwhile or the sequence has gaps.
func lastSeq(ctx context.Context, rl Relay, hint uint64) (uint64, error) {
	exists := func(after uint64) (bool, error) { // any line with Seq > after?
		lines, _, err := rl.Lines(ctx, after, 1)
		return len(lines) > 0, err
	}
	hi := max(hint, 1)
	for {
		ok, err := exists(hi)
		if err != nil || !ok {
			break
		}
		hi *= 2
	}
	lo := uint64(0) // invariant: a line with Seq > lo exists, unless the log is empty
	if ok, err := exists(0); err != nil || !ok {
		return 0, err
	}
	for lo+1 < hi { // invariant: no line with Seq > hi
		mid := lo + (hi-lo)/2
		ok, err := exists(mid)
		if err != nil {
			return 0, err
		}
		if ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi, nil
}

// firstAtOrAfter returns the after-cursor (Seq-1 style: lines with Seq >
// cursor) of the first line whose Time is not before t, searching lines up
// to last. Lines are time-ordered because the relay stamps them as it
// commits them.
func firstAtOrAfter(ctx context.Context, rl Relay, t time.Time, last uint64) (uint64, error) {
	lo, hi := uint64(0), last // answer in [lo, hi]
	for lo < hi {
		mid := lo + (hi-lo)/2
		lines, _, err := rl.Lines(ctx, mid, 1)
		if err != nil {
			return 0, err
		}
		if len(lines) == 0 || !lines[0].Time.Before(t) {
			hi = mid
		} else {
			lo = lines[0].Seq // everything up to this line is before t
		}
	}
	return lo, nil
}

// chartMinutes is the width of the overview chart.
const chartMinutes = 60

// maxChartLines bounds the lines one render reads; the rest is read by the
// next render (the cache keeps its place), so a burst never makes the
// overview slow.
const maxChartLines = 20000

// chartCache counts attempts (forwarding lines) and effects per minute of
// the last hour. Complete minutes never change in an append-only log, so it
// keeps its counts and its place in the log and reads only new lines.
type chartCache struct {
	mu      sync.Mutex
	after   uint64 // lines up to this Seq are counted
	started bool
	minutes map[int64]*[2]int // unix minute → attempts, effects
}

// bar is one minute of the chart, in SVG units.
type bar struct {
	X, Y, W, H       int
	EffX, EffW       int // effects: a narrower bar in front of the attempts
	EffY, EffH       int
	Attempts, Effect int
	Label            string
}

// chart is the overview's sends-per-minute chart, drawn by the template.
type chart struct {
	Bars             []bar
	Width, Height    int
	Max              int
	Attempts, Effect int // totals over the hour
	LastMinute       int // attempts in the current minute
	Partial          bool
	From, To         string
}

func (c *chartCache) build(ctx context.Context, rl Relay, now time.Time, lineHint uint64) (chart, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	end := now.Truncate(time.Minute)
	start := end.Add(-(chartMinutes - 1) * time.Minute)
	if !c.started {
		last, err := lastSeq(ctx, rl, lineHint)
		if err != nil {
			return chart{}, err
		}
		if c.after, err = firstAtOrAfter(ctx, rl, start, last); err != nil {
			return chart{}, err
		}
		c.minutes, c.started = map[int64]*[2]int{}, true
	}
	read, partial := 0, false
	for {
		lines, next, err := rl.Lines(ctx, c.after, 1000)
		if err != nil {
			return chart{}, err
		}
		for _, l := range lines {
			c.count(l)
			c.after = l.Seq
		}
		read += len(lines)
		if next == 0 || len(lines) == 0 {
			break
		}
		if read >= maxChartLines {
			partial = true
			break
		}
	}
	for m := range c.minutes {
		if m < start.Unix()/60 {
			delete(c.minutes, m)
		}
	}
	return c.draw(start, end, partial), nil
}

func (c *chartCache) count(l gmailrelay.Line) {
	var i int
	switch l.Kind {
	case gmailrelay.KindForwarding:
		i = 0
	case gmailrelay.KindEffect:
		i = 1
	default:
		return
	}
	m := l.Time.Unix() / 60
	if c.minutes[m] == nil {
		c.minutes[m] = &[2]int{}
	}
	c.minutes[m][i]++
}

// Chart geometry (SVG user units).
const (
	chartWidth  = 720
	chartHeight = 140
	barWidth    = chartWidth / chartMinutes
)

func (c *chartCache) draw(start, end time.Time, partial bool) chart {
	ch := chart{Width: chartWidth, Height: chartHeight, Partial: partial,
		From: start.UTC().Format("15:04"), To: end.UTC().Format("15:04") + " UTC"}
	counts := make([][2]int, chartMinutes)
	for i := range counts {
		if v := c.minutes[start.Add(time.Duration(i)*time.Minute).Unix()/60]; v != nil {
			counts[i] = *v
		}
		ch.Max = max(ch.Max, counts[i][0], counts[i][1])
		ch.Attempts += counts[i][0]
		ch.Effect += counts[i][1]
	}
	ch.LastMinute = counts[chartMinutes-1][0]
	scale := max(ch.Max, 1)
	for i, v := range counts {
		h := v[0] * (chartHeight - 10) / scale
		eh := v[1] * (chartHeight - 10) / scale
		t := start.Add(time.Duration(i) * time.Minute).UTC().Format("15:04")
		ch.Bars = append(ch.Bars, bar{X: i * barWidth, Y: chartHeight - h, W: barWidth - 2, H: h,
			EffX: i*barWidth + 2, EffW: barWidth - 6, EffY: chartHeight - eh, EffH: eh, Attempts: v[0], Effect: v[1],
			Label: t + ": " + strconv.Itoa(v[0]) + " attempts, " + strconv.Itoa(v[1]) + " effects"})
	}
	return ch
}
