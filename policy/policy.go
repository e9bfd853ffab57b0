// Package policy reads and validates the channel policy file (--policy):
// for each channel, what the sweeper does with an ambiguous send (retry it
// or hand it to a human), how long it waits for Gmail's search index
// (grace), how many misses it accepts (checks) and how many attempts a job
// may take (max_attempts); plus the relay-wide Message-ID domain and the
// handle-verification setting. The schema is docs/policy.md.
//
// Channel names are never defaulted silently: a send naming a channel that
// is not in the policy is an error. A file without a "default" channel is
// valid; every send must then name its channel.
package policy

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/gmailrelay/gmailrelay/internal/fielderr"
)

// OnUnknown is what the sweeper does with a job whose send was ambiguous
// and that its mailbox searches did not find.
type OnUnknown string

const (
	// Retry is at-least-once: after Checks consecutive misses, resend with
	// the same Message-ID (the receiver's dedup hint).
	Retry OnUnknown = "retry"
	// Review never resends automatically: every unknown goes to a human with
	// the search evidence. For money and irreversible messages.
	Review OnUnknown = "review"
)

// Valid reports whether o is Retry or Review.
func (o OnUnknown) Valid() bool { return o == Retry || o == Review }

// Verify is when the relay reads the stored Message-ID back after a send to
// check that Gmail kept it.
type Verify string

const (
	// VerifyFirst checks the first send of each mailbox after the relay
	// starts, then trusts the handle until evidence says otherwise.
	VerifyFirst Verify = "first"
	// VerifyAlways checks after every send (one extra messages.get each).
	VerifyAlways Verify = "always"
	// VerifyNever never checks: the handle is assumed kept.
	VerifyNever Verify = "never"
)

// Valid reports whether v is one of the three settings.
func (v Verify) Valid() bool { return v == VerifyFirst || v == VerifyAlways || v == VerifyNever }

// Defaults applied to a channel field the file omits, and to Default().
const (
	DefaultGrace       = 3 * time.Minute
	DefaultChecks      = 2
	DefaultMaxAttempts = 3
	// DefaultMaxUnwitnessed is how long the sweeper keeps looking for a
	// witness before an ambiguous job goes to review (index_unverifiable).
	DefaultMaxUnwitnessed = time.Hour
	// DefaultHistorySettle is a channel's history_settle when unset.
	DefaultHistorySettle = time.Minute
	// DefaultLimitBounceWindow is limit_bounce_window when unset: how
	// long before Gmail's sending-limit notice a send is in doubt.
	DefaultLimitBounceWindow = time.Hour
	// DefaultChannel is the channel a send without one uses.
	DefaultChannel = "default"
	// DefaultMsgIDDomain is the Message-ID domain when neither the file nor
	// --msgid-domain sets one.
	DefaultMsgIDDomain = "gmailrelay.local"
)

// Channel is the policy of one channel.
type Channel struct {
	Name      string
	OnUnknown OnUnknown
	// Grace is how long the sweeper waits after an ambiguous attempt (and
	// between checks) before searching the mailbox; at least MinGrace (1s).
	Grace time.Duration
	// Checks is how many consecutive search misses the sweeper accepts
	// before acting (resend on Retry, review on Review); >= 1.
	Checks int
	// MaxAttempts caps the attempts of one job (caller retries and sweeper
	// resends together); >= 1. Irrelevant, but allowed, on Review channels.
	MaxAttempts int
	// MaxUnwitnessed (file key max_unwitnessed) is how long after an
	// ambiguous attempt the sweeper keeps finding no witness (the index
	// behind, or a query Gmail silently cannot match) before the job goes
	// to review as index_unverifiable, with an alarm. Zero means
	// DefaultMaxUnwitnessed; see Unwitnessed.
	MaxUnwitnessed time.Duration
	// HistorySettle (file key history_settle) is how far past the end of
	// an ambiguous attempt the mailbox's history must be known complete
	// before its silence counts as a miss: Gmail lists a new message in
	// the history within seconds, rarely later. Zero means
	// DefaultHistorySettle; see Settle.
	HistorySettle time.Duration
	// Witness (file key witness) is what a Retry channel's resend after
	// an ambiguous attempt needs: WitnessSearch (the default) the search
	// path's witnessed misses, WitnessHistory a settled history miss
	// alone. A history match resolves the job on every channel.
	Witness Witness
}

// Witness names the evidence a resend needs (Channel.Witness).
type Witness string

const (
	// WitnessSearch: the search path's witnessed misses (Checks of them).
	WitnessSearch Witness = "search"
	// WitnessHistory: one settled history miss.
	WitnessHistory Witness = "history"
)

// Valid reports whether w is a witness the policy knows ("" is the
// default, search).
func (w Witness) Valid() bool { return w == WitnessSearch || w == WitnessHistory }

// Settle is the channel's HistorySettle, DefaultHistorySettle when unset.
func (c Channel) Settle() time.Duration {
	if c.HistorySettle <= 0 {
		return DefaultHistorySettle
	}
	return c.HistorySettle
}

// ResendOnHistory reports whether a settled history miss alone lets the
// channel resend.
func (c Channel) ResendOnHistory() bool { return c.Witness == WitnessHistory }

// Unwitnessed is the channel's MaxUnwitnessed, DefaultMaxUnwitnessed when
// unset.
func (c Channel) Unwitnessed() time.Duration {
	if c.MaxUnwitnessed <= 0 {
		return DefaultMaxUnwitnessed
	}
	return c.MaxUnwitnessed
}

// Policy is the whole policy file.
type Policy struct {
	// MsgIDDomain is the domain part of every derived Message-ID.
	MsgIDDomain string
	// MsgIDSecretFile (file key msgid_secret_file) is the file holding
	// the Message-ID secret; "" for none (Message-IDs are sha256(key)).
	// The policy names the file only: serve reads it once at start.
	MsgIDSecretFile string
	VerifyHandle    Verify
	// Channels maps each channel name to its policy; Channel.Name equals
	// the key.
	Channels map[string]Channel
	// Retention is how long a terminal job keeps its raw message and detail
	// lines (file key retention, e.g. "90d"); zero keeps them forever. A
	// pruned job keeps its record, so its key still replays.
	Retention time.Duration
	// Mailboxes holds the mailboxes' policies (file key mailboxes), keyed
	// by name; empty means one, DefaultMailbox. See MailboxList.
	Mailboxes map[string]Mailbox
	// LimitBounceWindow (file key limit_bounce_window) is how long before
	// a sending-limit notice from Gmail a mailbox's sends are put in
	// doubt: the notice names no message, and Gmail keeps answering 200
	// for a while after the limit. Zero means DefaultLimitBounceWindow;
	// see BounceWindow.
	LimitBounceWindow time.Duration
	// BuiltInChannels reports that Channels are Default()'s: no policy
	// file, or a file without channels. serve shortens the default
	// channel's grace in sandbox mode only then, never a grace a file set.
	BuiltInChannels bool
}

// BounceWindow is the policy's LimitBounceWindow,
// DefaultLimitBounceWindow when unset.
func (p *Policy) BounceWindow() time.Duration {
	if p.LimitBounceWindow <= 0 {
		return DefaultLimitBounceWindow
	}
	return p.LimitBounceWindow
}

// MinGrace is the shortest grace a channel may set: below it a search
// after an ambiguous send says nothing about Gmail's index.
const MinGrace = time.Second

// MinRetention is the shortest retention a policy may set.
const MinRetention = time.Hour

// FieldError is a problem with one field of a policy. Field is the dotted
// path of the field in the file ("channels.billing.grace"), or empty for
// problems with the document as a whole (YAML syntax, an empty file). Line
// is the 1-based line in the file, or 0 when unknown (for example for errors
// from Validate, which sees no file). It is the project's one field error,
// fielderr.Error.
type FieldError = fielderr.Error

// Default returns the built-in policy used without --policy: only the
// "default" channel (retry, 3m grace, 2 checks, 3 max attempts), handle
// verification "first", Message-ID domain DefaultMsgIDDomain.
func Default() *Policy {
	return &Policy{
		MsgIDDomain:  DefaultMsgIDDomain,
		VerifyHandle: VerifyFirst,
		Channels: map[string]Channel{
			DefaultChannel: {Name: DefaultChannel, OnUnknown: Retry, Grace: DefaultGrace, Checks: DefaultChecks, MaxAttempts: DefaultMaxAttempts},
		},
		BuiltInChannels: true,
	}
}

// Load reads and parses the policy file at path. Every error starts with
// the path; a parse problem wraps a *FieldError.
func Load(path string) (*Policy, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		// The path leads the message already; keep only the cause.
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, fmt.Errorf("%s: read policy: %w", path, err)
	}
	p, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// Channel returns the policy of the named channel; "" means
// DefaultChannel. An unknown name is a *FieldError with Field "channel"
// listing the known names — including when name is "" and the policy has no
// default channel.
func (p *Policy) Channel(name string) (Channel, error) {
	if name == "" {
		name = DefaultChannel
	}
	if c, ok := p.Channels[name]; ok {
		return c, nil
	}
	return Channel{}, &FieldError{
		Field:   "channel",
		Message: fmt.Sprintf("unknown channel %q (known: %s)", name, strings.Join(p.Names(), ", ")),
	}
}

// Names returns the channel names, sorted.
func (p *Policy) Names() []string {
	names := make([]string, 0, len(p.Channels))
	for name := range p.Channels {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// Validate checks a Policy built in code (or changed after Parse, e.g. by
// --msgid-domain) against the same rules Parse applies, and returns the
// first problem as a *FieldError naming the field (Line 0), or nil. Channels
// are checked in name order.
func (p *Policy) Validate() error {
	if msg := checkDomain(p.MsgIDDomain); msg != "" {
		return &FieldError{Field: "msgid_domain", Message: msg}
	}
	if !p.VerifyHandle.Valid() {
		return &FieldError{Field: "verify_handle", Message: fmt.Sprintf("unknown value %q; want first, always or never", p.VerifyHandle)}
	}
	if len(p.Channels) == 0 {
		return &FieldError{Field: "channels", Message: "at least one channel is required"}
	}
	if p.Retention != 0 && p.Retention < MinRetention {
		return &FieldError{Field: "retention", Message: fmt.Sprintf("must be at least %s, got %s", MinRetention, p.Retention)}
	}
	for _, name := range p.Names() {
		c := p.Channels[name]
		path := "channels." + name
		if msg := checkChannelName(name); msg != "" {
			return &FieldError{Field: path, Message: msg}
		}
		if c.Name != name {
			return &FieldError{Field: path, Message: fmt.Sprintf("Name is %q, want the map key %q", c.Name, name)}
		}
		if !c.OnUnknown.Valid() {
			return &FieldError{Field: path + ".on_unknown", Message: onUnknownMessage(string(c.OnUnknown))}
		}
		if c.Grace <= 0 {
			return &FieldError{Field: path + ".grace", Message: fmt.Sprintf("must be positive, got %s", c.Grace)}
		}
		if c.Grace < MinGrace {
			return &FieldError{Field: path + ".grace", Message: fmt.Sprintf("must be at least %s, got %s", MinGrace, c.Grace)}
		}
		if c.Checks < 1 {
			return &FieldError{Field: path + ".checks", Message: fmt.Sprintf("must be at least 1, got %d", c.Checks)}
		}
		if c.MaxUnwitnessed < 0 {
			return &FieldError{Field: path + ".max_unwitnessed", Message: fmt.Sprintf("must be positive, got %s", c.MaxUnwitnessed)}
		}
		if c.MaxAttempts < 1 {
			return &FieldError{Field: path + ".max_attempts", Message: fmt.Sprintf("must be at least 1, got %d", c.MaxAttempts)}
		}
	}
	return nil
}

func onUnknownMessage(v string) string {
	return fmt.Sprintf("unknown value %q; want retry or review", v)
}

// checkChannelName returns why name is not a valid channel name
// ([a-z0-9_-]+), or "".
func checkChannelName(name string) string { return checkName("channel", name) }

// checkName returns why name is not a valid name of a kind of thing
// (channel, mailbox): [a-z0-9_-]+, or "".
func checkName(kind, name string) string {
	if name == "" {
		return kind + " name must not be empty"
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return fmt.Sprintf("invalid %s name %q: use lower-case letters, digits, _ and -", kind, name)
		}
	}
	return ""
}

// checkDomain returns why d is not a usable hostname for the right-hand
// side of a Message-ID (letters, digits, dots and hyphens; labels of 1 to 63
// characters that neither start nor end with a hyphen; 253 characters at
// most), or "".
func checkDomain(d string) string {
	if d == "" {
		return "must not be empty"
	}
	if len(d) > 253 {
		return fmt.Sprintf("longer than 253 characters (%d)", len(d))
	}
	for _, label := range strings.Split(d, ".") {
		if label == "" {
			return fmt.Sprintf("invalid hostname %q: empty label", d)
		}
		if len(label) > 63 {
			return fmt.Sprintf("invalid hostname %q: label longer than 63 characters", d)
		}
		if label[0] == '-' || label[len(label)-1] == '-' {
			return fmt.Sprintf("invalid hostname %q: a label starts or ends with a hyphen", d)
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-') {
				return fmt.Sprintf("invalid hostname %q: use letters, digits, dots and hyphens", d)
			}
		}
	}
	return ""
}
