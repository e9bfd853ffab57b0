// Package e2e holds the checker of gmailrelay's end-to-end suite: a pure
// function over what the suite observed after a run — the relay's whole
// acceptance log, every job with its lines, the messages the Gmail emulator
// stored, and the history of what each caller saw (ok / fail / unknown, as
// Jepsen records operations) — that reports every broken invariant of
// docs/design.md#ground-truth-and-invariants.
//
// The tests that drive the real gmailrelay binary live in this directory's
// _test.go files: they build cmd/gmailrelay once per run (a plain build, not
// -race: the race detector covers the suite's own goroutines, and the
// relay's packages have their own -race tests), start it as a subprocess on
// an OS-chosen loopback port against an in-process Gmail emulator, SIGKILL
// and restart it on the same data file, and move both clocks forward
// instead of sleeping. Their results are emulator results: a green run
// proves the relay's logic against the emulator, not a guarantee about
// Gmail.
//
//	go test -race ./e2e/                                   # CI: boundaries, crash points, a short soak (fixed + random seed)
//	go test ./e2e/ -run Soak -soak.jobs=5000 -soak.duration=10m   # a long soak
//	go test ./e2e/ -run Soak -soak.seed=S                  # replay a soak's plan
package e2e

import (
	"fmt"
	"sort"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/gmailfake"
)

// Outcome is what one request looked like to its caller.
type Outcome string

// Outcomes, as Jepsen names them.
const (
	// OK: the caller got 200 with state sent.
	OK Outcome = "ok"
	// Fail: the caller got an answer saying nothing was done (503, 429,
	// 409, 4xx), or the request never reached the relay (connection
	// refused).
	Fail Outcome = "fail"
	// Info: the caller does not know — 202 (unknown or review), or no
	// answer at all (connection cut, reset, timeout, relay killed).
	Info Outcome = "unknown"
)

// Op is one request a caller made and what it saw.
type Op struct {
	Caller    int     // which caller (goroutine) made it
	Key       string  // the job key sent
	MessageID string  // the Message-ID the key derives to
	Try       int     // 1 for the first try, 2 for the first retry, ...
	Status    int     // HTTP status; 0 when there was no answer
	State     string  // the job state in a 2xx body
	Outcome   Outcome // ok, fail or unknown
	Err       string  // the transport error, when there was no answer
}

// Job is a job as GET /v1/jobs/{id} returns it: the record and its lines,
// oldest first.
type Job struct {
	gmailrelay.Job
	Lines []gmailrelay.Line `json:"lines"`
}

// Observation is everything the checker looks at.
type Observation struct {
	// Log is the relay's whole acceptance log (GET /v1/log), in order.
	Log []gmailrelay.Line
	// Jobs is every job of the log (GET /v1/jobs/{id} for each).
	Jobs []Job
	// Messages is every message the emulator stored: the provider's truth.
	// A message whose Message-ID Gmail rewrote counts for the client's
	// original id.
	Messages []gmailfake.Message
	// Deliveries, when not nil, is the emulator's ground truth of how many
	// times recipients received each Message-ID (the client's id): sends
	// folded into one Sent copy and sends whose id was rewritten included.
	// The checker then counts effects by deliveries, never by copies; when
	// nil, by the copies in Messages.
	Deliveries map[string]int
	// History is every request the callers made.
	History []Op
	// ReviewChannels names the channels whose policy is on_unknown: review.
	ReviewChannels map[string]bool
}

// Violation is one broken invariant.
type Violation struct {
	Rule      string // a short name, one of the Rule* constants
	MessageID string // the job concerned, "" when none
	Detail    string
}

// String returns "rule message-id: detail".
func (v Violation) String() string { return v.Rule + " " + v.MessageID + ": " + v.Detail }

// Rules the checker enforces.
const (
	// RuleLogConsistent: the global log and each job's lines agree, and a
	// job's state is the fold of its lines.
	RuleLogConsistent = "log_consistent"
	// RuleDuplicate: at most one emulator message (or delivery, when the
	// observation has deliveries) per Message-ID unless the job is in
	// review.
	RuleDuplicate = "duplicate_outside_review"
	// RuleSentOnce: a sent job has exactly one effect line and exactly one
	// emulator message.
	RuleSentOnce = "sent_exactly_once"
	// RuleNoBlindResend: after an ambiguous line, the next forwarding line
	// is a sweeper resend after a search miss (retry channels only) or a
	// human's retry after a resolved line — never a caller's retry.
	RuleNoBlindResend = "no_resend_of_ambiguous"
	// RuleNotStuck: no job in forwarding, no unknown job without a
	// scheduled check.
	RuleNotStuck = "not_stuck"
	// RuleFailedNotDelivered: a job the log calls failed has no message at
	// the emulator (the relay told its caller "not sent").
	RuleFailedNotDelivered = "failed_not_delivered"
	// RuleNoOrphan: every emulator message belongs to a job of the log.
	RuleNoOrphan = "no_orphan_message"
	// RuleAckedKept: whatever a caller saw 200 sent for is in the log as
	// sent (or in review) with a message at the emulator; whatever it saw
	// 202 for is in the log.
	RuleAckedKept = "acked_kept"
)

// Summary counts what the run ended with.
type Summary struct {
	Jobs               int // jobs in the log
	Attempts           int // attempts the relay made, summed over jobs
	Sent               int // jobs in state sent
	Review             int // jobs in state review
	Failed             int // jobs in state failed
	Duplicates         int // Message-IDs with two or more emulator messages outside review
	DuplicatesInReview int // the same, for jobs in review (caught and handed to a human)
	Lost               int // jobs acknowledged (200 sent, or state sent) without an emulator message
}

// Report is the checker's verdict.
type Report struct {
	Violations []Violation
	Summary    Summary
}

// OK reports whether no invariant was broken.
func (r Report) OK() bool { return len(r.Violations) == 0 }

// Has reports whether a violation of rule was found.
func (r Report) Has(rule string) bool {
	for _, v := range r.Violations {
		if v.Rule == rule {
			return true
		}
	}
	return false
}

// Resend reasons the relay writes on the received line of a new attempt
// for an existing job (sweeper.ReasonResend, the resolve endpoint's retry).
const (
	reasonSweeperResend = gmailrelay.ReasonSweeperResend
	reasonResolvedRetry = gmailrelay.ReasonResolvedRetry
)

// Check walks every job and every caller operation of o and returns the
// violations of the invariants (docs/design.md#ground-truth-and-invariants),
// in a stable order, with a summary.
func Check(o Observation) Report {
	var r Report
	add := func(rule, id, format string, args ...any) {
		r.Violations = append(r.Violations, Violation{Rule: rule, MessageID: id, Detail: fmt.Sprintf(format, args...)})
	}
	msgs := map[string]int{}
	for _, m := range o.Messages {
		id := m.MessageID
		if m.OriginalMessageID != "" {
			id = m.OriginalMessageID
		}
		msgs[id]++
	}
	effects := msgs
	if o.Deliveries != nil {
		effects = o.Deliveries
	}
	byLog := map[string][]uint64{}
	for _, l := range o.Log {
		byLog[l.MessageID] = append(byLog[l.MessageID], l.Seq)
	}
	jobs := make(map[string]*Job, len(o.Jobs))
	for i := range o.Jobs {
		j := &o.Jobs[i]
		jobs[j.MessageID] = j
		checkJob(j, byLog[j.MessageID], effects[j.MessageID], o.ReviewChannels[j.Channel], &r.Summary, add)
	}
	for id := range byLog {
		if jobs[id] == nil {
			add(RuleLogConsistent, id, "the log has %d lines for a job GET /v1/jobs does not know", len(byLog[id]))
		}
	}
	for id, n := range msgs {
		if jobs[id] == nil {
			add(RuleNoOrphan, id, "the emulator holds %d message(s) with a Message-ID the log does not know", n)
		}
	}
	lost := map[string]bool{}
	for _, op := range o.History {
		j := jobs[op.MessageID]
		switch {
		case op.Outcome == OK && j == nil:
			add(RuleAckedKept, op.MessageID, "caller %d try %d saw 200 sent; the log has no such job", op.Caller, op.Try)
			lost[op.MessageID] = true
		case op.Outcome == OK && j.State != gmailrelay.StateSent && j.State != gmailrelay.StateReview:
			add(RuleAckedKept, op.MessageID, "caller %d try %d saw 200 sent; the log says %s", op.Caller, op.Try, j.State)
			lost[op.MessageID] = true
		case op.Outcome == OK && effects[op.MessageID] == 0:
			add(RuleAckedKept, op.MessageID, "caller %d try %d saw 200 sent; the emulator holds no message", op.Caller, op.Try)
			lost[op.MessageID] = true
		case op.Status == 202 && j == nil:
			add(RuleAckedKept, op.MessageID, "caller %d try %d saw 202; the log has no such job", op.Caller, op.Try)
		}
	}
	for _, j := range o.Jobs {
		if j.State == gmailrelay.StateSent && effects[j.MessageID] == 0 {
			lost[j.MessageID] = true
		}
	}
	r.Summary.Lost = len(lost)
	sort.SliceStable(r.Violations, func(a, b int) bool {
		if r.Violations[a].Rule != r.Violations[b].Rule {
			return r.Violations[a].Rule < r.Violations[b].Rule
		}
		return r.Violations[a].MessageID < r.Violations[b].MessageID
	})
	return r
}

// checkJob applies the per-job invariants to j, whose global log seqs are
// seqs and whose emulator effect count (deliveries, or copies) is n.
func checkJob(j *Job, seqs []uint64, n int, reviewChannel bool, s *Summary, add func(rule, id, format string, args ...any)) {
	id := j.MessageID
	s.Jobs++
	s.Attempts += j.Attempts
	switch j.State {
	case gmailrelay.StateSent:
		s.Sent++
	case gmailrelay.StateReview:
		s.Review++
	case gmailrelay.StateFailed:
		s.Failed++
	}
	// The global log and the job's own lines are the same lines.
	if len(seqs) != len(j.Lines) {
		add(RuleLogConsistent, id, "the log has %d lines for it, the job %d", len(seqs), len(j.Lines))
	} else {
		for i, l := range j.Lines {
			if l.Seq != seqs[i] || l.MessageID != id {
				add(RuleLogConsistent, id, "line %d: job has seq %d, log has seq %d", i, l.Seq, seqs[i])
				break
			}
		}
	}
	if f := gmailrelay.Fold(j.Lines); f != j.State {
		add(RuleLogConsistent, id, "state %s, but its lines fold to %s", j.State, f)
	}
	effects := 0
	for _, l := range j.Lines {
		if l.Kind == gmailrelay.KindEffect {
			effects++
		}
	}
	if n >= 2 {
		if j.State == gmailrelay.StateReview {
			s.DuplicatesInReview++
		} else {
			s.Duplicates++
			add(RuleDuplicate, id, "the emulator holds %d messages with this Message-ID; the job is %s", n, j.State)
		}
	}
	if j.State == gmailrelay.StateSent {
		if effects != 1 || j.Effects != 1 {
			add(RuleSentOnce, id, "sent with %d effect lines (job counts %d)", effects, j.Effects)
		}
		if n != 1 {
			add(RuleSentOnce, id, "sent, and the emulator holds %d messages", n)
		}
	}
	if j.State == gmailrelay.StateFailed && n > 0 {
		add(RuleFailedNotDelivered, id, "failed (reason %q), but the emulator holds %d message(s)", j.LastReason, n)
	}
	switch {
	case j.State == gmailrelay.StateForwarding:
		add(RuleNotStuck, id, "still forwarding with no send in flight")
	case j.State == gmailrelay.StateUnknown && j.NextCheckAt.IsZero():
		add(RuleNotStuck, id, "unknown with no check scheduled")
	}
	checkResends(j, reviewChannel, add)
}

// checkResends enforces RuleNoBlindResend over j's lines in order. A new
// attempt after an ambiguous outcome is legitimate when its received line
// says the sweeper resent after at least one search miss (retry channels)
// or a human asked for a retry after a resolved line; the ambiguity is then
// settled, whatever that attempt's outcome. A forwarding line while the
// ambiguity is still open is a blind resend.
func checkResends(j *Job, reviewChannel bool, add func(rule, id, format string, args ...any)) {
	open := false     // an ambiguous outcome not yet settled by search, resend or human
	misses := 0       // searches without a SENT hit since the ambiguous line
	resolved := false // a resolved line since the ambiguous line
	var received gmailrelay.Line
	for _, l := range j.Lines {
		switch l.Kind {
		case gmailrelay.KindAmbiguous:
			open, misses, resolved = true, 0, false
		case gmailrelay.KindSearch:
			if open && l.SentHits == 0 {
				misses++
			}
		case gmailrelay.KindResolved:
			resolved = true
		case gmailrelay.KindEffect:
			open = false
		case gmailrelay.KindReceived:
			received = l
			switch {
			case !open:
			case l.Reason == reasonResolvedRetry && resolved:
				open = false
			case l.Reason == reasonSweeperResend && !reviewChannel && misses > 0:
				open = false
			}
		case gmailrelay.KindForwarding:
			switch {
			case !open:
			case reviewChannel:
				add(RuleNoBlindResend, j.MessageID, "attempt %d forwarded on review channel %s after an ambiguous outcome without a resolved line (received reason %q)",
					l.Attempt, j.Channel, received.Reason)
			default:
				add(RuleNoBlindResend, j.MessageID, "attempt %d forwarded after an ambiguous outcome (received reason %q, %d search misses): a blind resend",
					l.Attempt, received.Reason, misses)
			}
			open = false
		}
	}
}
