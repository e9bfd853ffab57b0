package sweeper_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/internal/testclock"
	"github.com/gmailrelay/gmailrelay/internal/testenv"
)

// hostClock is the relay host's wall clock: Google's (real) plus an offset
// that Step moves, as NTP or a skewed VM does, without real time passing.
type hostClock struct {
	mu   sync.Mutex
	real *testclock.Clock
	off  time.Duration
}

func (c *hostClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.real.Now().Add(c.off)
}

// Step moves the host's wall clock by d (either sign); real time stays.
func (c *hostClock) Step(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.off += d
}

// rewrittenAmbiguous sends a message Gmail stores under a Message-ID of
// its own and answers 500 for, then a confirmed send 10 s later (the
// witness), then calls between (which may move the host's clock) and
// sweeps four times a grace apart, and more while between says so.
func rewrittenAmbiguous(r *stepRig, between func()) string {
	r.srv.SetRewrite(gmailfake.RewritePolicy{Mode: gmailfake.RewriteAlways})
	id := r.send(gmailfake.ActionAcceptThenError)
	r.srv.SetRewrite(gmailfake.RewritePolicy{})
	r.clock.Advance(10 * time.Second)
	r.send("")
	between()
	for range 8 {
		r.clock.Advance(grace)
		r.sweep()
	}
	return id
}

// TestEmulatorSkewedClockStillSeesARewrittenCopy: the window check before
// a resend lists the Sent messages Gmail dated in the attempt's window. On
// the host's clock, a few seconds off Google's, it would look in the wrong
// window: the ambiguous send Gmail stored under a Message-ID of its own
// would go unseen, the job be resent and Gmail deliver it twice, and the
// verify pass, searching by the relay's id, never notice (emulator ground
// truth: 2 deliveries at ±5 s and ±30 s). So the window is placed on
// Gmail's clock, measured from the Date of its answers, and the pass warns
// once that the host's clock is off.
func TestEmulatorSkewedClockStillSeesARewrittenCopy(t *testing.T) {
	for _, off := range []time.Duration{0, 5 * time.Second, -5 * time.Second, 30 * time.Second, -30 * time.Second} {
		t.Run(fmt.Sprintf("host-google=%s", off), func(t *testing.T) {
			var logs testenv.LockedBuffer
			logger := zerolog.New(&logs)
			r := newStepRig(t, rigSetup{logger: &logger})
			r.host.Step(off)
			id := rewrittenAmbiguous(r, func() {})
			r.wantDeliveries(id, 1, "Gmail stored the ambiguous send under its own id")
			if j := r.job(id); j.State != gmailrelay.StateReview {
				t.Errorf("job %s, want review (a Gmail-made id in the attempt's window)", j.State)
			}
			warned, want := strings.Count(logs.String(), "clock is off Gmail's"), 1
			if off == 0 {
				want = 0
			}
			if warned != want {
				t.Errorf("%d warnings that the clock is off Gmail's, want %d", warned, want)
			}
		})
	}
}

// TestEmulatorClockStepStillSeesARewrittenCopy: after a step of the host's
// clock, the offset to Gmail's is measured anew, but the attempt was
// stamped on the clock before the step: its window widens by the step, or
// it would miss the copy Gmail stored under its own id (2 deliveries).
func TestEmulatorClockStepStillSeesARewrittenCopy(t *testing.T) {
	for _, step := range []time.Duration{2 * time.Minute, -2 * time.Minute, time.Hour} {
		t.Run(fmt.Sprint(step), func(t *testing.T) {
			r := newStepRig(t, rigSetup{mono: true})
			r.sweep() // a first reading of both clocks
			id := rewrittenAmbiguous(r, func() {
				r.host.Step(step)
				r.sweep() // finds the step
			})
			for range int(max(step, -step)/grace) + 8 {
				r.clock.Advance(grace)
				r.sweep()
			}
			r.wantDeliveries(id, 1, "Gmail stored the ambiguous send under its own id")
			if j := r.job(id); j.State != gmailrelay.StateReview {
				t.Errorf("job %s, want review (a Gmail-made id in the attempt's window)", j.State)
			}
		})
	}
}

// TestEmulatorForeignDateNeverNarrowsTheWindow: a Date that is not
// Google's (a proxy's clock, 5 s or an hour behind) gave the relay a
// wrong offset, the window moved off the copy Gmail stored under its own
// id, and the job was resent: 2 deliveries. The window only widens from
// the host clock's, which agrees with Google's here.
func TestEmulatorForeignDateNeverNarrowsTheWindow(t *testing.T) {
	for _, off := range []time.Duration{-5 * time.Second, -time.Hour, 5 * time.Second} {
		t.Run(fmt.Sprint(off), func(t *testing.T) {
			r := newStepRig(t, rigSetup{dates: func(now time.Time) time.Time { return now.Add(off) }})
			id := rewrittenAmbiguous(r, func() {})
			r.wantDeliveries(id, 1, "Gmail stored the ambiguous send under its own id")
			if j := r.job(id); j.State != gmailrelay.StateReview {
				t.Errorf("job %s, want review (a Gmail-made id in the attempt's window)", j.State)
			}
		})
	}
}
