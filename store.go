package gmailrelay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"
)

// Store is the acceptance log as its users see it, whatever keeps it: the
// bbolt file (*Log, the default) or a PostgreSQL database (package pglog).
// Every implementation passes the conformance suite in acceptlog/logtest;
// the domain rules of a change (validation, the table of transitions, the
// stamping of lines) are Prepare's, shared by all of them.
type Store interface {
	// Mutate reads the job messageID, calls fn with a copy of it (nil when
	// there is none) and writes the Change fn returns, in one transaction
	// with the job locked against every other writer (see Log.Mutate).
	// Creating a job whose Message-ID differs from an existing job's only
	// in ASCII case is refused with a *CaseTwinError, nothing written.
	Mutate(ctx context.Context, messageID string, fn func(cur *Job) (Change, error)) (Job, []Line, error)
	// Get returns the job messageID, or an error wrapping ErrNotFound.
	Get(ctx context.Context, messageID string) (Job, error)
	// JobByKey returns the job created with the job key key, whatever
	// identity the log had then (a job created before a rekey keeps its
	// Message-ID), or an error wrapping ErrNotFound when there is none.
	// When several jobs have the key (created with other identities
	// before the log kept its own), it is the one created first.
	JobByKey(ctx context.Context, key string) (Job, error)
	// JobLines returns the job's lines oldest first (ErrNotFound wrapped
	// when there is no such job).
	JobLines(ctx context.Context, messageID string) ([]Line, error)
	// Raw returns the message stored for the job (ErrNotFound wrapped when
	// none is).
	Raw(ctx context.Context, messageID string) ([]byte, error)
	// List pages through the jobs by Message-ID (see Log.List).
	List(ctx context.Context, o ListOptions) (jobs []Job, next string, err error)
	// Lines pages through all lines by Seq (see Log.Lines).
	Lines(ctx context.Context, after uint64, limit int) (lines []Line, next uint64, err error)
	// Due returns the jobs whose NextCheckAt is set and not after now,
	// earliest first (see Log.Due).
	Due(ctx context.Context, now time.Time, limit int) ([]Job, error)
	// ByState returns the jobs in state s by Message-ID (see Log.ByState).
	ByState(ctx context.Context, s State, limit int) ([]Job, error)
	// Mailbox returns the record of a mailbox (the zero record named name
	// when there is none).
	Mailbox(ctx context.Context, name string) (Mailbox, error)
	// Stats returns the log's counters.
	Stats(ctx context.Context) (Stats, error)
	// Prune applies the retention rule to at most limit jobs (see
	// Log.Prune).
	Prune(ctx context.Context, cutoff time.Time, limit int) (PruneResult, error)
	// SendTimes returns, oldest first, the times of the attempts handed to
	// Gmail for mailbox at or after since (every forwarding line, resends
	// included): the daily sending budget is counted from it.
	SendTimes(ctx context.Context, mailbox string, since time.Time) ([]time.Time, error)
	// PruneSends drops the SendTimes entries older than before (of every
	// mailbox) and returns how many it dropped.
	PruneSends(ctx context.Context, before time.Time) (int, error)
	// Backup streams a consistent copy of the log; a backend that has its
	// own tools for that (PostgreSQL: pg_dump) returns ErrUnsupported.
	Backup(ctx context.Context, w io.Writer, size func(int64)) (int64, error)
	// Size is the log's size in bytes (ErrUnsupported where unknown).
	Size(ctx context.Context) (int64, error)
	// Check verifies the log's invariants and names each violation.
	Check(ctx context.Context) error
	// Commits counts the write transactions Mutate committed.
	Commits() uint64
	// Close releases the log; calling it again returns nil.
	Close() error
}

// ErrUnsupported is wrapped by what a backend answers for an operation it
// leaves to other tools (a backup of the PostgreSQL log is pg_dump's).
var ErrUnsupported = errors.New("acceptlog: not supported by this backend")

// Shared is implemented by a Store several relay processes may use at once
// (PostgreSQL). On such a log an attempt in flight may be another live
// replica's: it is only taken over (turned unknown) once its lease has run
// out, never merely because this process (re)started.
type Shared interface {
	Shared() bool
}

// QueueClaimer is implemented by a shared Store (PostgreSQL) so that one
// replica at a time delivers a given mailbox's queue, head first, in order
// (per mailbox, send_at then acceptance order: docs/design.md#the-outbox).
// ClaimQueued claims, for one delivery pass, the queues of the mailboxes
// no other replica's pass holds, and returns their queued jobs read after
// the claim, in no particular order. mailbox names a queued job's mailbox
// as the caller serves it (its canonical name) and says false for one the
// caller does not serve: such a mailbox is never claimed, so a replica
// whose policy lacks it leaves it to one that has it. The claims last
// until QueueClaim.Release (or this Store's process dies); nothing renews
// them between passes. Claims only keep the order: a job's row lock and
// the transition table already allow one attempt.
type QueueClaimer interface {
	ClaimQueued(ctx context.Context, mailbox func(name string) (string, bool)) (QueueClaim, error)
}

// QueueClaim is what ClaimQueued claimed for one delivery pass.
type QueueClaim struct {
	// Jobs are every queued job of the claimed mailboxes.
	Jobs []Job
	// Busy counts the queued jobs of the mailboxes another replica's pass
	// holds.
	Busy int
	// Unserved counts the queued jobs of the mailboxes the caller does not
	// serve.
	Unserved int
	// Release ends the claims; calling it again does nothing. Never nil.
	Release func()
}

// IsShared reports whether s is a log several processes may share.
func IsShared(s Store) bool {
	sh, ok := s.(Shared)
	return ok && sh.Shared()
}

// SendBudget is implemented by a shared Store (PostgreSQL): it keeps the
// daily sending budget of a mailbox for every relay on the log, counted
// at decision time from the index of forwarding lines (SendTimes) plus the
// holds of attempts admitted but not logged yet.
type SendBudget interface {
	// SendBudget counts mailbox's attempts at or after since and its live
	// holds (Used). When Used < limit it reports OK, and with hold it also
	// adds a hold, serialised with every other replica's: the next
	// forwarding line this Store writes for mailbox takes the hold over
	// (in its transaction), ReleaseSend gives it back. When Used >= limit,
	// Frees is when the entry that must leave the window for one more
	// attempt does (its time, not yet plus the window).
	SendBudget(ctx context.Context, mailbox string, limit int, since, now time.Time, hold bool) (BudgetAnswer, error)
	// ReleaseSend drops one of this Store's holds of mailbox (an attempt
	// admitted and then not made); none left is not an error.
	ReleaseSend(ctx context.Context, mailbox string) error
}

// BudgetAnswer is what SendBudget found.
type BudgetAnswer struct {
	Used  int
	OK    bool
	Frees time.Time
}

// ReplicaCounter is implemented by a shared Store (PostgreSQL) so that
// the relays on it divide each mailbox's per-minute quota between them
// (relay.Quota.SetShare).
type ReplicaCounter interface {
	// LiveReplicas counts the relays using the log now, the caller
	// included (so never less than 1): those that have counted before and
	// whose process is still connected. The caller is counted from its
	// first call until it closes the Store or dies.
	LiveReplicas(ctx context.Context) (int, error)
}

// MailboxEditor is implemented by a Store that edits a mailbox's record
// on its own, outside any job's change (both logs do): the history
// cursor belongs to the mailbox, not to a job. fn gets the stored record
// (the zero record named name when there is none) and may be called more
// than once (a retried transaction): it must depend only on its argument.
// The edit is one transaction, serialised with every other edit of the
// record, a job change's EditMailbox included.
type MailboxEditor interface {
	EditMailbox(ctx context.Context, name string, fn func(m *Mailbox)) (Mailbox, error)
}

// CheckEditMailbox is what every EditMailbox refuses before it writes: an
// ended context, a mailbox without a name (ErrInvalidChange).
func CheckEditMailbox(ctx context.Context, name string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("edit mailbox %s: %w", name, err)
	}
	if name == "" {
		return fmt.Errorf("edit mailbox: %w: no name", ErrInvalidChange)
	}
	return nil
}

// MailboxPauses is implemented by a shared Store: the pause Gmail asked a
// mailbox for (a rate limit) is kept in the mailbox's record, so a 429
// seen by one replica pauses all of them.
type MailboxPauses interface {
	// PausedUntil returns the mailbox's pause (the zero time when none was
	// ever set).
	PausedUntil(ctx context.Context, mailbox string) (time.Time, error)
	// PauseUntil sets the pause to until unless a later one is stored.
	PauseUntil(ctx context.Context, mailbox string, until time.Time) error
}

// PageLimit is the page size List and Lines use for a requested limit n:
// the default for n ≤ 0, at most the maximum. Every backend pages alike.
func PageLimit(n int) int {
	switch {
	case n <= 0:
		return defaultLimit
	case n > maxLimit:
		return maxLimit
	}
	return n
}

// Page sizes of List and Lines.
const (
	defaultLimit = 100
	maxLimit     = 1000
)
