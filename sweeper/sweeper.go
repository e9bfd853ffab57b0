// Package sweeper is gmailrelay's reconciler. It closes every ambiguous
// send by asking the mailbox instead of guessing (DESIGN.md, "The sweeper"):
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
package sweeper

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/api/googleapi"

	"github.com/gmailrelay/gmailrelay/acceptlog"
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
	ReasonFound              = acceptlog.ReasonFound
	ReasonReviewChannel      = acceptlog.ReasonReviewChannel
	ReasonDuplicate          = acceptlog.ReasonDuplicate
	ReasonMissingAfterChecks = acceptlog.ReasonMissingAfterChecks
	ReasonMaxAttempts        = acceptlog.ReasonMaxAttempts
	ReasonHandleUntrusted    = acceptlog.ReasonHandleUntrusted
	ReasonResend             = acceptlog.ReasonSweeperResend
	ReasonRetry              = acceptlog.ReasonSweeperRetry
	ReasonVerified           = acceptlog.ReasonVerified
	ReasonVerifyMiss         = acceptlog.ReasonVerifyMiss
	ReasonVerifyGaveUp       = acceptlog.ReasonVerifyGaveUp
)

// sentLabel is the label every search is restricted to.
const sentLabel = "SENT"

// maxPageSize is the largest maxResults Gmail accepts for messages.list.
const maxPageSize = 500

// Backoff after Gmail's rate-limit answers: doubled on every consecutive
// one, from minBackoff up to maxBackoff, plus up to half as much jitter.
const (
	minBackoff = time.Second
	maxBackoff = 5 * time.Minute
)

// errorDelay is how much later a job is looked at again when its search
// failed with a 5xx or transport error (never more than its grace).
const errorDelay = 30 * time.Second

// maxHeaders bounds the cache of Message-IDs read back from Gmail.
const maxHeaders = 10000

// Config wires a Sweeper. Service is required.
type Config struct {
	// Service is the send path: its log, provider, policy, quota and
	// Attempt are what the sweeper works with.
	Service *relay.Service
	// Now is the clock; nil means Service.Now.
	Now func() time.Time
	// BatchSize is how many Message-IDs share one search query (default 20).
	BatchSize int
	// Interval is the loop's period (default 5s). Wake runs a pass sooner.
	Interval time.Duration
	// Limit is how many due jobs one pass takes (default 500).
	Limit int
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
	// Duplicates: jobs with two or more SENT hits (now in review).
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
	// Errors: Gmail calls or log writes that failed (5xx, transport); the
	// jobs concerned stay due and are looked at again a little later.
	Errors int `json:"errors"`
	// Wait is how long to wait before the next pass can make progress when
	// the pass was cut short (quota or backoff); zero otherwise. In Totals
	// it is the last pass's.
	Wait time.Duration `json:"wait"`
}

func (r *Result) add(o Result) {
	r.Due += o.Due
	r.Checked += o.Checked
	r.Found += o.Found
	r.Duplicates += o.Duplicates
	r.Missed += o.Missed
	r.Resent += o.Resent
	r.Retried += o.Retried
	r.Reviewed += o.Reviewed
	r.Deferred += o.Deferred
	r.Verified += o.Verified
	r.Errors += o.Errors
	r.Wait = o.Wait
}

// passesBuffer is how many finished passes Passes holds for a slow reader.
const passesBuffer = 64

// Sweeper is the reconciler. Its methods are safe for concurrent use;
// passes never overlap.
type Sweeper struct {
	svc      *relay.Service
	log      *acceptlog.Log
	now      func() time.Time
	batch    int
	limit    int
	interval time.Duration

	passMu  sync.Mutex    // serialises passes
	backoff time.Duration // last rate-limit backoff; guarded by passMu
	// headers maps Gmail message ids to their Message-ID (immutable in
	// Gmail), so that a pass cut short by quota does not read the same
	// messages again. Guarded by passMu; bounded by maxHeaders.
	headers map[string]string

	totalsMu sync.Mutex
	totals   Result

	passes chan Result
	wake   chan struct{}

	lifeMu  sync.Mutex
	started bool
	cancel  context.CancelFunc
	done    chan struct{}
}

// New returns a Sweeper for cfg. It does not start the loop (see Start).
func New(cfg Config) *Sweeper {
	s := &Sweeper{
		svc: cfg.Service, log: cfg.Service.Log(), now: cfg.Now,
		batch: cfg.BatchSize, limit: cfg.Limit, interval: cfg.Interval,
		passes:  make(chan Result, passesBuffer),
		headers: map[string]string{},
		wake:    make(chan struct{}, 1),
	}
	if s.now == nil {
		s.now = cfg.Service.Now
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

// Wake asks the loop to run a pass soon. It never blocks; it does nothing
// when the loop is not running (RunOnce is for that).
func (s *Sweeper) Wake() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Start runs the loop in the background: one pass at once, then one every
// Interval, sooner after Wake or when the last pass left due jobs it could
// handle now, later when the quota asked to wait. It stops when ctx ends or
// Stop is called. Starting a started (or stopped) Sweeper does nothing.
func (s *Sweeper) Start(ctx context.Context) {
	s.lifeMu.Lock()
	defer s.lifeMu.Unlock()
	if s.started {
		return
	}
	s.started = true
	ctx, s.cancel = context.WithCancel(ctx)
	s.done = make(chan struct{})
	go s.loop(ctx, s.done)
}

// Stop ends the loop and blocks until the pass in progress, if any, has
// finished. It is safe to call twice, and without Start.
func (s *Sweeper) Stop() {
	s.lifeMu.Lock()
	cancel, done := s.cancel, s.done
	s.lifeMu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
}

func (s *Sweeper) loop(ctx context.Context, done chan struct{}) {
	defer close(done)
	timer := time.NewTimer(0)
	defer timer.Stop()
	logger := s.svc.Logger()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-s.wake:
		}
		res, err := s.RunOnce(ctx)
		if err != nil && ctx.Err() == nil && !errors.Is(err, context.Canceled) {
			logger.Error().Err(err).Msg("sweeper pass")
		}
		timer.Reset(s.nextDelay(res))
	}
}

// nextDelay is how long the loop waits after a pass that returned res.
func (s *Sweeper) nextDelay(res Result) time.Duration {
	switch {
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
// means the acceptance log could not be read or written; the counters
// still say what was done before it. Gmail errors are not errors of the
// pass: they are counted (Errors) or waited out (Deferred, Wait).
func (s *Sweeper) RunOnce(ctx context.Context) (Result, error) {
	s.passMu.Lock()
	defer s.passMu.Unlock()
	p := &pass{s: s, now: s.now(), mailboxes: map[string]acceptlog.Mailbox{}}
	err := p.run(ctx)
	switch {
	case !p.limited && p.answered:
		s.backoff = 0
	case p.res.Checked+p.res.Resent+p.res.Retried > 0:
		// Rate limited after some progress: the pause was about right, so
		// the next 429 doubles back to it. Passes that Gmail stops before
		// any progress double it every time.
		s.backoff /= 2
	}
	if len(s.headers) > maxHeaders {
		s.headers = map[string]string{}
	}
	res := p.res
	s.totalsMu.Lock()
	s.totals.add(res)
	s.totalsMu.Unlock()
	select {
	case s.passes <- res:
	default:
	}
	return res, err
}

// pass is the state of one RunOnce.
type pass struct {
	s         *Sweeper
	now       time.Time
	res       Result
	mailboxes map[string]acceptlog.Mailbox
	// stopped: the quota or Gmail asked to wait; nothing more that costs
	// quota is tried in this pass.
	stopped bool
	// searchCost is the quota the last search spent.
	searchCost int
	// limited: Gmail answered with a rate limit during this pass;
	// answered: Gmail answered a call without one.
	limited, answered bool
}

// errStopped ends a search when the pass had to stop; errChanged ends a
// Mutate whose job moved on since it was read.
var (
	errStopped = errors.New("sweeper: pass stopped to wait for quota")
	errChanged = errors.New("sweeper: job changed since it was read")
)

// action is what a due job needs.
type action int

const (
	actClear   action = iota // nothing to do: clear NextCheckAt
	actSearch                // unknown: search and decide
	actVerify                // sent, not verified: search once
	actRetry                 // retryable failure on a retry channel
	actUntrust               // unknown in a mailbox whose handle is untrusted: review
	actResend                // unknown with every check done, resend not made yet
)

func (p *pass) run(ctx context.Context) error {
	jobs, err := p.s.log.Due(ctx, p.now, p.s.limit)
	if err != nil {
		return fmt.Errorf("read due jobs: %w", err)
	}
	p.res.Due = len(jobs)
	handled := 0
	// Search batches, per mailbox, in due order.
	batches := map[string][]acceptlog.Job{}
	var order []string
	flush := func(mailbox string) error {
		b := batches[mailbox]
		batches[mailbox] = nil
		n, err := p.search(ctx, mailbox, b)
		handled += n
		return err
	}
	for _, j := range jobs {
		if p.stopped {
			break
		}
		act, err := p.classify(ctx, j)
		if err != nil {
			return err
		}
		if act == actSearch || act == actVerify {
			if _, ok := batches[j.Mailbox]; !ok {
				order = append(order, j.Mailbox)
			}
			batches[j.Mailbox] = append(batches[j.Mailbox], j)
			if len(batches[j.Mailbox]) >= p.s.batch {
				if err := flush(j.Mailbox); err != nil {
					return err
				}
			}
			continue
		}
		done, err := p.handle(ctx, j, act)
		if err != nil {
			return err
		}
		if done {
			handled++
		}
	}
	for _, mb := range order {
		if p.stopped {
			break
		}
		if len(batches[mb]) > 0 {
			if err := flush(mb); err != nil {
				return err
			}
		}
	}
	if p.stopped {
		p.res.Deferred = len(jobs) - handled
	}
	return nil
}

// classify says what a due job needs.
func (p *pass) classify(ctx context.Context, j acceptlog.Job) (action, error) {
	switch j.State {
	case acceptlog.StateUnknown, acceptlog.StateSent:
		if j.State == acceptlog.StateSent && j.Verified {
			return actClear, nil
		}
		mb, err := p.mailbox(ctx, j.Mailbox)
		if err != nil {
			return 0, err
		}
		switch {
		case mb.HandleUntrusted && j.State == acceptlog.StateUnknown:
			return actUntrust, nil
		case mb.HandleUntrusted:
			return actClear, nil // a miss proves nothing there; Gmail's answer stands
		case j.State == acceptlog.StateUnknown:
			if ch := p.channel(j.Channel); ch.OnUnknown == policy.Retry && j.Checks >= ch.Checks {
				// Its last miss is recorded; the resend waited for quota
				// (or a crash came between the two).
				return actResend, nil
			}
			return actSearch, nil
		}
		return actVerify, nil
	case acceptlog.StateFailed:
		if j.Retryable && p.channel(j.Channel).OnUnknown == policy.Retry {
			return actRetry, nil
		}
	}
	return actClear, nil
}

func (p *pass) mailbox(ctx context.Context, name string) (acceptlog.Mailbox, error) {
	if mb, ok := p.mailboxes[name]; ok {
		return mb, nil
	}
	mb, err := p.s.log.Mailbox(ctx, name)
	if err != nil {
		return acceptlog.Mailbox{}, fmt.Errorf("read mailbox %s: %w", name, err)
	}
	p.mailboxes[name] = mb
	return mb, nil
}

// channel returns the job's channel policy. A channel that has left the
// policy since the job was logged is handled as review-only: a human
// decides rather than a guess.
func (p *pass) channel(name string) policy.Channel {
	ch, err := p.s.svc.Policy().Channel(name)
	if err != nil {
		return policy.Channel{Name: name, OnUnknown: policy.Review, Grace: policy.DefaultGrace, Checks: 1, MaxAttempts: 1}
	}
	return ch
}

// handle deals with a job that needs no search. done is false when the
// pass stopped before the job could be decided.
func (p *pass) handle(ctx context.Context, j acceptlog.Job, act action) (done bool, err error) {
	switch act {
	case actUntrust:
		line := acceptlog.Line{Kind: acceptlog.KindReview, Attempt: j.Attempts, State: acceptlog.StateReview,
			Reason: ReasonHandleUntrusted, Note: "Gmail rewrote Message-IDs in this mailbox: a search miss proves nothing"}
		_, err := p.toReview(ctx, j, line)
		return true, err
	case actRetry:
		return p.retry(ctx, j)
	case actResend:
		return p.resend(ctx, j, 0)
	}
	_, err = p.mutate(ctx, j, func(n *acceptlog.Job) []acceptlog.Line {
		n.NextCheckAt = time.Time{}
		return nil
	})
	return true, err
}

// retry gives a retryable failed job a new attempt, or hands it to a human
// when it has none left. The request never reached Gmail (or Gmail said it
// did not send), so no search is needed.
func (p *pass) retry(ctx context.Context, j acceptlog.Job) (bool, error) {
	ch := p.channel(j.Channel)
	used, err := p.attemptsUsed(ctx, j, ch)
	if err != nil {
		return false, err
	}
	if used >= ch.MaxAttempts {
		line := acceptlog.Line{Kind: acceptlog.KindReview, Attempt: j.Attempts, State: acceptlog.StateReview,
			Reason: ReasonMaxAttempts, Note: fmt.Sprintf("%d attempts, none sent; the channel allows %d", used, ch.MaxAttempts)}
		_, err := p.toReview(ctx, j, line)
		return true, err
	}
	ok, err := p.attempt(ctx, j, acceptlog.StateFailed, ReasonRetry, 0)
	if ok {
		p.res.Retried++
	}
	return ok, err
}

// attemptsUsed is the job's attempts that count against MaxAttempts: every
// attempt but those Gmail refused with a rate limit (which sent nothing and
// must never use up a job's attempts).
func (p *pass) attemptsUsed(ctx context.Context, j acceptlog.Job, ch policy.Channel) (int, error) {
	if j.Attempts < ch.MaxAttempts {
		return j.Attempts, nil // the common case, without reading lines
	}
	lines, err := p.s.log.JobLines(ctx, j.MessageID)
	if err != nil {
		return 0, fmt.Errorf("read lines of %s: %w", j.MessageID, err)
	}
	used := j.Attempts
	for _, l := range lines {
		if l.Kind == acceptlog.KindNotSent && l.Reason == acceptlog.ReasonRateLimited {
			used--
		}
	}
	return used, nil
}

// attempt makes a new attempt through the send path. ok is false when the
// pass had to stop first (quota) or the job moved on. redo is the quota
// the next pass spends again before it gets back to this attempt (the
// search that led to it): the wait reported covers it too, or a pass would
// spend the refill on the search and find the send refused again.
func (p *pass) attempt(ctx context.Context, j acceptlog.Job, from acceptlog.State, reason acceptlog.Reason, redo int) (ok bool, err error) {
	if p.stopped {
		return false, nil
	}
	res, err := p.s.svc.Attempt(ctx, j.MessageID, []acceptlog.State{from}, reason, false)
	var rerr *relay.Error
	switch {
	case errors.As(err, &rerr) && rerr.Code == relay.CodeRateLimited:
		wait := time.Duration(max(rerr.RetryAfter, 1)) * time.Second
		// How long until send and search both fit (takes nothing).
		if ok, w := p.s.svc.Quota().Available(relay.UnitsSend+redo, true); !ok {
			wait = max(wait, w)
		}
		p.stop(wait)
		return false, nil
	case errors.As(err, &rerr) && rerr.Code == relay.CodeConflict:
		return false, nil // someone else moved the job: theirs stands
	case err != nil:
		p.res.Errors++
		p.s.svc.Logger().Warn().Err(err).Str("message_id", j.MessageID).Str("reason", string(reason)).Msg("sweeper attempt")
		return true, nil
	}
	p.s.svc.Logger().Info().Str("message_id", j.MessageID).Str("reason", string(reason)).Int("attempt", res.Job.Attempts).
		Str("state", string(res.Job.State)).Msg("sweeper made a new attempt with the same Message-ID")
	if res.Job.State == acceptlog.StateFailed && res.Job.LastReason == acceptlog.ReasonRateLimited {
		p.rateLimited(0) // Gmail said 429 to the send: nothing more this pass
	} else {
		p.answered = true
	}
	return true, nil
}

// hit is one search result attributed to a job.
type hit struct {
	id     string
	labels []string
}

// search runs the searches for jobs of one mailbox, BatchSize ids per query
// (the caller hands over at most that many), and decides each job. It
// returns how many jobs it dealt with.
func (p *pass) search(ctx context.Context, mailbox string, jobs []acceptlog.Job) (int, error) {
	q := query(jobs)
	hits, err := p.find(ctx, mailbox, q, jobs)
	if errors.Is(err, errStopped) {
		return 0, nil
	}
	if err != nil {
		p.res.Errors++
		p.s.svc.Logger().Warn().Err(err).Int("jobs", len(jobs)).Msg("mailbox search; the jobs are checked again shortly")
		for _, j := range jobs {
			grace := p.channel(j.Channel).Grace
			if _, err := p.mutate(ctx, j, func(n *acceptlog.Job) []acceptlog.Line {
				n.NextCheckAt = p.now.Add(min(errorDelay, grace))
				return nil
			}); err != nil {
				return 0, err
			}
		}
		return len(jobs), nil
	}
	done := 0
	for _, j := range jobs {
		var ok bool
		if j.State == acceptlog.StateSent {
			ok, err = p.decideVerify(ctx, j, q, hits[j.MessageID])
		} else {
			ok, err = p.decideUnknown(ctx, j, q, hits[j.MessageID])
		}
		if err != nil {
			return done, err
		}
		if ok {
			done++
		}
	}
	return done, nil
}

// query is the search for jobs' Message-IDs: rfc822msgid:<id> for one,
// {rfc822msgid:<a> rfc822msgid:<b> ...} (Gmail's OR group) for several.
func query(jobs []acceptlog.Job) string {
	terms := make([]string, len(jobs))
	for i, j := range jobs {
		terms[i] = "rfc822msgid:" + strings.TrimSuffix(strings.TrimPrefix(j.MessageID, "<"), ">")
	}
	if len(terms) == 1 {
		return terms[0]
	}
	return "{" + strings.Join(terms, " ") + "}"
}

// find lists the SENT messages matching q (every page) and attributes each
// hit to a job: directly for a one-id query, by reading the hit's
// Message-ID otherwise. It returns errStopped when the pass must stop.
func (p *pass) find(ctx context.Context, mailbox, q string, jobs []acceptlog.Job) (map[string][]hit, error) {
	prov := p.s.svc.Provider()
	spent := 0
	var ids []string
	token := ""
	for {
		if !p.take(relay.UnitsList, spent) {
			return nil, errStopped
		}
		spent += relay.UnitsList
		page, err := prov.List(ctx, mailbox, q, []string{sentLabel}, token, maxPageSize)
		if err != nil {
			return nil, p.gmailErr(err)
		}
		p.answered = true
		ids = append(ids, page.IDs...)
		if page.NextPageToken == "" {
			break
		}
		token = page.NextPageToken
	}
	p.searchCost = spent
	hits := map[string][]hit{}
	if len(jobs) == 1 {
		for _, id := range ids {
			hits[jobs[0].MessageID] = append(hits[jobs[0].MessageID], hit{id: id, labels: []string{sentLabel}})
		}
		return hits, nil
	}
	if len(ids) == 0 {
		return hits, nil
	}
	want := make(map[string]bool, len(jobs))
	for _, j := range jobs {
		want[j.MessageID] = true
	}
	var unread []string
	for _, id := range ids {
		if _, ok := p.s.headers[id]; !ok {
			unread = append(unread, id)
		}
	}
	// Reserve every read at once: a pass that runs out half-way would have
	// spent its list for nothing.
	if len(unread) > 0 && !p.take(relay.UnitsGet*len(unread), spent) {
		return nil, errStopped
	}
	p.searchCost += relay.UnitsGet * len(unread)
	for _, id := range unread {
		h, err := prov.GetHeader(ctx, mailbox, id)
		var gerr *googleapi.Error
		if errors.As(err, &gerr) && gerr.Code == http.StatusNotFound {
			continue // deleted between list and get
		}
		if err != nil {
			return nil, p.gmailErr(err)
		}
		p.s.headers[id] = h.MessageID
	}
	for _, id := range ids {
		if mid, ok := p.s.headers[id]; ok && want[mid] {
			hits[mid] = append(hits[mid], hit{id: id, labels: []string{sentLabel}})
		}
	}
	return hits, nil
}

// take takes units from the shared budget as background work. When the
// budget says wait, the pass stops; the wait it reports covers the units
// this search already spent too, since the next pass starts the search
// again.
func (p *pass) take(units, spent int) bool {
	quota := p.s.svc.Quota()
	ok, wait := quota.TakeBackground(units)
	if ok {
		return true
	}
	if spent > 0 {
		// Only a question (a peek that takes nothing): how long until the
		// whole search fits.
		if ok2, w := quota.Available(units+spent, true); !ok2 {
			wait = max(wait, w)
		}
	}
	p.stop(wait)
	return false
}

// gmailErr turns a failed Gmail call into errStopped (rate limited: back
// off) or the error itself.
func (p *pass) gmailErr(err error) error {
	if o := relay.Classify(err); o.Reason == acceptlog.ReasonRateLimited {
		p.rateLimited(o.RetryIn)
		return errStopped
	}
	return err
}

// rateLimited pauses the shared budget after Gmail answered 429 (or 403
// with a rate reason): exponentially longer on every consecutive one, with
// jitter, and never shorter than Gmail's own retry time. The pass stops.
func (p *pass) rateLimited(retryIn time.Duration) {
	p.limited = true
	b := min(max(minBackoff, 2*p.s.backoff), maxBackoff)
	p.s.backoff = b
	d := max(b, retryIn) + rand.N(b/2+1)
	p.s.svc.Quota().Pause(d)
	p.s.svc.Logger().Warn().Dur("pause", d).Msg("Gmail rate limit: the sweeper backs off")
	p.stop(d)
}

func (p *pass) stop(wait time.Duration) {
	p.stopped = true
	p.res.Wait = max(p.res.Wait, wait)
}

// decideUnknown records the search of an unknown job and acts on it. It
// returns false when the job is left for a later pass (its resend waits for
// quota).
func (p *pass) decideUnknown(ctx context.Context, j acceptlog.Job, q string, hits []hit) (bool, error) {
	ch := p.channel(j.Channel)
	check := j.Checks + 1
	search := searchLine(j, q, hits, check)
	switch {
	case len(hits) == 1 && ch.OnUnknown == policy.Retry:
		h := hits[0]
		labels := append([]string(nil), h.labels...)
		written, err := p.mutate(ctx, j, func(n *acceptlog.Job) []acceptlog.Line {
			n.State, n.GmailID, n.LabelIDs = acceptlog.StateSent, h.id, labels
			n.Effects++
			n.Verified = true // this search, after grace, already counted exactly one
			n.Checks, n.NextCheckAt = 0, time.Time{}
			return []acceptlog.Line{search, {Kind: acceptlog.KindEffect, Attempt: j.Attempts, State: acceptlog.StateSent,
				Reason: ReasonFound, Source: acceptlog.SourceSearch, GmailID: h.id, LabelIDs: labels}}
		})
		if written {
			p.s.svc.Logger().Info().Str("message_id", j.MessageID).Str("gmail_id", h.id).Msg("ambiguous send found in the mailbox: sent")
		}
		p.count(written, &p.res.Checked, &p.res.Found)
		return true, err
	case len(hits) == 1:
		written, err := p.toReview(ctx, j, evidence(search, ReasonReviewChannel, hits,
			"found once in the mailbox; this channel never resolves ambiguous sends by itself"), search)
		p.count(written, &p.res.Checked, &p.res.Found)
		return true, err
	case len(hits) >= 2:
		written, err := p.toReview(ctx, j, evidence(search, ReasonDuplicate, hits, "the mailbox holds this message more than once"), search)
		p.count(written, &p.res.Checked, &p.res.Duplicates)
		return true, err
	case check < ch.Checks:
		written, err := p.mutate(ctx, j, func(n *acceptlog.Job) []acceptlog.Line {
			n.Checks = check
			n.NextCheckAt = p.now.Add(ch.Grace)
			return []acceptlog.Line{search}
		})
		p.count(written, &p.res.Checked, &p.res.Missed)
		return true, err
	case ch.OnUnknown != policy.Retry:
		written, err := p.toReview(ctx, j, evidence(search, ReasonMissingAfterChecks, nil,
			fmt.Sprintf("not in the mailbox after %d checks", check)), search)
		p.count(written, &p.res.Checked)
		return true, err
	}
	used, err := p.attemptsUsed(ctx, j, ch)
	if err != nil {
		return false, err
	}
	if used >= ch.MaxAttempts {
		written, err := p.toReview(ctx, j, evidence(search, ReasonMaxAttempts, nil,
			fmt.Sprintf("not in the mailbox after %d checks and %d attempts; the channel allows %d", check, used, ch.MaxAttempts)), search)
		p.count(written, &p.res.Checked)
		return true, err
	}
	// Record the miss first: if the resend cannot go now, the job stays due
	// with its checks done, and a later pass resends it without searching.
	written, err := p.mutate(ctx, j, func(n *acceptlog.Job) []acceptlog.Line {
		n.Checks = check
		return []acceptlog.Line{search}
	})
	p.count(written, &p.res.Checked)
	if err != nil || !written {
		return true, err
	}
	j.Checks = check
	return p.resend(ctx, j, p.searchCost)
}

// resend gives an unknown job whose checks all missed a new attempt with
// the same Message-ID, or hands it to a human when it has none left.
func (p *pass) resend(ctx context.Context, j acceptlog.Job, redo int) (bool, error) {
	ch := p.channel(j.Channel)
	used, err := p.attemptsUsed(ctx, j, ch)
	if err != nil {
		return false, err
	}
	if used >= ch.MaxAttempts {
		line := acceptlog.Line{Kind: acceptlog.KindReview, Attempt: j.Attempts, State: acceptlog.StateReview, Reason: ReasonMaxAttempts,
			Note: fmt.Sprintf("not in the mailbox after %d checks and %d attempts; the channel allows %d", j.Checks, used, ch.MaxAttempts)}
		_, err := p.toReview(ctx, j, line)
		return true, err
	}
	ok, err := p.attempt(ctx, j, acceptlog.StateUnknown, ReasonResend, redo)
	if ok {
		p.res.Resent++
	}
	return ok, err
}

// decideVerify records the verify search of a sent job and acts on it.
func (p *pass) decideVerify(ctx context.Context, j acceptlog.Job, q string, hits []hit) (bool, error) {
	ch := p.channel(j.Channel)
	check := j.Checks + 1
	search := searchLine(j, q, hits, check)
	switch {
	case len(hits) == 1:
		search.Reason = ReasonVerified
		written, err := p.mutate(ctx, j, func(n *acceptlog.Job) []acceptlog.Line {
			n.Verified, n.Checks, n.NextCheckAt = true, 0, time.Time{}
			return []acceptlog.Line{search}
		})
		p.count(written, &p.res.Checked, &p.res.Verified)
		return true, err
	case len(hits) >= 2:
		written, err := p.toReview(ctx, j, evidence(search, ReasonDuplicate, hits,
			"sent, but the mailbox holds this message more than once"), search)
		p.count(written, &p.res.Checked, &p.res.Duplicates)
		return true, err
	case check < 2:
		// Index lag, or Gmail rewrote the id: look once more.
		search.Reason = ReasonVerifyMiss
		written, err := p.mutate(ctx, j, func(n *acceptlog.Job) []acceptlog.Line {
			n.Checks, n.NextCheckAt = check, p.now.Add(ch.Grace)
			return []acceptlog.Line{search}
		})
		p.count(written, &p.res.Checked, &p.res.Missed)
		return true, err
	}
	search.Reason = ReasonVerifyGaveUp
	search.Note = "still not found by Message-ID; Gmail's answer said sent, so the job stays sent"
	written, err := p.mutate(ctx, j, func(n *acceptlog.Job) []acceptlog.Line {
		n.Checks, n.NextCheckAt = check, time.Time{}
		return []acceptlog.Line{search}
	})
	p.count(written, &p.res.Checked)
	return true, err
}

// count adds one to each counter when a decision was written.
func (p *pass) count(written bool, counters ...*int) {
	if !written {
		return
	}
	for _, c := range counters {
		*c++
	}
}

func searchLine(j acceptlog.Job, q string, hits []hit, check int) acceptlog.Line {
	sent := 0
	for _, h := range hits {
		for _, l := range h.labels {
			if strings.EqualFold(l, sentLabel) {
				sent++
				break
			}
		}
	}
	return acceptlog.Line{Kind: acceptlog.KindSearch, Attempt: j.Attempts, Query: q, Hits: len(hits), SentHits: sent, Check: check}
}

// evidence is a review line carrying the search that led to it.
func evidence(search acceptlog.Line, reason acceptlog.Reason, hits []hit, note string) acceptlog.Line {
	l := acceptlog.Line{Kind: acceptlog.KindReview, Attempt: search.Attempt, State: acceptlog.StateReview, Reason: reason,
		Query: search.Query, Hits: search.Hits, SentHits: search.SentHits, Check: search.Check, Note: note}
	if len(hits) > 0 {
		l.GmailID = hits[0].id
		ids := make([]string, len(hits))
		for i, h := range hits {
			ids[i] = h.id
		}
		sort.Strings(ids)
		l.Note += "; gmail ids: " + strings.Join(ids, ", ")
	}
	return l
}

// toReview moves the job to review, writing the lines before (the search
// that led there) and the review line in one transaction.
func (p *pass) toReview(ctx context.Context, j acceptlog.Job, review acceptlog.Line, before ...acceptlog.Line) (bool, error) {
	written, err := p.mutate(ctx, j, func(n *acceptlog.Job) []acceptlog.Line {
		n.State, n.NextCheckAt = acceptlog.StateReview, time.Time{}
		return append(append([]acceptlog.Line(nil), before...), review)
	})
	if written {
		p.res.Reviewed++
		p.s.svc.Logger().Warn().Str("message_id", j.MessageID).Str("reason", string(review.Reason)).Msg("job handed to a human for review")
	}
	return written, err
}

// mutate applies edit to the job as read at the start of the pass, in one
// transaction with the lines edit returns, and says whether it wrote. When
// the job moved on since (another state, attempt, check count or
// verification), nothing is written and the error is nil: whoever moved it
// decided.
func (p *pass) mutate(ctx context.Context, read acceptlog.Job, edit func(n *acceptlog.Job) []acceptlog.Line) (written bool, err error) {
	_, _, err = p.s.log.Mutate(ctx, read.MessageID, func(cur *acceptlog.Job) (acceptlog.Change, error) {
		if cur == nil || cur.State != read.State || cur.Attempts != read.Attempts ||
			cur.Checks != read.Checks || cur.Verified != read.Verified {
			return acceptlog.Change{}, errChanged
		}
		n := *cur
		lines := edit(&n)
		n.UpdatedAt = p.now
		return acceptlog.Change{Job: &n, Lines: lines}, nil
	})
	if errors.Is(err, errChanged) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("record sweep of %s: %w", read.MessageID, err)
	}
	return true, nil
}
