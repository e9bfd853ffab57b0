package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/rs/zerolog"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/internal/fielderr"
	"github.com/gmailrelay/gmailrelay/relay"
)

// statusOf maps each relay error code to its HTTP status (docs/api.md,
// "Conventions").
var statusOf = map[relay.Code]int{
	relay.CodeInvalid:          http.StatusBadRequest,
	relay.CodeUnauthorized:     http.StatusUnauthorized,
	relay.CodeForbidden:        http.StatusForbidden,
	relay.CodeNotFound:         http.StatusNotFound,
	relay.CodeInFlight:         http.StatusConflict,
	relay.CodeConflict:         http.StatusConflict,
	relay.CodeTooLarge:         http.StatusRequestEntityTooLarge,
	codeUnsupportedType:        http.StatusUnsupportedMediaType,
	codeBodyTimeout:            http.StatusRequestTimeout,
	codeMethodNotAllowed:       http.StatusMethodNotAllowed,
	relay.CodeMismatch:         http.StatusUnprocessableEntity,
	relay.CodeRateLimited:      http.StatusTooManyRequests,
	relay.CodeProviderRejected: http.StatusBadGateway,
	relay.CodeUnavailable:      http.StatusServiceUnavailable,
	relay.CodeFaultDropped:     http.StatusGatewayTimeout,
	relay.CodeInternal:         http.StatusInternalServerError,

	relay.CodeReservedMessageID: http.StatusConflict,
	relay.CodeFromNotVerified:   http.StatusBadRequest,
	relay.CodeMessageIDConflict: http.StatusConflict,
}

type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Code      string `json:"code"`
	Message   string `json:"message"`
	Field     string `json:"field,omitempty"`
	MessageID string `json:"message_id,omitempty"`
	State     string `json:"state,omitempty"`
}

// asRelayError turns errors of the packages below into *relay.Error.
func asRelayError(err error) *relay.Error {
	var re *relay.Error
	if errors.As(err, &re) {
		return re
	}
	var fe *fielderr.Error // faultmodes' and policy's validation errors
	if errors.As(err, &fe) {
		return relay.Invalid(fe.Field, "%s", fe.Message)
	}
	if errors.Is(err, gmailrelay.ErrWritesRefused) {
		return relay.LogRefused(err)
	}
	if errors.Is(err, gmailrelay.ErrNotFound) {
		return relay.Errorf(relay.CodeNotFound, "no job with that Message-ID")
	}
	return &relay.Error{Code: relay.CodeInternal, Message: "internal error", Err: err}
}

// errorShape is how an HTTP surface spells an error answer.
type errorShape int

const (
	relayShape errorShape = iota // docs/api.md's {"error":{"code","message","field",…}}
	gmailShape                   // Gmail's error JSON (the /gmail/ surface)
)

// answerError is the one writer of error answers, for both HTTP surfaces:
// it maps err to a *relay.Error and its status, logs internal errors in
// full (showing them as "internal error"), sets Retry-After in the relay's
// shape only (the Gmail shape answers as Gmail, whose own quota answers
// carry none), and writes the body in shape. messageID and state, when
// set, are added to the relay's shape (a 409 names the job it is about).
func answerError(w http.ResponseWriter, r *http.Request, err error, shape errorShape, messageID string, state gmailrelay.State) {
	re := asRelayError(err)
	if ce := (*gmailrelay.CaseTwinError)(nil); errors.As(err, &ce) {
		// message_id_conflict names the job that has the Message-ID.
		messageID = ce.Existing
	}
	status, ok := statusOf[re.Code]
	if !ok {
		status = http.StatusInternalServerError
	}
	msg := re.Message
	if re.Code == relay.CodeInternal {
		zerolog.Ctx(r.Context()).Error().Err(err).Msg("internal error")
		msg = "internal error"
	}
	if shape == gmailShape {
		writeJSON(w, status, gmailErrorBody(re, status, msg))
		return
	}
	if re.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(re.RetryAfter))
	}
	writeJSON(w, status, errorBody{Error: errorDetail{Code: string(re.Code), Message: msg, Field: re.Field,
		MessageID: messageID, State: string(state)}})
}

// writeError answers err in the relay's error JSON.
func writeError(w http.ResponseWriter, r *http.Request, err error) {
	answerError(w, r, err, relayShape, "", "")
}

// writeErrorFor answers err in the relay's error JSON, naming the job.
func writeErrorFor(w http.ResponseWriter, r *http.Request, err error, messageID string, state gmailrelay.State) {
	answerError(w, r, err, relayShape, messageID, state)
}

// writeJSON answers v as JSON with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // Message-IDs carry <>; keep them readable
	_ = enc.Encode(v)
}
