package acceptlog

import (
	"fmt"
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
	var v violations
	for _, s := range found {
		v.add("%s", s)
	}
	return v.err()
}
