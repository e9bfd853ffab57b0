// Package sweeper is gmailrelay's reconciler. It closes every ambiguous
// send by asking the mailbox instead of guessing (docs/design.md#the-sweeper):
// an unknown job found exactly once among the mailbox's SENT messages is
// sent; found twice it is a duplicate for a human; still missing after its
// channel's checks it is resent with the same Message-ID on at-least-once
// channels and handed to a human on review-only ones. It also retries
// retryable failures on at-least-once channels, and verifies sent jobs once
// (a hit proves existence, not uniqueness).
//
// The sweeper only touches jobs the acceptance log's due index names (no
// full scans), spends Gmail quota through the relay's shared budget as
// background work (sends go first), and backs off when Gmail says 429. Every
// search and every decision is a line in the log, written in the same
// transaction as the job change it explains and guarded so that a job that
// moved on meanwhile is left alone.
//
// Deciding and writing are apart. A pass gathers the evidence about a job
// (the search's hits and witness, a handle read back, the attempts used, a
// lag sample), and a pure function (decideUnknown, decideFailed,
// decideVerify, in decide.go) turns it, with the job as read, its channel's
// policy and the pass's clock, into a decision: a plain value holding the
// lines to write, the state to move to, the job's checks, verify looks and
// next check after the write, the edit of its mailbox's record, what to
// count and log, and whether a resend or retry follows. pass.apply
// (apply.go) is the one place that writes a decision, in one Mutate whose
// guard re-checks the job.
package sweeper

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/internal/lifecycle"
	"github.com/gmailrelay/gmailrelay/policy"
	"github.com/gmailrelay/gmailrelay/relay"
)

// Defaults for Config's zero values.
const (
	DefaultBatchSize = 20
	DefaultInterval  = 5 * time.Second
	DefaultLimit     = 500
)

// Reasons written on the sweeper's lines (see acceptlog's Reason
// constants). Lines that change a job's state carry one of these; search
// lines of the verify pass carry a Verify* one.
const (
	ReasonFound              = gmailrelay.ReasonFound
	ReasonReviewChannel      = gmailrelay.ReasonReviewChannel
	ReasonDuplicate          = gmailrelay.ReasonDuplicate
	ReasonMissingAfterChecks = gmailrelay.ReasonMissingAfterChecks
	ReasonMaxAttempts        = gmailrelay.ReasonMaxAttempts
	ReasonHandleUntrusted    = gmailrelay.ReasonHandleUntrusted
	ReasonResend             = gmailrelay.ReasonSweeperResend
	ReasonRetry              = gmailrelay.ReasonSweeperRetry
	ReasonVerified           = gmailrelay.ReasonVerified
	ReasonVerifyMiss         = gmailrelay.ReasonVerifyMiss
	ReasonVerifyGaveUp       = gmailrelay.ReasonVerifyGaveUp
)

// sentLabel is the label every search is restricted to.
const sentLabel = "SENT"

// maxPageSize is the largest maxResults Gmail accepts for messages.list.
const maxPageSize = 500

// errorDelay is how much later a job is looked at again when its search
// failed with a 5xx or transport error (never more than its grace).
const errorDelay = 30 * time.Second

// maxHeaders bounds the cache of Message-IDs read back from Gmail.
const maxHeaders = 10000

// Config wires a Sweeper: Log, Mailboxes, Policy and Attempter are
// required; a relay process sets them, and Replicas, from the relay.Service
// and the log it built.
type Config struct {
	// Log is the acceptance log whose due jobs the sweeper settles.
	Log gmailrelay.Store
	// Mailboxes gives each job's mailbox: the Gmail client that searches
	// it and reads stored Message-IDs, and its quota (shared with the send
	// path). Every Gmail call for a job goes to its own mailbox.
	Mailboxes Mailboxes
	// Policy gives each job's channel rules.
	Policy *policy.Policy
	// Attempter makes the sweeper's resends and retries through the normal
	// send path.
	Attempter Attempter
	// Replicas, on a Log several relays share (gmailrelay.IsShared), is
	// the send path's side of sharing it: New sets Fence and Expire from
	// it when they are nil. On a log of one relay it is not used.
	Replicas Replicas
	// Logger receives the sweeper's decisions and errors; nil means none.
	Logger *zerolog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Mono is a monotonic clock: the time since a fixed instant, which no
	// change of the wall clock moves. Passes compare how far it and Now
	// moved to find a step of the wall clock (see clockstep.go). nil means
	// the monotonic reading Go's time.Now puts in each reading of Now; a
	// Now whose readings carry none (a manual clock: tests, --clock manual)
	// then never shows a step.
	Mono func() time.Duration
	// BatchSize is how many Message-IDs share one search query (default 20).
	BatchSize int
	// Interval is the loop's period (default 5s). Wake runs a pass sooner.
	Interval time.Duration
	// Limit is how many due jobs one pass takes (default 500).
	Limit int
	// Expire, when set, runs first in every pass: it turns unknown the
	// attempts whose lease ran out. On a shared log New sets it from
	// Replicas: RefreshQuotaShares, then RecoverExpired.
	Expire func(ctx context.Context) (int, error)
	// Fence, when set, runs before every pass: when it returns an error
	// the pass reads and changes nothing (no lease expiry, no search, no
	// decision) and RunOnce returns that error. On a shared log New sets
	// it to Replicas.CheckClock, the clock fence: a replica whose clock is
	// off must not judge others' leases nor decide by its clock. The loop
	// does not log relay.ErrClockSkew (the fence has).
	Fence func(ctx context.Context) error
	// DisableWitness turns the witness rule off: every search miss counts
	// (no witness in the query, no companion after: query, no recorded
	// witness, no lag floor, no window check before a resend). Only for tests and benchmarks that compare the two rules; a
	// relay never sets it.
	DisableWitness bool
	// History turns the history tail on (see history.go): each mailbox
	// whose Gmail client reads history (relay.HistoryReader) has its SENT
	// history read from a cursor kept in the log, beside the searches.
	History bool
}

// Attempter is the send path as the sweeper uses it: a new attempt of a
// job (relay.Service.Attempt) fenced on the states and the attempt count
// the sweeper read, so that a job another replica resent meanwhile is not
// resent again.
type Attempter interface {
	Attempt(ctx context.Context, r relay.AttemptRequest) (relay.Result, error)
}

// Mailboxes is the relay's set of mailboxes as the sweeper uses it
// (relay.Service).
type Mailboxes interface {
	// MailboxOf returns the mailbox a job's Mailbox names.
	MailboxOf(name string) (*relay.Mailbox, error)
	// Mailboxes returns every mailbox.
	Mailboxes() []*relay.Mailbox
}

// Replicas is the send path's side of a log several relays share
// (relay.Service), as the sweeper uses it on every pass.
type Replicas interface {
	// CheckClock measures this replica's clock against the others' (the
	// clock fence) and returns relay.ErrClockSkew while it is off.
	CheckClock(ctx context.Context) error
	// RefreshQuotaShares divides each mailbox's quota between the
	// replicas alive now.
	RefreshQuotaShares(ctx context.Context) error
	// RecoverExpired turns unknown the attempts whose lease ran out.
	RecoverExpired(ctx context.Context) (int, error)
}

// withReplicas sets c's Fence and Expire from c.Replicas when the log is
// shared and they are not set.
func (c Config) withReplicas() Config {
	r := c.Replicas
	if r == nil || !gmailrelay.IsShared(c.Log) {
		return c
	}
	if c.Fence == nil {
		c.Fence = r.CheckClock
	}
	if c.Expire == nil {
		logger := c.Logger
		c.Expire = func(ctx context.Context) (int, error) {
			// Each pass also divides the quota again between the
			// replicas alive now; a failed count keeps the last shares.
			if err := r.RefreshQuotaShares(ctx); err != nil && ctx.Err() == nil {
				logger.Warn().Err(err).Msg("quota shares: the replicas could not be counted; keeping the last shares")
			}
			return r.RecoverExpired(ctx)
		}
	}
	return c
}

// Result counts what passes did. Each job a pass takes is counted in
// Deferred when the pass stopped before deciding it, and otherwise in the
// counters of what was done with it.
type Result struct {
	// Due: jobs the pass took from the due index.
	Due int `json:"due"`
	// Checked: jobs whose Message-ID was searched and the answer recorded.
	Checked int `json:"checked"`
	// Found: unknown jobs with exactly one SENT hit (sent on retry
	// channels, review on review-only channels).
	Found int `json:"found"`
	// Duplicates: jobs with two or more SENT hits, or two or more own
	// effect lines (now in review).
	Duplicates int `json:"duplicates"`
	// Missed: searches without a hit after which the job was checked again
	// later (inside the channel's checks, or once more on the verify pass).
	Missed int `json:"missed"`
	// Resent: unknown jobs given a new attempt after their last miss.
	Resent int `json:"resent"`
	// Retried: retryable failed jobs given a new attempt.
	Retried int `json:"retried"`
	// Reviewed: jobs moved to review, whatever the reason.
	Reviewed int `json:"reviewed"`
	// Deferred: due jobs left due because the quota budget was spent or
	// Gmail asked to slow down; the next pass takes them first.
	Deferred int `json:"deferred"`
	// Verified: sent jobs whose single SENT hit the verify pass confirmed.
	Verified int `json:"verified"`
	// Unwitnessed: search misses of unknown jobs that did not count, for
	// want of a witness (the job is checked again after grace), or of
	// time (the measured lag, a step of the wall clock).
	Unwitnessed int `json:"unwitnessed"`
	// Errors: Gmail calls or log writes that failed (5xx, transport); the
	// jobs concerned stay due and are looked at again a little later.
	Errors int `json:"errors"`
	// Wait is how long to wait before the next pass can make progress when
	// the pass was cut short (quota or backoff); zero otherwise. In Totals
	// it is the last pass's.
	Wait time.Duration `json:"wait"`
	// partial: only some mailboxes had to wait (Wait is the shortest
	// wait); the others carried on.
	partial bool
}

// add sums o's counters into r and keeps o's Wait (Totals keeps the last
// pass's).
func (r *Result) add(o Result) {
	oc := o.counters()
	for i, c := range r.counters() {
		*c += *oc[i]
	}
	r.Wait = o.Wait
}

// counters lists r's counters, in field order (a test checks it names every
// int field).
func (r *Result) counters() []*int {
	return []*int{&r.Due, &r.Checked, &r.Found, &r.Duplicates, &r.Missed, &r.Resent,
		&r.Retried, &r.Reviewed, &r.Deferred, &r.Verified, &r.Unwitnessed, &r.Errors}
}

// passesBuffer is how many finished passes Passes holds for a slow reader.
const passesBuffer = 64

// Sweeper is the reconciler. Its methods are safe for concurrent use;
// passes never overlap.
type Sweeper struct {
	deps Config // the dependencies New was given
	log  gmailrelay.Store
	// shared: several replicas write the log (gmailrelay.IsShared), so
	// the mailboxes' records can change under this relay between passes.
	// Decided once, here, like ConfigFor's Fence and Expire.
	shared   bool
	now      func() time.Time
	batch    int
	limit    int
	interval time.Duration

	passMu sync.Mutex // serialises passes
	// headers maps Gmail message ids to their Message-ID (immutable in
	// Gmail), so that a pass cut short by quota does not read the same
	// messages again. Guarded by passMu; bounded by maxHeaders.
	headers map[string]string
	// sends holds, per mailbox, the confirmed sends passes have seen, by
	// creation time (see noteSends): the witnesses of later searches.
	// Guarded by passMu; bounded by maxSendRefs per mailbox.
	sends map[string][]sendRef
	// activity maps a mailbox to the latest creation time of any job a
	// pass has seen. Guarded by passMu.
	activity map[string]time.Time
	// lags is the measured index lag per mailbox, as the mailboxes'
	// records in the log hold it (see loadLags).
	lags lagBook
	// skewWarned is when a pass last warned that this host's clock is off
	// Gmail's (see gmailSpan). Guarded by passMu.
	skewWarned time.Time
	// clock watches Now for steps (see clockstep.go). Guarded by passMu.
	clock clockWatch
	// historyRead is when each mailbox's history was last read (see
	// histories). Guarded by passMu.
	historyRead map[string]time.Time
	// reports counts the delivery reports the tail read (reports.go).
	reports reportCounts
	// verifying are the sent jobs the history may verify (historyverify.go).
	verifying verifyingJobs

	totalsMu sync.Mutex
	totals   Result

	passes chan Result
	wake   chan struct{}

	life lifecycle.Loop
}

// New returns a Sweeper for cfg. It does not start the loop (see Start).
func New(cfg Config) *Sweeper {
	if cfg.Logger == nil {
		nop := zerolog.Nop()
		cfg.Logger = &nop
	}
	cfg = cfg.withReplicas()
	s := &Sweeper{
		deps: cfg, log: cfg.Log, now: cfg.Now, shared: gmailrelay.IsShared(cfg.Log),
		batch: cfg.BatchSize, limit: cfg.Limit, interval: cfg.Interval,
		passes:      make(chan Result, passesBuffer),
		headers:     map[string]string{},
		sends:       map[string][]sendRef{},
		activity:    map[string]time.Time{},
		historyRead: map[string]time.Time{},
		wake:        make(chan struct{}, 1),
		clock:       clockWatch{mono: cfg.Mono, base: time.Now()},
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.batch <= 0 {
		s.batch = DefaultBatchSize
	}
	if s.limit <= 0 {
		s.limit = DefaultLimit
	}
	if s.interval <= 0 {
		s.interval = DefaultInterval
	}
	return s
}

// Passes delivers the Result of every finished pass (the loop's and
// RunOnce's), so that a caller can wait for "a pass finished" without
// polling. It holds the last 64 undelivered results; later ones are dropped
// while it is full.
func (s *Sweeper) Passes() <-chan Result { return s.passes }

// Totals returns the sums of every pass's counters since New; Wait is the
// last pass's.
func (s *Sweeper) Totals() Result {
	s.totalsMu.Lock()
	defer s.totalsMu.Unlock()
	return s.totals
}

// Wake asks the loop to run a pass soon. It never blocks. A wake while the
// loop is not running is kept (one at most): the loop's first pass after
// Start is then followed at once by another. RunOnce runs a pass without
// the loop.
func (s *Sweeper) Wake() { lifecycle.Wake(s.wake) }

// Start runs the loop in the background: one pass at once, then one every
// Interval, sooner after Wake or when the last pass left due jobs it could
// handle now, later when the quota asked to wait. It stops when ctx ends or
// Stop is called. Starting a started (or stopped) Sweeper does nothing.
func (s *Sweeper) Start(ctx context.Context) { s.life.Start(ctx, s.loop) }

// Stop ends the loop and blocks until the pass in progress, if any, has
// finished. It is safe to call twice, and without Start.
func (s *Sweeper) Stop() { s.life.Stop() }

func (s *Sweeper) loop(ctx context.Context) {
	lifecycle.Repeat(ctx, s.wake, func(ctx context.Context) time.Duration {
		res, err := s.RunOnce(ctx)
		if err != nil && ctx.Err() == nil && !errors.Is(err, context.Canceled) && !errors.Is(err, relay.ErrClockSkew) {
			s.deps.Logger.Error().Err(err).Msg("sweeper pass")
		}
		return s.nextDelay(res)
	})
}

// nextDelay is how long the loop waits after a pass that returned res.
func (s *Sweeper) nextDelay(res Result) time.Duration {
	switch {
	case res.Deferred > 0 && res.Wait > 0 && res.partial:
		// Some mailbox must wait, others carry on at the usual pace.
		return min(max(res.Wait, 10*time.Millisecond), s.interval)
	case res.Deferred > 0 && res.Wait > 0:
		// Asking again earlier only spends a pass finding the budget empty.
		return max(res.Wait, 10*time.Millisecond)
	case res.Deferred == 0 && res.Due >= s.limit:
		return 0 // a full pass: more jobs are probably due now
	}
	return s.interval
}

// RunOnce runs one pass over the jobs due now and returns what it did.
// Passes are serialised: a call waits for the pass in progress. An error
// means the acceptance log could not be read or written, or Config.Fence
// stopped the pass (nothing was done); the counters still say what was
// done before it. Gmail errors are not errors of the pass: they are
// counted (Errors) or waited out (Deferred, Wait).
func (s *Sweeper) RunOnce(ctx context.Context) (Result, error) {
	s.passMu.Lock()
	defer s.passMu.Unlock()
	if s.deps.Fence != nil {
		if err := s.deps.Fence(ctx); err != nil {
			s.deliver(Result{})
			return Result{}, err
		}
	}
	p := &pass{s: s, now: s.readClock(), mailboxes: map[string]gmailrelay.Mailbox{}, boxes: map[string]*boxPass{}}
	err := s.loadLags(ctx)
	if err == nil {
		err = p.run(ctx)
	}
	for _, b := range p.boxes {
		if !b.limited && b.answered {
			// Gmail answered without a rate limit: the mailbox's backoff
			// (shared with the send path, in its Quota) starts again at 1 s.
			b.m.Quota().Answered()
		}
	}
	p.finish()
	if len(s.headers) > maxHeaders {
		s.headers = map[string]string{}
	}
	res := p.res
	s.totalsMu.Lock()
	s.totals.add(res)
	s.totalsMu.Unlock()
	s.deliver(res)
	return res, err
}

// deliver hands a finished pass's Result to Passes, unless it is full.
func (s *Sweeper) deliver(res Result) {
	select {
	case s.passes <- res:
	default:
	}
}
