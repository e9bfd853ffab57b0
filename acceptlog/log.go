package acceptlog

import (
	"time"
)

// Options configure Open.
type Options struct {
	// Now stamps lines whose Time is zero. Defaults to time.Now.
	Now func() time.Time
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
	OldestUnknown time.Time `json:"oldest_unknown,omitempty"`
}
