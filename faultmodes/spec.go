// Package faultmodes holds the fault rules an operator switches on at
// runtime (POST /admin/faults) to prove the relay's crash boundaries: what a
// rule is, how it is validated, and which rule decides a send attempt.
//
// The rules act from outside the send path: Wrap puts a Set around a
// mailbox's Gmail client (a relay.Provider), and the relay asks that
// wrapper, as a relay.FaultInjector, for each attempt's fault at admission,
// logs it as a fault line, and calls the wrapper's Send, which fails,
// drops Gmail's answer or ends the process as the fault says. A fault
// forced for one request (the X-Relay-Fault header) travels on the
// request's context (WithForced). The package knows nothing of HTTP or of
// the acceptance log (docs/design.md#fault-modes).
package faultmodes

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"strings"
	"time"

	"github.com/gmailrelay/gmailrelay/internal/fielderr"
	"github.com/gmailrelay/gmailrelay/internal/jsonpos"
)

// Mode is what a fault rule does to a send attempt.
type Mode string

const (
	// FailBeforeForward: nothing reaches Gmail; the job becomes failed
	// (retryable) and the caller gets 503.
	FailBeforeForward Mode = "fail-before-forward"
	// ForwardThenDropResponse: Gmail gets the message, the relay drops
	// Gmail's answer before recording it (the job becomes unknown) and cuts
	// the caller's connection, or answers 504 when Drop is "504".
	ForwardThenDropResponse Mode = "forward-then-drop-response"
	// ForwardAndRespond: explicit normal behaviour, useful as a more specific
	// rule that exempts a channel or a key from a broader fault.
	ForwardAndRespond Mode = "forward-and-respond"
	// CrashAfterForward: the process exits right after Gmail accepted,
	// before logging. Only allowed when the Set was built with AllowCrash.
	CrashAfterForward Mode = "crash-after-forward"
)

// Modes returns every mode, in documentation order. The slice is new on
// every call.
func Modes() []Mode {
	return []Mode{FailBeforeForward, ForwardThenDropResponse, ForwardAndRespond, CrashAfterForward}
}

// Valid reports whether m is one of the four known modes.
func (m Mode) Valid() bool {
	switch m {
	case FailBeforeForward, ForwardThenDropResponse, ForwardAndRespond, CrashAfterForward:
		return true
	}
	return false
}

// Drop values for ForwardThenDropResponse.
const (
	// DropCut closes the caller's connection with no HTTP answer.
	DropCut = ""
	// Drop504 answers 504 instead, for clients that cannot handle a cut.
	Drop504 = "504"
)

// FieldError is a validation error that names the offending field of a Spec
// (its JSON name), so the HTTP layer can answer invalid_argument with a
// field. Field is empty when the error concerns the whole body (malformed
// JSON, trailing data). It is the project's one field error, fielderr.Error.
type FieldError = fielderr.Error

func fieldErr(field, format string, args ...any) *FieldError {
	return fielderr.New(field, format, args...)
}

// Spec is what an operator asks for: the JSON body of POST /admin/faults.
// A rule with Key matches an attempt whose job key or Message-ID (with or
// without angle brackets) equals Key; a rule with Channel matches attempts on
// that channel; a rule with both must match both; a rule with neither is
// global.
type Spec struct {
	Mode    Mode   `json:"mode"`
	Channel string `json:"channel,omitempty"`
	Key     string `json:"key,omitempty"`
	// Count applies the rule to the next Count attempts it fires on; nil is
	// unlimited. Must be >= 1 when set.
	Count *int `json:"count,omitempty"`
	// Probability is the chance the rule fires on a matching attempt,
	// 0 < p <= 1; nil means 1.
	Probability *float64 `json:"probability,omitempty"`
	// TTL is a Go duration > 0; the rule expires TTL after it was added.
	// Empty means it never expires.
	TTL string `json:"ttl,omitempty"`
	// Drop is only for ForwardThenDropResponse: DropCut ("") or Drop504.
	Drop string `json:"drop,omitempty"`
}

// knownField reports whether name is one of Spec's JSON names, matched
// exactly (the standard decoder alone would match them case-insensitively).
func knownField(name string) bool {
	switch name {
	case "mode", "channel", "key", "count", "probability", "ttl", "drop":
		return true
	}
	return false
}

// fieldType describes the JSON type a Spec field wants, for error messages.
func fieldType(name string) string {
	switch name {
	case "count":
		return "an integer"
	case "probability":
		return "a number"
	}
	return "a string"
}

// ParseSpec decodes one JSON object strictly — unknown or differently-cased
// fields, trailing data and wrong types are rejected — and validates it with
// Validate. Every error it returns is a *FieldError. It does not know whether
// crash faults are allowed: Set.Add checks that.
func ParseSpec(data []byte) (Spec, error) {
	var spec Spec
	if len(bytes.TrimSpace(data)) == 0 {
		return spec, fieldErr("", "empty body: want a JSON object")
	}
	// First pass: exact field names, object shape, nothing after the object.
	var raw map[string]json.RawMessage
	if err := decodeOne(data, &raw); err != nil {
		return spec, err
	}
	if raw == nil {
		return spec, fieldErr("", "body must be a JSON object, not null")
	}
	for name := range raw {
		if !knownField(name) {
			return spec, fieldErr(name, "unknown field")
		}
	}
	if err := decodeOne(data, &spec); err != nil {
		return spec, err
	}
	if err := spec.Validate(); err != nil {
		return spec, err
	}
	return spec, nil
}

// decodeOne decodes exactly one JSON value from data into v, mapping the
// decoder's errors to *FieldError.
func decodeOne(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var typeErr *json.UnmarshalTypeError
		var syntaxErr *json.SyntaxError
		switch {
		case errors.As(err, &typeErr) && typeErr.Field != "":
			return fieldErr(typeErr.Field, "must be %s, not %s", fieldType(typeErr.Field), typeErr.Value)
		case errors.As(err, &typeErr):
			return fieldErr("", "body must be a JSON object, not %s", typeErr.Value)
		case errors.As(err, &syntaxErr):
			where, _ := jsonpos.Of(data, err)
			return fieldErr("", "malformed JSON at %s: %v", where, err)
		case errors.Is(err, io.ErrUnexpectedEOF):
			where, _ := jsonpos.Of(data, err)
			return fieldErr("", "malformed JSON: unexpected end of body at %s", where)
		}
		if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			return fieldErr(strings.Trim(name, `"`), "unknown field")
		}
		return fieldErr("", "malformed JSON: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fieldErr("", "unexpected data after the JSON object")
	}
	return nil
}

// Validate checks every field and returns the first problem as a
// *FieldError naming the field, or nil. It accepts CrashAfterForward; whether
// that mode is allowed is the Set's decision.
func (s Spec) Validate() error {
	if s.Mode == "" {
		return fieldErr("mode", "required; one of %s", modeList())
	}
	if !s.Mode.Valid() {
		return fieldErr("mode", "unknown mode %q; want one of %s", s.Mode, modeList())
	}
	if s.Count != nil && *s.Count < 1 {
		return fieldErr("count", "must be at least 1 (omit it for no limit), got %d", *s.Count)
	}
	if s.Probability != nil {
		p := *s.Probability
		if math.IsNaN(p) || p <= 0 || p > 1 {
			return fieldErr("probability", "must be greater than 0 and at most 1, got %v", p)
		}
	}
	if s.TTL != "" {
		if _, err := parseTTL(s.TTL); err != nil {
			return err
		}
	}
	switch {
	case s.Drop != DropCut && s.Mode != ForwardThenDropResponse:
		return fieldErr("drop", "only valid with mode %s", ForwardThenDropResponse)
	case s.Drop != DropCut && s.Drop != Drop504:
		return fieldErr("drop", "unknown value %q; want %q or omit it to cut the connection", s.Drop, Drop504)
	}
	return nil
}

func parseTTL(ttl string) (time.Duration, error) {
	d, err := time.ParseDuration(ttl)
	if err != nil {
		return 0, fieldErr("ttl", "not a Go duration such as 30s or 5m: %q", ttl)
	}
	if d <= 0 {
		return 0, fieldErr("ttl", "must be positive, got %s", ttl)
	}
	return d, nil
}

func modeList() string {
	names := make([]string, 0, 4)
	for _, m := range Modes() {
		names = append(names, string(m))
	}
	return strings.Join(names, ", ")
}

// ParseMode parses the value of the X-Relay-Fault request header: one mode
// name, surrounding spaces and letter case ignored. Errors are *FieldError
// with Field "mode". It does not check whether crash faults are allowed; use
// Set.Force to turn the mode into a Decision.
func ParseMode(header string) (Mode, error) {
	m := Mode(strings.ToLower(strings.TrimSpace(header)))
	if !m.Valid() {
		return "", fieldErr("mode", "unknown mode %q; want one of %s", header, modeList())
	}
	return m, nil
}
