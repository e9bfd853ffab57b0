package relay

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Gmail quota costs, in Gmail's quota units.
const (
	UnitsSend = 100
	UnitsList = 5
	UnitsGet  = 5
	// UnitsSendAsList is users.settings.sendAs.list's cost.
	UnitsSendAsList = 1
)

// SentMessage is Gmail's answer to a send.
type SentMessage struct {
	ID       string
	ThreadID string
	LabelIDs []string
}

// ListPage is one page of a messages.list answer.
type ListPage struct {
	IDs           []string
	NextPageToken string
	SizeEstimate  int64
}

// StoredHeader is what messages.get (format metadata) says of a message.
type StoredHeader struct {
	ID        string
	MessageID string // the stored Message-ID header, normalised with <>
	Job       string // the stored JobHeader, if any
	From      string // the stored From header, as written
	LabelIDs  []string
}

// Provider is the relay's view of Gmail; package gmailapi implements it
// with Google's client. Every method takes the mailbox ("me" or an
// address). An HTTP error answer comes back as a *ProviderError; an error
// that happened before the request left this process as a
// *NotReachedError; anything else (a timeout or a reset after the write)
// as it came.
type Provider interface {
	// Send hands a raw RFC 5322 message to users.messages.send.
	Send(ctx context.Context, mailbox string, raw []byte, threadID string) (SentMessage, error)
	// List runs users.messages.list with q and labelIDs, and with
	// includeSpamTrash=true: every list is a reconciliation search, and a
	// copy labelled SENT proves the send whether or not a user trashed it
	// (or Gmail filed it as spam). An empty result is an empty page, not an
	// error.
	List(ctx context.Context, mailbox, q string, labelIDs []string, pageToken string, max int64) (ListPage, error)
	// GetHeader reads one message's Message-ID (messages.get, format
	// metadata). A missing message is an error wrapping ErrMessageNotFound
	// (and the 404 *ProviderError).
	GetHeader(ctx context.Context, mailbox, id string) (StoredHeader, error)
	// SendAs lists the mailbox's send-as addresses
	// (users.settings.sendAs.list): its own and its aliases.
	SendAs(ctx context.Context, mailbox string) ([]SendAsAddress, error)
	// HistoryReader reads the mailbox's history (history.go).
	HistoryReader
	// GetRaw reads one message whole (messages.get, format raw: 5
	// units), as the mailbox holds it. A missing message wraps
	// ErrMessageNotFound.
	GetRaw(ctx context.Context, mailbox, id string) ([]byte, error)
}

// SendAsAddress is one of a mailbox's send-as addresses, as Gmail's
// SendAs resource describes it.
type SendAsAddress struct {
	Email   string
	Primary bool // the address the account signs in with
	Default bool // the From Gmail uses when a message's is not allowed
	// Status is the verificationStatus of a custom alias ("accepted",
	// "pending"); Gmail may leave it empty for the primary address.
	Status string
}

// Verified reports whether Gmail sends as a: the primary address, or an
// alias whose verification Gmail accepted.
func (a SendAsAddress) Verified() bool { return a.Primary || a.Status == "accepted" }

// GmailClock is implemented by a Provider that knows how Gmail's clock
// stands against the relay's: Gmail dates what it stores (internalDate,
// which after: and before: search) at the relay's time plus an offset in
// [lo, hi]. ok is false while it knows nothing yet. Package gmailapi
// bounds it from the Date header of Gmail's answers.
type GmailClock interface {
	ClockOffset() (lo, hi time.Duration, ok bool)
}

// ProviderError is an HTTP error answer from Gmail, in the relay's terms:
// the adapter translates its client's error into one, so nothing above the
// adapter depends on the client library.
type ProviderError struct {
	// Status is the HTTP status code (4xx or 5xx).
	Status int
	// Reason is Gmail's first error reason ("rateLimitExceeded",
	// "authError", …), "" when it gave none.
	Reason string
	// Message is Gmail's error message.
	Message string
	// RetryAfter is Gmail's retry time, from when the answer came: its
	// Retry-After header, else the "Retry after <RFC 3339>" in its message
	// (Gmail's quota answers carry only that; see RetryAtFromMessage); 0
	// when it gave none, or one already past.
	RetryAfter time.Duration
	// Err is the client's original error; its text is this error's text.
	Err error
}

// Error implements error: the client's original text when there is one.
func (e *ProviderError) Error() string {
	if e.Err != nil {
		return e.Err.Error()
	}
	s := fmt.Sprintf("gmail: status %d", e.Status)
	if e.Reason != "" {
		s += ", " + e.Reason
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// Unwrap returns the client's original error.
func (e *ProviderError) Unwrap() error { return e.Err }

// ErrMessageNotFound marks a messages.get for a message the mailbox does
// not hold (deleted between a list and the get, or never there).
var ErrMessageNotFound = errors.New("gmail: message not found")

// NotReachedError marks an error that happened before the request was
// written to the network: Gmail cannot have acted on it.
type NotReachedError struct{ Err error }

// Error implements error.
func (e *NotReachedError) Error() string { return "gmail not reached: " + e.Err.Error() }

// Unwrap returns the network or token error.
func (e *NotReachedError) Unwrap() error { return e.Err }

// ErrTokenRefresh marks a failed OAuth token refresh: Gmail was not
// reached, and an operator must look at the credentials.
var ErrTokenRefresh = errors.New("token refresh failed")
