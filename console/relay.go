package console

import (
	"context"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/faultmodes"
)

// Relay is everything the console reads from and asks of the relay. The
// console never touches the log or the send path in any other way, so a
// change of the relay's own signatures is fixed in adapter.go alone.
type Relay interface {
	// Now is the relay's clock (the injected one in tests).
	Now() time.Time
	// Mode is "sandbox" (the embedded emulator) or "gmail" (live).
	Mode() string
	// Stats returns the log's counters; it never scans jobs.
	Stats(ctx context.Context) (gmailrelay.Stats, error)
	// List pages through jobs as acceptlog.Log.List does (the state index
	// when o.State is set).
	List(ctx context.Context, o gmailrelay.ListOptions) (jobs []gmailrelay.Job, next string, err error)
	// Job returns the job and its lines, oldest first; an error wrapping
	// gmailrelay.ErrNotFound when there is no such job.
	Job(ctx context.Context, messageID string) (gmailrelay.Job, []gmailrelay.Line, error)
	// Raw returns the stored message; an error wrapping gmailrelay.ErrNotFound
	// when none is stored (never stored, or dropped by retention).
	Raw(ctx context.Context, messageID string) ([]byte, error)
	// Lines returns lines with Seq > after in global order, at most limit,
	// as acceptlog.Log.Lines does.
	Lines(ctx context.Context, after uint64, limit int) (lines []gmailrelay.Line, next uint64, err error)
	// Resolve applies a human decision (relay.ActionMarkSent, ActionRetry,
	// ActionAbandon) with the actor and note written on the resolved line,
	// refused when the job has made another attempt than the seen ones
	// (relay.AnyAttempts: not known). Errors are *relay.Error (not_found,
	// invalid_argument, conflict).
	Resolve(ctx context.Context, messageID, action, note, actor string, seen int) (gmailrelay.Job, error)
	// Mailboxes returns the state of each mailbox the relay sends from.
	Mailboxes(ctx context.Context) ([]Mailbox, error)
	// Channels returns the policy's channel names, sorted.
	Channels() []string
	// Faults returns the fault rules, or nil when faults are disabled.
	Faults() Faults
}

// Faults is the runtime fault rule set (*faultmodes.Set implements it).
type Faults interface {
	// List returns every rule, newest first.
	List() []faultmodes.Rule
	// Add validates and stores a rule; errors are *faultmodes.FieldError.
	Add(spec faultmodes.Spec) (faultmodes.Rule, error)
	// Remove deletes a rule and reports whether it existed.
	Remove(id string) bool
	// AllowCrash reports whether crash-after-forward may be added.
	AllowCrash() bool
}

// Mailbox is what the overview shows about one mailbox.
type Mailbox struct {
	Name string
	// Address is the mailbox's address ("": the default mailbox of a
	// relay without a mailboxes policy, which sends as any From).
	Address string
	// HandleChecked: a Message-ID was read back at least once.
	HandleChecked bool
	// HandleUntrusted: Gmail replaced one of our Message-IDs here, so a
	// search miss proves nothing in this mailbox.
	HandleUntrusted bool
	// Rewrites counts the sends whose Message-ID Gmail replaced.
	Rewrites int
	// QuotaPerMinute is the relay's budget in Gmail units (0: not known).
	QuotaPerMinute int
	// QuotaSpent is the units spent since the relay started.
	QuotaSpent int64
}
