package relay

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// MaxClockSkew is how far a replica's clock may be from the shared log's
// (PostgreSQL's) before the clock fence stops it. Replicas compare times
// other replicas wrote (a forwarding job's lease, a mailbox's Gmail pause)
// with their own clocks: a replica whose clock is ahead would take over
// live attempts and publish pauses that stop the others for as long as it
// is ahead. NTP keeps clocks within milliseconds; 5 s is far beyond that
// and well within the shortest lease (twice a 10 s send timeout), and
// RecoverExpired honours a lease for this much longer again, so a skew the
// fence lets through never expires a live lease.
const MaxClockSkew = 5 * time.Second

// clockFenceRetry is the Retry-After of a send the fence refuses: the
// caller's retry may reach another replica (a load balancer in front).
const clockFenceRetry = 5

// ErrClockSkew is the cause (Error.Err) of every refusal of the clock
// fence, for errors.Is: the sweeper and the outbox do not log it again.
var ErrClockSkew = errors.New("clock skew beyond the fence")

// ClockChecker is implemented by a log several replicas share that has a
// clock of its own (pglog: PostgreSQL's). A log of one process (bbolt) has
// no need of it.
type ClockChecker interface {
	// ClockOffset measures how far the clock now is from the log's: the
	// log's reading minus now's at the midpoint of a round trip (positive
	// when now is behind), and half that round trip as the measurement's
	// uncertainty. now is the caller's clock, the one its leases and
	// pauses are written with. It returns an error when the log cannot be
	// reached (or is closed).
	ClockOffset(ctx context.Context, now func() time.Time) (offset, uncertainty time.Duration, err error)
}

// ClockStatus is what the clock fence last measured.
type ClockStatus struct {
	// On: the log is shared and has a clock (ClockChecker) and the
	// Service's clock is not a manual one (Config.ManualClock). Off, the
	// rest is zero.
	On bool
	// At is when (on the Service's clock) the last measurement that
	// succeeded was taken; zero before the first.
	At time.Time
	// Offset is the log's clock minus this replica's, Uncertainty its
	// margin of error (half a round trip).
	Offset, Uncertainty time.Duration
	// Fenced: the last conclusive measurement put the offset beyond
	// MaxClockSkew (see Service.CheckClock).
	Fenced bool
	// Err is the last measurement's error, if it failed ("" otherwise).
	Err string
}

// String says the status in a sentence (for /readyz).
func (c ClockStatus) String() string {
	switch {
	case !c.On:
		return "not checked (no shared log with a clock, or a manual clock)"
	case c.Fenced:
		return fmt.Sprintf("fenced: %s, beyond the %s replicas allow: no sends, no lease take-overs, no sweeper or outbox work until it is fixed (NTP)",
			describeOffset(c.Offset, c.Uncertainty), MaxClockSkew)
	case c.Err != "":
		return "last measurement failed: " + c.Err
	case c.At.IsZero():
		return "not measured yet"
	}
	return fmt.Sprintf("in step: %s (bound %s)", describeOffset(c.Offset, c.Uncertainty), MaxClockSkew)
}

// describeOffset says which way this replica's clock is off.
func describeOffset(offset, uncertainty time.Duration) string {
	way, d := "ahead of", -offset
	if offset > 0 {
		way, d = "behind", offset
	}
	return fmt.Sprintf("this replica's clock is %s (±%s) %s the shared log's clock",
		d.Round(time.Millisecond), uncertainty.Round(time.Millisecond), way)
}

// clockFence keeps the fence's measurements. mu guards st; measuring
// serialises measurements, so a slow one never overwrites a later one.
type clockFence struct {
	checker   ClockChecker // nil: the fence is off
	measuring sync.Mutex
	mu        sync.Mutex
	st        ClockStatus
}

// initClockFence turns the fence on when the log is shared, can read its
// own clock, and the Service's clock is a real one.
func (s *Service) initClockFence(cfg Config) {
	if cc, ok := s.log.(ClockChecker); ok && s.shared && !cfg.ManualClock {
		s.clock.checker = cc
		s.clock.st.On = true
	}
}

// CheckClock measures this replica's clock against the shared log's and
// returns the fence's verdict, as ClockFenced does. A measurement decides
// only when it is conclusive: the offset is beyond MaxClockSkew even
// with its uncertainty taken off (fenced), or within it even with the
// uncertainty added (not fenced); a measurement that fails or is not
// conclusive leaves the last verdict. A change of verdict is logged once
// (an ERROR naming the offset when the fence closes). New calls it
// before recovering leases, every sweeper pass and /readyz call it. With
// the fence off it does nothing and returns nil.
func (s *Service) CheckClock(ctx context.Context) error {
	f := &s.clock
	if f.checker == nil {
		return nil
	}
	f.measuring.Lock()
	defer f.measuring.Unlock()
	off, unc, err := f.checker.ClockOffset(ctx, s.now)
	f.mu.Lock()
	was := f.st.Fenced
	if err != nil {
		f.st.Err = err.Error()
	} else {
		f.st.Err, f.st.At, f.st.Offset, f.st.Uncertainty = "", s.now(), off, unc
		switch abs := max(off, -off); {
		case abs-unc > MaxClockSkew:
			f.st.Fenced = true
		case abs+unc <= MaxClockSkew:
			f.st.Fenced = false
		}
	}
	st := f.st
	f.mu.Unlock()
	switch {
	case st.Fenced && !was:
		s.logger.Error().Dur("clock_offset", st.Offset).Dur("clock_uncertainty", st.Uncertainty).Dur("clock_bound", MaxClockSkew).
			Msg("clock fence: " + describeOffset(st.Offset, st.Uncertainty) + ": this replica refuses new sends (503), takes over no leases, " +
				"and runs no sweeper decisions or outbox deliveries until its clock is back within the bound (fix NTP)")
	case !st.Fenced && was:
		s.logger.Warn().Dur("clock_offset", st.Offset).Msg("clock fence lifted: " + describeOffset(st.Offset, st.Uncertainty))
	}
	return s.ClockFenced()
}

// ClockStatus returns the fence's last measurement.
func (s *Service) ClockStatus() ClockStatus {
	s.clock.mu.Lock()
	defer s.clock.mu.Unlock()
	return s.clock.st
}

// ClockFenced returns nil unless the last conclusive measurement put this
// replica's clock more than MaxClockSkew from the shared log's; then a
// *Error (CodeUnavailable, Retry-After, cause ErrClockSkew) naming the
// offset. It does not measure (see CheckClock).
func (s *Service) ClockFenced() error {
	st := s.ClockStatus()
	if !st.Fenced {
		return nil
	}
	return &Error{Code: CodeUnavailable, RetryAfter: clockFenceRetry, Err: ErrClockSkew,
		Message: describeOffset(st.Offset, st.Uncertainty) + ", beyond the " + MaxClockSkew.String() +
			" the replicas allow; this replica takes no sends until its clock is fixed; nothing was sent"}
}
