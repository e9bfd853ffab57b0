package gmailrelay

import (
	"errors"
	"time"
)

// State is where a job stands. A job's state always equals the fold of its
// lines (see Fold).
type State string

const (
	// StateForwarding: an attempt was logged (fsynced) and handed to Gmail;
	// its outcome is not known yet. The send path moves it to sent, failed or
	// unknown; on restart, recovery moves every forwarding job to unknown.
	StateForwarding State = "forwarding"
	// StateSent: the effect is confirmed, by Gmail's response or by exactly
	// one SENT hit in the mailbox. Terminal, except that the verify pass moves
	// it to review when a duplicate shows up.
	StateSent State = "sent"
	// StateFailed: definitely not sent. Job.Retryable says whether a new
	// attempt may be made (by the caller's retry or by the sweeper).
	StateFailed State = "failed"
	// StateUnknown: ambiguous (timeout, reset, 5xx, dropped response, crash
	// mid-flight). Only the sweeper moves it out.
	StateUnknown State = "unknown"
	// StateReview: a human must decide (duplicate, review-only channel,
	// untrusted handle, still missing after the last check). Only the resolve
	// endpoint moves it out.
	StateReview State = "review"
	// StateAbandoned: a human decided not to send. Terminal.
	StateAbandoned State = "abandoned"
)

// States lists every state, in display order.
var States = []State{StateQueued, StateForwarding, StateSent, StateFailed, StateUnknown, StateReview, StateAbandoned}

// Valid reports whether s is one of the known states.
func (s State) Valid() bool {
	for _, v := range States {
		if s == v {
			return true
		}
	}
	return false
}

// Kind is the kind of a log line.
type Kind string

// The line kinds (docs/states.md#log-line-kinds).
const (
	KindReceived   Kind = "received"   // the request was accepted for a job
	KindFault      Kind = "fault"      // a fault rule decided this attempt
	KindForwarding Kind = "forwarding" // the attempt is about to be handed to Gmail
	KindEffect     Kind = "effect"     // Gmail accepted the message (Source says how we know)
	KindNotSent    Kind = "not_sent"   // definitely not sent
	KindAmbiguous  Kind = "ambiguous"  // outcome unknown
	KindSearch     Kind = "search"     // a mailbox search and its hits
	KindState      Kind = "state"      // a state change with its reason
	KindReview     Kind = "review"     // handed to a human, with the evidence
	KindResolved   Kind = "resolved"   // a human resolved a review
	KindHandle     Kind = "handle"     // the Message-ID read back after a send
	KindBounce     Kind = "bounce"     // a delivery report about one recipient (the job stays sent)
)

// Effect sources.
const (
	SourceResponse = "response" // Gmail's answer to messages.send
	SourceSearch   = "search"   // a SENT hit found by rfc822msgid: search
	SourceHuman    = "human"    // an operator's mark-sent
	SourceHistory  = "history"  // a SENT record of the mailbox's history (users.history.list)
)

// Line is one entry of the acceptance log. Seq is global and strictly
// increasing; Time comes from the relay's clock. State, when set, is the
// job's state after this line: Fold takes the last non-empty State.
type Line struct {
	Seq       uint64    `json:"seq"`
	Time      time.Time `json:"time"`
	MessageID string    `json:"message_id"`
	Attempt   int       `json:"attempt"`
	Kind      Kind      `json:"kind"`
	State     State     `json:"state,omitempty"`
	Reason    Reason    `json:"reason,omitempty"`

	// Effect lines.
	Source   string   `json:"source,omitempty"`
	GmailID  string   `json:"gmail_id,omitempty"`
	ThreadID string   `json:"thread_id,omitempty"`
	LabelIDs []string `json:"label_ids,omitempty"`

	// not_sent / ambiguous lines: what Gmail (or the network) said.
	Status    int    `json:"status,omitempty"`
	Retryable bool   `json:"retryable,omitempty"`
	Error     string `json:"error,omitempty"`

	// search lines.
	Query    string `json:"query,omitempty"`
	Hits     int    `json:"hits,omitempty"`
	SentHits int    `json:"sent_hits,omitempty"`
	Check    int    `json:"check,omitempty"`
	// Witness, on a search line of a miss: "found" (the index had caught
	// up past the attempt), "missing" (a later message exists but none was
	// found: no miss counted) or "none" (no message dated after the
	// attempt: the time rule applies).
	Witness string `json:"witness,omitempty"`

	// fault lines.
	RuleID string `json:"rule_id,omitempty"`
	Mode   string `json:"mode,omitempty"`

	// handle lines: what Gmail stored as the Message-ID.
	StoredMessageID string `json:"stored_message_id,omitempty"`
	HandleKept      *bool  `json:"handle_kept,omitempty"`

	// received / resolved lines.
	Channel string `json:"channel,omitempty"`
	Actor   string `json:"actor,omitempty"`
	Note    string `json:"note,omitempty"`

	// bounce lines: what a delivery report (GmailID is the report's)
	// said of one recipient. DSNStatus is the enhanced status code
	// (5.1.1); in JSON a bounce line carries it as "status" (see
	// MarshalJSON), the field the report calls it.
	Recipient  string `json:"recipient,omitempty"`
	Action     string `json:"action,omitempty"`
	DSNStatus  string `json:"-"`
	Diagnostic string `json:"diagnostic,omitempty"`
}

// Job is the current record of one logical email, keyed by its Message-ID.
type Job struct {
	MessageID   string `json:"message_id"`
	Key         string `json:"key,omitempty"`
	Channel     string `json:"channel"`
	Mailbox     string `json:"mailbox"`
	Fingerprint string `json:"fingerprint"`
	State       State  `json:"state"`
	Retryable   bool   `json:"retryable,omitempty"` // meaningful in StateFailed
	Attempts    int    `json:"attempts"`
	Effects     int    `json:"effects"`                // effect lines written for this job
	ThreadIDIn  string `json:"thread_id_in,omitempty"` // threadId the caller asked for

	// Bounced and Delayed count the recipients delivery reports said
	// failed, or were delayed (bounce lines): Gmail accepted the message,
	// the job stays sent.
	Bounced int `json:"bounced,omitempty"`
	Delayed int `json:"delayed,omitempty"`

	// Gmail's answer, once sent.
	GmailID  string   `json:"gmail_id,omitempty"`
	ThreadID string   `json:"thread_id,omitempty"`
	LabelIDs []string `json:"label_ids,omitempty"`

	// The last failure, replayed to callers of a non-retryable failed job.
	LastStatus int    `json:"last_status,omitempty"`
	LastError  string `json:"last_error,omitempty"`
	LastReason Reason `json:"last_reason,omitempty"`

	// Sweeper bookkeeping. NextCheckAt is zero when no check is scheduled;
	// a job is in the due index exactly when NextCheckAt is non-zero.
	NextCheckAt time.Time `json:"next_check_at,omitzero"`
	Checks      int       `json:"checks,omitempty"` // consecutive search misses
	Verified    bool      `json:"verified,omitempty"`
	// VerifyLooks counts the verify searches that found exactly one copy;
	// a job is Verified after the second, a late look (see the sweeper's
	// lateLook), so a second copy Gmail indexed late is still seen.
	VerifyLooks int       `json:"verify_looks,omitempty"`
	AmbiguousAt time.Time `json:"ambiguous_at,omitzero"`

	// SendAt is the caller's "not before" (send_at); zero means at once.
	// The outbox delivers queued jobs per mailbox by SendAt (or CreatedAt
	// when zero), then by acceptance.
	SendAt time.Time `json:"send_at,omitzero"`

	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// PrunedAt is when the retention pass removed the job's raw message and
	// detail lines (zero while it has them). A pruned job keeps this record
	// and its effect, resolved and last state lines, so the front door still
	// replays it and refuses a different message under its key.
	PrunedAt time.Time `json:"pruned_at,omitzero"`
	// LeaseUntil, while the job is forwarding, is when the attempt in
	// flight stops belonging to the process that started it: the
	// attempt's start plus that process's lease (twice its Gmail
	// deadline). Past it, any replica may turn the job unknown. Zero in
	// every other state (Move clears it), and on jobs an older gmailrelay
	// started (their lease is the recovering process's own).
	LeaseUntil time.Time `json:"lease_until,omitzero"`
}

// Errors returned by the log.
var (
	// ErrNotFound: no job with that Message-ID.
	ErrNotFound = errors.New("acceptlog: job not found")
	// ErrClosed: the log was closed.
	ErrClosed = errors.New("acceptlog: closed")
)

// Fold returns the state a job's lines imply: the State of the last line
// that carries one, or "" when none does.
func Fold(lines []Line) State {
	var s State
	for _, l := range lines {
		if l.State != "" {
			s = l.State
		}
	}
	return s
}
