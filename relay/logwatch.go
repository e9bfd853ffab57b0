package relay

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/internal/lifecycle"
)

// LogRefusedRetry is the Retry-After, in seconds, of a send or attempt
// refused because the acceptance log refuses writes: a little more than
// two of the LogWatch's probes at its default interval.
const LogRefusedRetry = 5

// LogRefused is the CodeUnavailable error of a request the acceptance
// log refused before Gmail was called (err wraps
// gmailrelay.ErrWritesRefused): nothing was sent.
func LogRefused(err error) *Error {
	return &Error{Code: CodeUnavailable, RetryAfter: LogRefusedRetry, Err: err,
		Message: "the acceptance log refuses writes (GET /readyz says why); nothing was sent; retry later"}
}

// errOutcomeRefused is the CodeUnavailable error of an attempt Gmail was
// called for whose answer the log then refused to record.
func errOutcomeRefused(err error) *Error {
	return &Error{Code: CodeUnavailable, RetryAfter: LogRefusedRetry, Err: err,
		Message: "Gmail was called, but the acceptance log refused to record its answer: the job becomes unknown " +
			"once the log takes writes again, and the sweeper looks for it in the mailbox; a retry with the same key " +
			"answers from the job and never sends it twice"}
}

// logWritable refuses a send or an attempt while the log refuses writes
// (gmailrelay.WriteHealth): one made now could reach Gmail and then fail
// to record its answer. The LogWatch ends the refusal.
func (s *Service) logWritable() error {
	if err := gmailrelay.WritesRefused(s.log); err != nil {
		return LogRefused(err)
	}
	return nil
}

// admissionRefused is the error of an admission transaction that failed
// with err. When the log refused it (gmailrelay.ErrWritesRefused) after a
// forwarding record was written into it, the attempt is remembered for
// the LogWatch (the record may be stored all the same, and then nothing
// is in flight), and the caller gets LogRefused: Gmail was not called.
func (s *Service) admissionRefused(id string, attempt int, adm admission, err error) error {
	if !errors.Is(err, gmailrelay.ErrWritesRefused) {
		return err
	}
	if adm == admitForward {
		s.unlogged.add(id, attempt, false)
	}
	return LogRefused(err)
}

// logRefusal turns an error wrapping gmailrelay.ErrWritesRefused that is
// not already an *Error (a read of the log that found its storage lost)
// into LogRefused.
func logRefusal(err error) error {
	var re *Error
	if err == nil || errors.As(err, &re) || !errors.Is(err, gmailrelay.ErrWritesRefused) {
		return err
	}
	return LogRefused(err)
}

// outcomeUnlogged handles err, the failure to record the outcome of job's
// attempt after Gmail was called: the job stays in forwarding with
// nothing in flight, so the attempt is remembered for the LogWatch, which
// makes it unknown once the log takes writes (recovery at the next start
// does, if the process ends first). A refusal by the log answers 503 (see
// errOutcomeRefused); any other error is returned as it is.
func (s *Service) outcomeUnlogged(job gmailrelay.Job, err error) error {
	if errors.Is(err, errStale) {
		return err
	}
	s.unlogged.add(job.MessageID, job.Attempts, true)
	s.logger.Error().Err(err).Str("message_id", job.MessageID).
		Msg("record outcome: the job stays forwarding until the log takes writes again, then becomes unknown for the sweeper to look for")
	if errors.Is(err, gmailrelay.ErrWritesRefused) {
		return errOutcomeRefused(err)
	}
	return err
}

// maxUnlogged bounds the attempts a Service remembers for the LogWatch
// to settle; more are left to the recovery at the next start (every job
// left in forwarding becomes unknown then).
const maxUnlogged = 10_000

// unloggedAttempt is an attempt whose record the log refused: the job may
// be left in forwarding with nothing in flight.
type unloggedAttempt struct {
	attempt int
	// called: Gmail was called (its answer went unrecorded); otherwise
	// the forwarding record itself was refused, and Gmail never called.
	called bool
}

// unlogged are the attempts a LogWatch has to settle, by Message-ID.
type unlogged struct {
	mu sync.Mutex
	m  map[string]unloggedAttempt
}

func (u *unlogged) add(id string, attempt int, called bool) {
	if attempt <= 0 {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.m == nil {
		u.m = map[string]unloggedAttempt{}
	}
	if _, ok := u.m[id]; ok || len(u.m) < maxUnlogged {
		u.m[id] = unloggedAttempt{attempt: attempt, called: called}
	}
}

func (u *unlogged) snapshot() map[string]unloggedAttempt {
	u.mu.Lock()
	defer u.mu.Unlock()
	out := make(map[string]unloggedAttempt, len(u.m))
	for id, a := range u.m {
		out[id] = a
	}
	return out
}

// done forgets id's attempt a (not a later one added since).
func (u *unlogged) done(id string, a unloggedAttempt) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.m[id] == a {
		delete(u.m, id)
	}
}

func (u *unlogged) len() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.m)
}

// settle writes what is known of an unlogged attempt, if its job is still
// in forwarding with it: unknown (reason outcome_not_logged) when Gmail
// was called, for the sweeper to look for in the mailbox, as after a
// crash; failed, retryable (reason not_reached) when it was not, since
// nothing reached Gmail. A job that has moved on needs nothing.
func (s *Service) settle(ctx context.Context, id string, a unloggedAttempt) error {
	var err error
	if a.called {
		_, err = s.markUnknown(ctx, id, a.attempt, Outcome{Verdict: Unknown, Reason: gmailrelay.ReasonOutcomeNotLogged,
			Err: errors.New("the acceptance log refused to record Gmail's answer")}, "")
	} else {
		_, err = s.markFailed(ctx, id, a.attempt, Outcome{Verdict: Failed, Retryable: true, Reason: gmailrelay.ReasonNotReached,
			Err: errors.New("the acceptance log refused the attempt's record; Gmail was not called")})
	}
	if errors.Is(err, errStale) || errors.Is(err, gmailrelay.ErrNotFound) {
		return nil
	}
	return err
}

// DefaultLogWatchInterval is how often a LogWatch looks at the log.
const DefaultLogWatchInterval = 2 * time.Second

// LogCheck is what one LogWatch pass found and did.
type LogCheck struct {
	// Refused is why the log still refuses writes after the pass; nil
	// when it takes them.
	Refused error
	// Probed: the log refused writes, and the pass made a probe write.
	Probed bool
	// Settled counts the unlogged attempts the pass wrote (unknown or
	// failed); Unlogged counts those left.
	Settled, Unlogged int
}

// LogWatch brings a relay back when its acceptance log refuses writes (a
// full disk, an I/O error, a lost database): each pass makes a probe
// write while the log refuses writes, so the relay is ready again
// without a restart once one succeeds, and then settles the attempts
// whose record the log refused (see settle), so that no job is left in
// forwarding with nothing in flight. A pass with nothing to do reads an
// atomic and returns.
type LogWatch struct {
	svc      *Service
	interval time.Duration
	passMu   sync.Mutex // one pass at a time
	life     lifecycle.Loop
	checks   chan LogCheck
}

// NewLogWatch returns a LogWatch over svc's log, passing every interval
// (DefaultLogWatchInterval when ≤ 0) once started.
func NewLogWatch(svc *Service, interval time.Duration) *LogWatch {
	if interval <= 0 {
		interval = DefaultLogWatchInterval
	}
	return &LogWatch{svc: svc, interval: interval, checks: make(chan LogCheck, 64)}
}

// Checks delivers the LogCheck of every pass that probed or settled
// something (the loop's and RunOnce's), so that a test waits for the log
// to be back without polling. It holds the last 64 undelivered ones;
// later ones are dropped while it is full.
func (w *LogWatch) Checks() <-chan LogCheck { return w.checks }

// Start runs a pass every interval in the background until ctx ends or
// Stop is called.
func (w *LogWatch) Start(ctx context.Context) {
	w.life.Start(ctx, func(ctx context.Context) {
		lifecycle.Repeat(ctx, nil, func(ctx context.Context) time.Duration {
			w.RunOnce(ctx)
			return w.interval
		})
	})
}

// Stop ends the loop and waits for the pass in progress.
func (w *LogWatch) Stop() { w.life.Stop() }

// RunOnce makes one pass: a probe write when the log refuses writes, then,
// once it takes them, the settling of the unlogged attempts.
func (w *LogWatch) RunOnce(ctx context.Context) LogCheck {
	w.passMu.Lock()
	defer w.passMu.Unlock()
	s := w.svc
	var c LogCheck
	if err := gmailrelay.WritesRefused(s.log); err != nil {
		h, _ := s.log.(gmailrelay.WriteHealth)
		c.Probed = true
		if perr := h.ProbeWrite(ctx); perr != nil {
			c.Refused, c.Unlogged = gmailrelay.WritesRefused(s.log), s.unlogged.len()
			if c.Refused == nil {
				c.Refused = perr
			}
			w.deliver(c)
			return c
		}
		s.logger.Warn().Str("was", err.Error()).Msg("the acceptance log takes writes again: sends resume")
	}
	for id, a := range s.unlogged.snapshot() {
		if err := s.settle(ctx, id, a); err != nil {
			s.logger.Error().Err(err).Str("message_id", id).Msg("settle an attempt whose record the log refused; tried again on the next pass")
			continue
		}
		s.unlogged.done(id, a)
		c.Settled++
	}
	c.Refused, c.Unlogged = gmailrelay.WritesRefused(s.log), s.unlogged.len()
	if c.Settled > 0 {
		s.logger.Warn().Int("jobs", c.Settled).Msg("attempts whose record the log refused are settled: unknown when Gmail was called (the sweeper looks for them), failed otherwise")
	}
	if c.Probed || c.Settled > 0 || c.Unlogged > 0 {
		w.deliver(c)
	}
	return c
}

func (w *LogWatch) deliver(c LogCheck) {
	select {
	case w.checks <- c:
	default:
	}
}
