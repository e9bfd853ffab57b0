package relay

import "github.com/gmailrelay/gmailrelay"

// Priority is how an attempt takes the mailbox's Gmail quota.
type Priority int

const (
	// Background is reconciliation's work (the sweeper's resends and
	// retries): it leaves the quota's send reserve to callers' sends.
	Background Priority = iota
	// Foreground is work a person waits for (a resolve retry): it may
	// spend the whole quota, as a send does.
	Foreground
)

// AttemptRequest is a new attempt of an existing job (Attempt).
type AttemptRequest struct {
	// ID is the job's Message-ID.
	ID string
	// From lists the states the job may be in.
	From []gmailrelay.State
	// Seen is the number of attempts the job had made when the caller
	// decided on this one, or AnyAttempts.
	Seen int
	// Reason is written on the attempt's received line (for example
	// sweeper_resend or resolved_retry).
	Reason gmailrelay.Reason
	// Priority says how the attempt takes the quota (zero: Background).
	Priority Priority
}

// ResolveRequest is a human decision on a job (Resolve).
type ResolveRequest struct {
	// ID is the job's Message-ID.
	ID string
	// Action is ActionMarkSent, ActionRetry or ActionAbandon.
	Action string
	// Note and Actor are written on the resolved line: why, and who.
	Note, Actor string
	// Seen is the number of attempts the job had made when the human
	// looked, or AnyAttempts when not known.
	Seen int
}
