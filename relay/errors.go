package relay

import (
	"errors"
	"fmt"

	"github.com/gmailrelay/gmailrelay"
)

// Code classifies an Error; the api package maps each code to one HTTP
// status (see docs/api.md#conventions).
type Code string

// Error codes.
const (
	CodeInvalid          Code = "invalid_argument"     // 400: bad input
	CodeUnauthorized     Code = "unauthorized"         // 401
	CodeForbidden        Code = "forbidden"            // 403: needs the admin token
	CodeNotFound         Code = "not_found"            // 404
	CodeInFlight         Code = "in_flight"            // 409 + Retry-After: the same key is being forwarded
	CodeConflict         Code = "conflict"             // 409: the job's state does not allow the action
	CodeTooLarge         Code = "too_large"            // 413
	CodeMismatch         Code = "idempotency_mismatch" // 422: same key, different content
	CodeRateLimited      Code = "rate_limited"         // 429 + Retry-After: nothing was sent
	CodeProviderRejected Code = "provider_rejected"    // 502: Gmail rejected the message itself
	CodeUnavailable      Code = "unavailable"          // 503 + Retry-After: definitely not sent
	CodeFaultDropped     Code = "fault_injected"       // 504: forward-then-drop-response with drop "504"
	CodeInternal         Code = "internal"             // 500
)

// CodeReservedMessageID (409): a caller's Message-ID in the relay's own
// namespace without the key that derives it (CheckReservedMessageID).
const CodeReservedMessageID Code = "reserved_message_id"

// CodeFromNotVerified (400, field from): the From is not a verified
// send-as address of the mailbox, which Gmail would silently replace with
// the mailbox's default address (Mailbox.checkFrom).
const CodeFromNotVerified Code = "from_not_verified"

// CodeMessageIDConflict (409): a new job's Message-ID differs from an
// existing job's only in ASCII case (job identity ignores case, as
// Gmail's search does); nothing was logged or sent. The *Error wraps the
// log's *gmailrelay.CaseTwinError, which names the existing job.
const CodeMessageIDConflict Code = "message_id_conflict"

// caseConflict turns the log's refusal of a case twin into a
// CodeMessageIDConflict *Error; other errors pass unchanged.
func caseConflict(err error) error {
	var ce *gmailrelay.CaseTwinError
	if !errors.As(err, &ce) {
		return err
	}
	return &Error{Code: CodeMessageIDConflict, Field: "message_id", Err: err,
		Message: "Message-ID " + clip(ce.MessageID, 120) + " differs from that of job " + clip(ce.Existing, 120) +
			" only in case: job identity ignores case, as Gmail's search does; nothing was logged or sent"}
}

// Error is the one error type the relay hands to its callers. Message is
// safe to show to a client; Field names the offending input field, if any.
type Error struct {
	Code    Code
	Message string
	Field   string
	// RetryAfter, in seconds, for in_flight, rate_limited and unavailable.
	RetryAfter int
	// Err is the underlying cause, logged but never shown to clients.
	Err error
}

// Error implements error: the code, the message, the field and the cause.
func (e *Error) Error() string {
	msg := string(e.Code) + ": " + e.Message
	if e.Field != "" {
		msg += " (field " + e.Field + ")"
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns the underlying cause.
func (e *Error) Unwrap() error { return e.Err }

// Errorf returns an *Error with the code and a formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Invalid returns a CodeInvalid error naming the field.
func Invalid(field, format string, args ...any) *Error {
	return &Error{Code: CodeInvalid, Field: field, Message: fmt.Sprintf(format, args...)}
}

// ErrorCode returns the code of err's *Error, or CodeInternal.
func ErrorCode(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternal
}
