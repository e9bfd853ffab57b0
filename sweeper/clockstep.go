package sweeper

import (
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/policy"
)

// A step of the relay's wall clock. Every time rule of the sweeper (grace,
// the checks a grace apart, the lag p99 floor, max_unwitnessed, a fresh
// miss) compares a wall time the log stored (an attempt's end, a search
// line, a next check) with the pass's wall time. When the host's clock
// steps forward by X while the relay runs (NTP correcting a clock that was
// behind), every stored time looks X older than it is: misses count at
// once and a job is resent while Gmail has not indexed the first copy yet.
// Real time did not pass, so Gmail's index did not catch up.
//
// Stored times carry no monotonic reading, but each pass reads both
// clocks: when the wall clock moved further between two passes than the
// monotonic one, it stepped. Until real time has caught up (max of grace
// and the mailbox's measured p99 lag after the pass that found the step),
// a search miss of a job whose attempt is stamped before the step does not
// count (see stepHold), and max_unwitnessed counts real time (see
// sinceAttempt). A step back makes stored times look younger, which only
// holds decisions back; the sweeper just takes no lag sample across it and
// trusts no miss from before it as fresh (see beforeStep).
//
// Only steps between two passes of this process are seen: not one while
// it was stopped, nor before its first pass. A host that was suspended
// may show as a forward step too (the monotonic clock can stand still
// meanwhile): the hold then only delays decisions, on the safe side.

// stepTolerance is how far the wall clock may move more (or less) than
// the monotonic clock between two passes without being a step: more than
// NTP's slewing and the jitter of reading two clocks, far less than the
// grace of any channel.
const stepTolerance = 2 * time.Second

// slewDivisor allows one part in 1,000 of the time between two passes on
// top of stepTolerance: NTP slews a clock by up to 500 ppm, and the loop
// may not run for hours (a long Interval, a pause) without a step.
const slewDivisor = 1000

// maxClockSteps bounds the steps remembered: a job stamped before older
// steps than these gets no correction for them.
const maxClockSteps = 8

// clockReading is one pass's reading of both clocks.
type clockReading struct {
	wall time.Time     // Now, without a monotonic reading
	mono time.Duration // the monotonic clock
	// noise is how long reading both took (Config.Mono is read before
	// and after Now): the two readings are that far apart at most.
	noise time.Duration
}

// clockStep is a step of the wall clock a pass found.
type clockStep struct {
	// size is how much further the wall clock moved than the monotonic
	// one: > 0 forward, < 0 back.
	size time.Duration
	// at is the monotonic reading of the pass that found it.
	at time.Duration
	// fence is a wall time every time stamped before the step is before:
	// the finding pass's wall time, plus the step's size for a step back.
	// Times stamped between the step and that pass are before it too (the
	// sweeper cannot tell them apart): they are handled as if older.
	fence time.Time
}

// clockWatch watches the Sweeper's wall clock for steps. Guarded by the
// Sweeper's passMu.
type clockWatch struct {
	mono func() time.Duration // Config.Mono; nil: the readings of Now
	base time.Time            // time.Now at New: the origin of Now's monotonic readings
	last clockReading         // this pass's reading, once read is true
	read bool
	// steps are the steps found since New, oldest first, at most
	// maxClockSteps.
	steps []clockStep
}

// reading reads both clocks, Now with now. ok is false when there is no
// monotonic clock: Config.Mono is nil and Now's reading carries no
// monotonic reading (a manual clock).
func (w *clockWatch) reading(now func() time.Time) (t time.Time, r clockReading, ok bool) {
	if w.mono == nil {
		t = now()
		wall := t.Round(0) // strips the monotonic reading, if any
		if t == wall {
			return t, clockReading{}, false
		}
		return t, clockReading{wall: wall, mono: t.Sub(w.base)}, true
	}
	m0 := w.mono()
	t = now()
	m1 := w.mono()
	return t, clockReading{wall: t.Round(0), mono: m0 + (m1-m0)/2, noise: m1 - m0}, true
}

// observe records a pass's reading and returns the step since the last
// pass's, if the wall clock moved more than stepTolerance (plus the
// readings' noise and the slew allowance) further or less far than the
// monotonic clock.
func (w *clockWatch) observe(r clockReading) (clockStep, bool) {
	last, had := w.last, w.read
	w.last, w.read = r, true
	if !had {
		return clockStep{}, false
	}
	mono := r.mono - last.mono
	ahead := r.wall.Sub(last.wall) - mono
	if ahead.Abs() <= stepTolerance+last.noise+r.noise+max(mono, 0)/slewDivisor {
		return clockStep{}, false
	}
	st := clockStep{size: ahead, at: r.mono, fence: r.wall.Add(max(-ahead, 0))}
	w.steps = append(w.steps, st)
	if len(w.steps) > maxClockSteps {
		w.steps = w.steps[len(w.steps)-maxClockSteps:]
	}
	return st, true
}

// readClock returns Now for a pass, having compared both clocks with the
// last pass's reading; a step found is logged here, once.
func (s *Sweeper) readClock() time.Time {
	now, r, ok := s.clock.reading(s.now)
	if !ok {
		s.clock.read = false
		return now
	}
	st, stepped := s.clock.observe(r)
	switch {
	case stepped && st.size > 0:
		s.deps.Logger.Warn().Str("step", st.size.String()).
			Msg("the relay's wall clock stepped forward: times stored before the step look older than they are, so search misses of attempts made before it do not count until real time has caught up (grace or the measured lag p99, whichever is longer)")
	case stepped:
		s.deps.Logger.Warn().Str("step", st.size.String()).
			Msg("the relay's wall clock stepped back: checks of jobs from before the step come later than scheduled; nothing is decided on a miss from before it")
	}
	return now
}

// stepHold is how much longer a search miss of j does not count because
// the wall clock stepped forward after j's attempt; zero: it counts as
// usual. Until max(grace, the mailbox's p99 lag) of real time has passed
// since the pass that found the step, the attempt may be younger than its
// stored time says by up to the step; after it, the attempt is at least
// that old in real time, and the checks that follow are a real grace
// apart.
func (p *pass) stepHold(j gmailrelay.Job, ch policy.Channel) time.Duration {
	end := attemptEnd(j)
	found := false
	var at time.Duration // the latest such step's
	for _, st := range p.s.clock.steps {
		if st.size > 0 && end.Before(st.fence) {
			found, at = true, st.at
		}
	}
	if !found {
		return 0
	}
	p99, _ := p.s.lags.quantile(j.Mailbox, 0.99)
	return max(max(ch.Grace, p99)-(p.s.clock.last.mono-at), 0)
}

// sinceAttempt is how long ago j's attempt ended in real time, as far as
// the sweeper knows: the wall clock's age less every forward step found
// since the attempt. A step back is not added: it only makes the attempt
// look younger, which holds a decision back.
func (p *pass) sinceAttempt(j gmailrelay.Job) time.Duration {
	end := attemptEnd(j)
	d := p.now.Sub(end)
	for _, st := range p.s.clock.steps {
		if st.size > 0 && end.Before(st.fence) {
			d -= st.size
		}
	}
	return d
}

// beforeStep reports whether wall time t may have been stamped before a
// step the sweeper found: the time from t to now is off by the step.
func (p *pass) beforeStep(t time.Time) bool {
	for _, st := range p.s.clock.steps {
		if t.Before(st.fence) {
			return true
		}
	}
	return false
}

// stepSpan is how far wall time t may be off today's wall clock because of
// steps found since it was stamped: the sum of their sizes, either way.
func (p *pass) stepSpan(t time.Time) time.Duration {
	var d time.Duration
	for _, st := range p.s.clock.steps {
		if t.Before(st.fence) {
			d += st.size.Abs()
		}
	}
	return d
}
