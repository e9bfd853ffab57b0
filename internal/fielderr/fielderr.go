// Package fielderr is gmailrelay's one validation error for an input that
// names its fields: a fault rule, a policy file. The api answers it as
// invalid_argument with the field (docs/api.md#conventions); the relay's own validation
// errors are *relay.Error with CodeInvalid, which carry the same Field and
// Message.
package fielderr

import (
	"fmt"
	"strings"
)

// Error is a problem with one field of an input. Field is the field's
// name as the user wrote it (a JSON name, or a dotted path in a policy
// file such as "channels.billing.grace"), or empty for problems with the
// input as a whole (malformed JSON, YAML syntax, an empty file). Line is
// the 1-based line in a file, or 0 when unknown or not a file.
type Error struct {
	Field   string
	Message string
	Line    int
}

// Error returns "line N: field: message", leaving out the parts that are
// unknown.
func (e *Error) Error() string {
	var b strings.Builder
	if e.Line > 0 {
		fmt.Fprintf(&b, "line %d: ", e.Line)
	}
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Message)
	return b.String()
}

// New returns an *Error naming field with a formatted message.
func New(field, format string, args ...any) *Error {
	return &Error{Field: field, Message: fmt.Sprintf(format, args...)}
}
