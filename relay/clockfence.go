package relay

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// MaxClockSkew is how far a replica's clock may be from the other
// replicas' before the clock fence stops it. Replicas compare times other
// replicas wrote (a forwarding job's lease, a mailbox's Gmail pause) with
// their own clocks: a replica whose clock is ahead would take over live
// attempts and publish pauses that stop the others for as long as it is
// ahead. NTP keeps clocks within milliseconds; 5 s is far beyond that and
// well within the shortest lease (twice a 10 s send timeout), and
// RecoverExpired honours a lease for longer again, so a skew the fence
// lets through never expires a live lease.
const MaxClockSkew = 5 * time.Second

// clockFenceRetry is the Retry-After of a send the fence refuses: the
// caller's retry may reach another replica (a load balancer in front).
const clockFenceRetry = 5

// clockFresh is how long a measurement serves RecentClock (/readyz), on
// the process's monotonic clock.
const clockFresh = 10 * time.Second

// ErrClockSkew is the cause (Error.Err) of every refusal of the clock
// fence, for errors.Is: the sweeper and the outbox do not log it again.
var ErrClockSkew = errors.New("clock skew beyond the fence")

// ClockChecker is implemented by a log several replicas share that has a
// clock of its own (pglog: a database's), through which the replicas
// compare their clocks. A log of one process (bbolt) has no need of it.
type ClockChecker interface {
	// MeasureClock measures how far now is from the log's clock,
	// publishes that offset for the other replicas, and returns it with
	// the offsets the other live replicas published lately. now is the
	// caller's clock, the one its leases and pauses are written with. It
	// returns an error when the log cannot be reached (or is closed). The
	// fence (Service.CheckClock) compares this replica's clock with the
	// median of the live replicas' and the log's.
	MeasureClock(ctx context.Context, now func() time.Time) (ClockReading, error)
}

// ClockReading is one measurement of MeasureClock.
type ClockReading struct {
	// Offset is the log's clock minus now's at the midpoint of a round
	// trip (positive when now is behind), Uncertainty half that round
	// trip.
	Offset, Uncertainty time.Duration
	// Peers are the offsets (the log's clock minus theirs) the other live
	// replicas measured lately; none when this replica is alone.
	Peers []time.Duration
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
	// Offset is the reference clock minus this replica's, Uncertainty its
	// margin of error (half a round trip). The reference is the median
	// of the live replicas' clocks (this one's included) and the log's,
	// each measured through the log's clock; with no other replica's
	// clock published lately (Peers 0) it is the log's clock, unless
	// Google's (a Gmail client's GmailClock) agrees with this replica's.
	// A replica alone still writes leases and pauses the replicas after
	// it read, so it is fenced too.
	Offset, Uncertainty time.Duration
	// Peers is how many other live replicas voted.
	Peers int
	// LogOffset is the log's clock minus the reference (with no peer:
	// minus this replica's clock). LogOff: the last conclusive measurement
	// put it beyond MaxClockSkew (the log's clock is off; no replica is
	// fenced for it).
	LogOffset time.Duration
	LogOff    bool
	// Fenced: the last conclusive measurement put the offset beyond
	// MaxClockSkew (see Service.CheckClock).
	Fenced bool
	// Err is the last measurement's error, if it failed ("" otherwise).
	Err string
}

// String says the status in a sentence (for /readyz).
func (c ClockStatus) String() string {
	var s string
	switch {
	case !c.On:
		return "not checked (no shared log with a clock, or a manual clock)"
	case c.Fenced:
		s = fmt.Sprintf("fenced: %s, beyond the %s replicas allow: no sends, no lease take-overs, no sweeper or outbox work until it is fixed (NTP)",
			describeOffset(c.Offset, c.Uncertainty, c.Peers), MaxClockSkew)
	case c.Err != "":
		s = "last measurement failed: " + c.Err
	case c.At.IsZero():
		return "not measured yet"
	default:
		s = fmt.Sprintf("in step: %s (bound %s)", describeOffset(c.Offset, c.Uncertainty, c.Peers), MaxClockSkew)
	}
	if c.LogOff {
		s += "; " + describeLogOffset(c.LogOffset, c.Peers)
	}
	return s
}

// describeOffset says which way this replica's clock is off, and from what.
func describeOffset(offset, uncertainty time.Duration, peers int) string {
	way, d := "ahead of", -offset
	if offset > 0 {
		way, d = "behind", offset
	}
	ref := "the database's (no other replica has published its clock lately)"
	if peers > 0 {
		ref = fmt.Sprintf("the other replicas' (the median of %d other live %s and the database's, measured through the database's clock)",
			peers, plural(peers, "replica", "replicas"))
	}
	return fmt.Sprintf("this replica's clock is %s (±%s) %s %s",
		d.Round(time.Millisecond), uncertainty.Round(time.Millisecond), way, ref)
}

// describeLogOffset says which way the log's (database's) clock is off
// the replicas'.
func describeLogOffset(off time.Duration, peers int) string {
	way, d := "ahead of", off
	if off < 0 {
		way, d = "behind", -off
	}
	ref := "the replicas' (median)"
	if peers == 0 {
		ref = "this replica's (no other replica's clock published lately) and Google's"
	}
	return fmt.Sprintf("the database's clock is %s %s %s: fix its time sync; replicas are not fenced for it",
		d.Round(time.Millisecond), way, ref)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// median returns the middle of ds (the mean of the two middle ones when
// there are an even number); ds is sorted in place.
func median(ds []time.Duration) time.Duration {
	slices.Sort(ds)
	n := len(ds)
	if n%2 == 1 {
		return ds[n/2]
	}
	return ds[n/2-1] + (ds[n/2]-ds[n/2-1])/2
}

// clockFence keeps the fence's measurements. sem (one slot) serialises
// measurements, so a slow one never overwrites a later one; waiting for
// it honours the caller's context. mu guards st and measured.
type clockFence struct {
	checker  ClockChecker // nil: the fence is off
	sem      chan struct{}
	mu       sync.Mutex
	st       ClockStatus
	measured time.Time // when the last measurement ended (time.Now: monotonic)
}

// initClockFence turns the fence on when the log is shared, can read its
// own clock, and the Service's clock is a real one.
func (s *Service) initClockFence(cfg Config) {
	s.clock.sem = make(chan struct{}, 1)
	if cc, ok := s.log.(ClockChecker); ok && s.shared && !cfg.ManualClock {
		s.clock.checker = cc
		s.clock.st.On = true
	}
}

// CheckClock measures this replica's clock against the other live
// replicas' and returns the fence's verdict, as ClockFenced does. The
// reference is the median of the live replicas' clocks (this one's
// included) and the shared log's, each replica's measured through the
// log's clock: two replicas that agree outvote a log whose clock is off,
// and a replica that is off is outvoted by the log and one that agrees
// with it. With no other replica's clock published lately (starting
// first, a rolling restart, peers of an older version) the reference is
// the log's clock, unless Google's agrees with this replica's (then the
// log's is off, and only warned about): a replica alone writes leases and
// Gmail pauses the replicas after it will read. A
// measurement decides only when it is conclusive: the offset is beyond
// MaxClockSkew even with its uncertainty taken off (fenced), or within it
// even with the uncertainty added (not fenced); a measurement that fails
// or is not conclusive leaves the last verdict. A change of verdict is
// logged once (an ERROR naming the offset when the fence closes), and so
// is a log clock that is off the replicas' (a warning). New calls it
// before recovering leases, every sweeper pass calls it; /readyz uses
// RecentClock. It waits for a measurement in progress first (until ctx is
// done: then it returns the last verdict). With the fence off it does
// nothing and returns nil.
func (s *Service) CheckClock(ctx context.Context) error {
	f := &s.clock
	if f.checker == nil {
		return nil
	}
	select {
	case f.sem <- struct{}{}:
	case <-ctx.Done():
		return s.ClockFenced()
	}
	defer func() { <-f.sem }()
	s.measureClock(ctx)
	return s.ClockFenced()
}

// RecentClock returns the fence's status as of a measurement that ended
// less than 10 s ago on the process's monotonic clock, measuring (as
// CheckClock) only when there is none. Concurrent callers share one
// measurement: while one runs they wait for it, until ctx is done (then
// they get the last status). The measurement runs on a context of its own
// (5 s), so a caller that goes away does not turn into a failed one.
func (s *Service) RecentClock(ctx context.Context) ClockStatus {
	f := &s.clock
	if f.checker == nil {
		return s.ClockStatus()
	}
	fresh := func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return !f.measured.IsZero() && time.Since(f.measured) < clockFresh
	}
	if fresh() {
		return s.ClockStatus()
	}
	select {
	case f.sem <- struct{}{}:
	case <-ctx.Done():
		return s.ClockStatus()
	}
	defer func() { <-f.sem }()
	if !fresh() { // nobody measured while this one waited
		mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		s.measureClock(mctx)
		cancel()
	}
	return s.ClockStatus()
}

// measureClock takes one measurement and updates the verdict; the caller
// holds sem.
func (s *Service) measureClock(ctx context.Context) {
	f := &s.clock
	r, err := f.checker.MeasureClock(ctx, s.now)
	f.mu.Lock()
	f.measured = time.Now()
	was, wasLogOff := f.st.Fenced, f.st.LogOff
	if err != nil {
		f.st.Err = err.Error()
	} else {
		// Each voter's clock as the log's minus it: this replica's, the
		// peers', the log's (0). Their median is the log's clock minus
		// the reference.
		off, logOff := r.Offset, r.Offset
		if len(r.Peers) > 0 {
			logOff = median(append([]time.Duration{r.Offset, 0}, r.Peers...))
			off = r.Offset - logOff
		}
		f.st.Err, f.st.At, f.st.Offset, f.st.Uncertainty, f.st.Peers, f.st.LogOffset = "", s.now(), off, r.Uncertainty, len(r.Peers), logOff
		f.st.Fenced = conclusive(off, r.Uncertainty, f.st.Fenced)
		f.st.LogOff = conclusive(logOff, r.Uncertainty, f.st.LogOff)
		if len(r.Peers) == 0 {
			// No other replica's clock to compare with: the database's
			// decides, unless Google's agrees with this replica's (then
			// the database is off).
			vouched := f.st.Fenced && s.gmailVouches()
			f.st.Fenced = f.st.Fenced && !vouched
			f.st.LogOff = vouched
		}
	}
	st := f.st
	f.mu.Unlock()
	switch {
	case st.Fenced && !was:
		s.logger.Error().Dur("clock_offset", st.Offset).Dur("clock_uncertainty", st.Uncertainty).Int("clock_peers", st.Peers).Dur("clock_bound", MaxClockSkew).
			Msg("clock fence: " + describeOffset(st.Offset, st.Uncertainty, st.Peers) + ": this replica refuses new sends (503), takes over no leases, " +
				"and runs no sweeper decisions or outbox deliveries until its clock is back within the bound (fix NTP)")
	case !st.Fenced && was:
		s.logger.Warn().Dur("clock_offset", st.Offset).Msg("clock fence lifted: " + describeOffset(st.Offset, st.Uncertainty, st.Peers))
	}
	switch {
	case st.LogOff && !wasLogOff:
		s.logger.Warn().Dur("clock_log_offset", st.LogOffset).Int("clock_peers", st.Peers).Dur("clock_bound", MaxClockSkew).
			Msg("clock: " + describeLogOffset(st.LogOffset, st.Peers))
	case !st.LogOff && wasLogOff:
		s.logger.Info().Dur("clock_log_offset", st.LogOffset).Msg("clock: the database's clock is back within " + MaxClockSkew.String() + " of the replicas'")
	}
}

// conclusive returns whether off (± unc) is beyond MaxClockSkew when the
// measurement says so either way, and last when it does not.
func conclusive(off, unc time.Duration, last bool) bool {
	switch abs := max(off, -off); {
	case abs-unc > MaxClockSkew:
		return true
	case abs+unc <= MaxClockSkew:
		return false
	}
	return last
}

// gmailVouches reports whether a mailbox's Gmail client has bounded
// Google's clock (relay.GmailClock, from the Date of its answers) within
// MaxClockSkew of this replica's: with no other replica's clock to compare
// with, Google's decides between this replica's and the database's.
func (s *Service) gmailVouches() bool {
	for _, m := range s.boxes {
		if gc, ok := m.provider.(GmailClock); ok {
			if lo, hi, known := gc.ClockOffset(); known && lo >= -MaxClockSkew && hi <= MaxClockSkew {
				return true
			}
		}
	}
	return false
}

// ClockStatus returns the fence's last measurement.
func (s *Service) ClockStatus() ClockStatus {
	s.clock.mu.Lock()
	defer s.clock.mu.Unlock()
	return s.clock.st
}

// ClockFenced returns nil unless the last conclusive measurement put this
// replica's clock more than MaxClockSkew from the other replicas'
// (CheckClock); then a *Error (CodeUnavailable, Retry-After, cause
// ErrClockSkew) naming the offset. It does not measure.
func (s *Service) ClockFenced() error {
	st := s.ClockStatus()
	if !st.Fenced {
		return nil
	}
	return &Error{Code: CodeUnavailable, RetryAfter: clockFenceRetry, Err: ErrClockSkew,
		Message: describeOffset(st.Offset, st.Uncertainty, st.Peers) + ", beyond the " + MaxClockSkew.String() +
			" the replicas allow; this replica takes no sends until its clock is fixed; nothing was sent"}
}
