package gmailrelay

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Plan is the domain half of one Mutate, shared by every backend of the
// log: what fn asked for, validated against the log's invariants and the
// table of transitions, with its lines stamped. A backend only stores it
// (the job and its indexes, the lines under the next global Seq, the raw
// message, the mailbox record) in one transaction with the job locked.
type Plan struct {
	// Cur is the stored job the plan was made from (nil when none).
	Cur *Job
	// Job is the job's new record; nil leaves it as it is. It is the
	// Change's own Job (not a copy): a backend only reads it.
	Job *Job
	// Result is the job as it is after the change (the zero Job when there
	// is none).
	Result Job
	// Lines are to be appended in order; Time and MessageID are set, Seq is
	// the backend's to assign.
	Lines []Line
	// Raw, when non-nil, is stored as the job's message.
	Raw []byte
	// Mailbox, when non-nil, replaces that mailbox's record.
	Mailbox *Mailbox
	// EditMailbox, when non-nil, edits the record of Result.Mailbox as
	// read inside the transaction; see MailboxRecord.
	EditMailbox func(m *Mailbox)
}

// Prepare calls fn with a copy of cur (the stored job, nil when none) and
// turns the Change it returns into a Plan. fn's own error comes back
// unchanged; a Change breaking the log's invariants is an error wrapping
// ErrInvalidChange. now stamps lines whose Time is zero.
func Prepare(id string, cur *Job, now func() time.Time, fn func(*Job) (Change, error)) (Plan, error) {
	var arg *Job
	if cur != nil {
		c := cloneJob(*cur)
		arg = &c
	}
	ch, err := fn(arg)
	if err != nil {
		return Plan{}, err
	}
	if err := validateChange(id, cur, &ch); err != nil {
		return Plan{}, fmt.Errorf("mutate %s: %w: %w", id, ErrInvalidChange, err)
	}
	p := Plan{Cur: cur, Raw: ch.Raw, Mailbox: ch.Mailbox, EditMailbox: ch.EditMailbox}
	switch {
	case ch.Job != nil:
		// The backend only reads the job fn returned, inside the
		// transaction, while fn's caller waits in Mutate: no copy.
		p.Job = ch.Job
		p.Result = cloneJob(*ch.Job)
	case cur != nil:
		p.Result = cloneJob(*cur)
	}
	if len(ch.Lines) > 0 {
		p.Lines = make([]Line, len(ch.Lines))
		for i, ln := range ch.Lines {
			ln.Seq = 0
			if ln.Time.IsZero() {
				ln.Time = now()
			}
			if ln.MessageID == "" {
				ln.MessageID = id
			}
			p.Lines[i] = ln
		}
	}
	return p, nil
}

// MailboxRecord returns the mailbox record the plan stores (nil for none):
// Mailbox as given, or the record of Result.Mailbox that read returns (as
// stored in the same transaction) after EditMailbox.
func (p *Plan) MailboxRecord(read func(name string) (Mailbox, error)) (*Mailbox, error) {
	if p.EditMailbox == nil {
		return p.Mailbox, nil
	}
	mb, err := read(p.Result.Mailbox)
	if err != nil {
		return nil, err
	}
	p.EditMailbox(&mb)
	mb.Name = p.Result.Mailbox
	return &mb, nil
}

// CheckMessageID reports why id cannot be a job's Message-ID (nil when it
// can); Mutate refuses such an id before reading anything.
func CheckMessageID(id string) error { return checkMessageID(id) }

// KeptWhenPruned returns the lines (oldest first) a job keeps when the
// retention pass prunes it, and those it loses: see Log.Prune.
func KeptWhenPruned(lines []Line) (keep, drop []Line) {
	var lastState uint64
	for i := range lines {
		if lines[i].State != "" {
			lastState = lines[i].Seq
		}
	}
	for i := range lines {
		if keptWhenPruned(&lines[i], lastState) {
			keep = append(keep, lines[i])
		} else {
			drop = append(drop, lines[i])
		}
	}
	return keep, drop
}

// CheckJob checks one job against its lines (oldest first), the part of
// Check every backend shares, and returns each violation found.
func CheckJob(j *Job, lines []Line) []string {
	var v violations
	checkJob(&v, j, lines)
	return v.found
}

// Violations turns the violations a Check found into its error: nil when
// there are none, otherwise one naming how many and each of them.
func Violations(found []string) error {
	if len(found) == 0 {
		return nil
	}
	return fmt.Errorf("acceptlog check: %d violations:\n\t%s", len(found), strings.Join(found, "\n\t"))
}

// validateChange checks ch against the log's invariants before anything is
// written. cur is the stored job (nil when absent).
func validateChange(id string, cur *Job, ch *Change) error {
	folded := State("")
	if cur != nil {
		folded = cur.State
	}
	lineState := Fold(ch.Lines)
	if lineState != "" {
		folded = lineState
	}
	attempts := 0
	switch {
	case ch.Job != nil:
		j := ch.Job
		if j.MessageID != id {
			return fmt.Errorf("job message id %q differs from the mutated one", j.MessageID)
		}
		if !j.State.Valid() {
			return fmt.Errorf("job state %q is not a known state", j.State)
		}
		if j.State != folded {
			return fmt.Errorf("job state %q is not the fold of its lines (%q)", j.State, folded)
		}
		// Only changes of an existing job are checked against the table,
		// step by step through its lines' states (a sent outcome and the
		// review it leads to are two moves in one transaction): test
		// fixtures and benchmarks seed new jobs in any state.
		if cur != nil {
			prev := cur.State
			for i := range ch.Lines {
				if to := ch.Lines[i].State; to != "" {
					if err := checkTransition(prev, to); err != nil {
						return err
					}
					prev = to
				}
			}
		}
		if cur != nil && j.Attempts < cur.Attempts {
			return fmt.Errorf("attempts decrease from %d to %d", cur.Attempts, j.Attempts)
		}
		attempts = j.Attempts
	case lineState != "":
		return fmt.Errorf("lines carry state %q but the change has no job", lineState)
	case cur == nil && (len(ch.Lines) > 0 || ch.Raw != nil):
		return fmt.Errorf("lines or raw message for a job that does not exist")
	default:
		if cur != nil {
			attempts = cur.Attempts
		}
	}
	for i, ln := range ch.Lines {
		switch {
		case !knownKinds[ln.Kind]:
			return fmt.Errorf("line %d: unknown kind %q", i, ln.Kind)
		case ln.State != "" && !ln.State.Valid():
			return fmt.Errorf("line %d: unknown state %q", i, ln.State)
		case ln.MessageID != "" && ln.MessageID != id:
			return fmt.Errorf("line %d: message id %q differs from the mutated one", i, ln.MessageID)
		case ln.Attempt < 0 || ln.Attempt > attempts:
			return fmt.Errorf("line %d: attempt %d outside the job's 0..%d", i, ln.Attempt, attempts)
		}
	}
	if ch.Mailbox != nil && ch.Mailbox.Name == "" {
		return fmt.Errorf("mailbox without a name")
	}
	if ch.EditMailbox != nil {
		switch {
		case ch.Mailbox != nil:
			return fmt.Errorf("both Mailbox and EditMailbox")
		case cur == nil && ch.Job == nil:
			return fmt.Errorf("EditMailbox without a job")
		case ch.Job != nil && ch.Job.Mailbox == "", ch.Job == nil && cur.Mailbox == "":
			return fmt.Errorf("EditMailbox for a job without a mailbox")
		}
	}
	return nil
}

// Clone returns a copy of j that shares no slice with it.
func (j Job) Clone() Job { return cloneJob(j) }

func cloneJob(j Job) Job {
	if j.LabelIDs != nil {
		j.LabelIDs = append([]string(nil), j.LabelIDs...)
	}
	return j
}

// maxMessageIDLen bounds a Message-ID so every derived key stays far below
// bbolt's key size limit; RFC 5322 lines are at most 998 octets anyway.
const maxMessageIDLen = 998

// checkMessageID rejects ids that cannot be keys: empty, too long, or holding
// the 0x00 separator of the composite keys.
func checkMessageID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("empty message id")
	case len(id) > maxMessageIDLen:
		return fmt.Errorf("message id of %d bytes is longer than %d", len(id), maxMessageIDLen)
	case strings.IndexByte(id, 0) >= 0:
		return fmt.Errorf("message id %q contains a NUL byte", id)
	}
	return nil
}

// Kinds lists every line kind.
var Kinds = []Kind{
	KindReceived, KindFault, KindForwarding, KindEffect, KindNotSent, KindAmbiguous,
	KindSearch, KindState, KindReview, KindResolved, KindHandle, KindBounce,
}

var knownKinds = func() map[Kind]bool {
	m := make(map[Kind]bool, len(Kinds))
	for _, k := range Kinds {
		m[k] = true
	}
	return m
}()

// keptWhenPruned reports whether a pruned job keeps line ln: its effect lines
// (what Gmail accepted), its resolved lines (what a human decided), the
// last line that carries a state (so the job's state stays the fold of its
// lines), and the lines behind the relay's alarm counters: a review for a
// duplicate (two copies found, or two own deliveries) and a handle Gmail
// rewrote. Those counters are totals
// (gmailrelay_duplicates_found_total, gmailrelay_handle_failures_total):
// dropping the lines would make them go down, which Prometheus reads as a
// restart. lastState is the last state line's Seq.
func keptWhenPruned(ln *Line, lastState uint64) bool {
	switch {
	case ln.Kind == KindEffect, ln.Kind == KindResolved, ln.Kind == KindBounce, ln.Seq == lastState:
		return true
	case ln.Kind == KindReview && (ln.Reason == ReasonDuplicate || ln.Reason == ReasonDuplicateDelivery),
		ln.Kind == KindHandle && ln.Reason == ReasonHandleRewritten:
		return true
	}
	return false
}

// checkJob checks one job against its lines (oldest first).
func checkJob(v *violations, j *Job, lines []Line) {
	if f := Fold(lines); f != j.State {
		v.add("job %s: state %q but its lines fold to %q", j.MessageID, j.State, f)
	}
	effects, resolvedAfterSecond := 0, false
	var prev State
	for _, ln := range lines {
		if ln.State != "" {
			// A pruned job kept only its effect, resolved and last state
			// lines: the steps between two lines written before the
			// pruning are gone, not wrong. Its last state line is kept, so
			// a line written after the pruning moves on from it and is
			// checked.
			spansPruning := !j.PrunedAt.IsZero() && !ln.Time.After(j.PrunedAt)
			if prev != "" && !spansPruning && !Allowed(prev, ln.State) {
				v.add("job %s: line %d moves %s → %s, not in the table of allowed transitions", j.MessageID, ln.Seq, prev, ln.State)
			}
			prev = ln.State
		}
		if ln.Attempt > j.Attempts {
			v.add("job %s: line %d has attempt %d, job only %d attempts", j.MessageID, ln.Seq, ln.Attempt, j.Attempts)
		}
		switch ln.Kind {
		case KindEffect:
			effects++
		case KindResolved:
			if effects >= 2 {
				resolvedAfterSecond = true
			}
		}
	}
	if j.Effects != effects {
		v.add("job %s: effects %d but %d effect lines", j.MessageID, j.Effects, effects)
	}
	if effects > 1 && j.State != StateReview && !resolvedAfterSecond {
		v.add("job %s: %d effect lines in state %q (duplicate not under review)", j.MessageID, effects, j.State)
	}
}

// Mailbox is what the log remembers about one Gmail mailbox.
type Mailbox struct {
	Name string `json:"name"`
	// HandleChecked: a Message-ID has been read back at least once.
	HandleChecked bool `json:"handle_checked"`
	// HandleUntrusted: Gmail was seen replacing our Message-ID in this
	// mailbox, so a search miss proves nothing there.
	HandleUntrusted bool `json:"handle_untrusted"`
	// Rewrites counts the sends whose Message-ID Gmail replaced.
	Rewrites int `json:"rewrites"`
	// LastSendID and LastSendAt are the newest send Gmail confirmed in this
	// mailbox that the sweeper has seen: its job's Message-ID and creation
	// time (a lower bound of when Gmail stored it). The sweeper's searches
	// carry it as their witness after a restart, until newer sends are
	// seen. Empty until a confirmed send reaches a verify pass.
	LastSendID string    `json:"last_send_id,omitempty"`
	LastSendAt time.Time `json:"last_send_at,omitzero"`
	// Lags are the mailbox's measured index lag, the newest samples (a
	// send's answer from Gmail → the verify pass's first hit). The
	// sweeper's verify pass adds each (an EditMailbox, so no concurrent
	// edit is lost) and every pass reads them from here, so that every
	// relay on the log, and a relay after a restart, waits at least the
	// observed p99 before it counts a miss (docs/design.md#the-witness-rule).
	// Empty in a record written without lag samples.
	Lags LagSamples `json:"lags,omitzero"`
	// History is the sweeper's place in the mailbox's history (the tail
	// of users.history.list); zero until it first read the mailbox's
	// history id.
	History HistoryCursor `json:"history,omitzero"`
}

// HistoryCursor is how far a mailbox's history has been read.
type HistoryCursor struct {
	// ID is the history id read up to: the records after it are still to
	// be read.
	ID uint64 `json:"id"`
	// Since is when the cursor was started (from the mailbox's current
	// history id): the history covers the attempts that started after
	// it, not those before.
	Since time.Time `json:"since"`
	// CompleteAt is when the newest listing that reached the mailbox's
	// current history id started: every message Gmail had listed in its
	// history by then has been read.
	CompleteAt time.Time `json:"complete_at,omitzero"`
	// Fallbacks counts the cursors Gmail no longer kept (404): the jobs
	// they covered were left to the search path, and a new cursor began.
	Fallbacks int `json:"fallbacks,omitempty"`
}

// Covers reports whether the history read from c can speak for an
// attempt that started at start: only one started after the cursor did.
func (c HistoryCursor) Covers(start time.Time) bool {
	return c.ID != 0 && !start.Before(c.Since)
}

// Change is what a Mutate callback asks to write, all in one transaction.
type Change struct {
	// Job is the job's new record; nil leaves the job as it is (and then
	// Lines must not carry a State).
	Job *Job
	// Lines are appended in order; Seq is assigned, a zero Time is stamped.
	Lines []Line
	// Raw, when non-nil, is stored as the job's message (for resends).
	Raw []byte
	// Mailbox, when non-nil, replaces that mailbox's record.
	Mailbox *Mailbox
	// EditMailbox, when non-nil, edits the record of the job's mailbox
	// (Job.Mailbox) as read inside the same transaction, and the result is
	// stored: a read-modify-write no concurrent Mutate can undo. It must
	// not change the record's Name, and cannot be combined with Mailbox.
	EditMailbox func(m *Mailbox)
}

// ListOptions filter List. Zero values mean "any"; Limit defaults to 100.
type ListOptions struct {
	State   State
	Channel string
	Limit   int
	After   string // Message-ID to start after (exclusive), for paging
}

// Stats are the log's counters, kept up to date inside every write.
type Stats struct {
	Jobs      int                      `json:"jobs"`
	Lines     uint64                   `json:"lines"`
	ByState   map[State]int            `json:"by_state"`
	ByChannel map[string]map[State]int `json:"by_channel"`
	ByKind    map[Kind]int             `json:"lines_by_kind"`
	ByReason  map[Kind]map[string]int  `json:"lines_by_reason"`
	// OldestUnknown is the AmbiguousAt of the oldest job in StateUnknown
	// (zero when there is none).
	OldestUnknown time.Time `json:"oldest_unknown,omitzero"`
}

// PruneResult counts what one Prune removed.
type PruneResult struct {
	Jobs     int   `json:"jobs"`      // jobs pruned
	Lines    int   `json:"lines"`     // detail lines removed
	RawBytes int64 `json:"raw_bytes"` // bytes of raw messages removed
	// More is true when Prune stopped at its limit with prunable jobs older
	// than the cut-off still left.
	More bool `json:"more"`
}

// Prunable reports whether the retention pass may prune j: it is terminal
// (sent, abandoned, or failed and not retryable), no check is scheduled for
// it (a sent job waiting for its verify pass is not done) and it has not been
// pruned yet.
func (j *Job) Prunable() bool {
	if !j.PrunedAt.IsZero() || !j.NextCheckAt.IsZero() {
		return false
	}
	switch j.State {
	case StateSent, StateAbandoned:
		return true
	case StateFailed:
		return !j.Retryable
	}
	return false
}

// NeedsRaw reports whether a job in state s may still be sent again, so
// that its raw message must be kept until it is pruned: whether the
// table of Transitions leads from s to StateForwarding (a resolve retry
// from failed, unknown or review, the outbox from queued, a sent job the
// verify pass moves to review). Only abandoned leads nowhere.
func NeedsRaw(s State) bool {
	seen := map[State]bool{s: true}
	for next := []State{s}; len(next) > 0; {
		from := next[0]
		next = next[1:]
		for _, to := range Transitions[from] {
			if to == StateForwarding {
				return true
			}
			if !seen[to] {
				seen[to] = true
				next = append(next, to)
			}
		}
	}
	return false
}

// ErrInvalidChange is wrapped by the error Mutate returns when the Change a
// callback produced breaks the log's invariants (a programming error in the
// caller): a job whose Message-ID is not the one mutated, an unknown state or
// line kind, a job state that is not the fold of its lines, lines for a job
// that does not exist, or a decrease of Attempts.
var ErrInvalidChange = errors.New("acceptlog: invalid change")

// violations collects what checkJob finds, in the order found.
type violations struct {
	found []string
}

func (v *violations) add(format string, args ...any) {
	v.found = append(v.found, fmt.Sprintf(format, args...))
}
