package gmailfake

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// apiError is one Gmail error answer. It is written as Google's error JSON,
// {"error":{"code","message","errors":[{"message","domain","reason"}],"status"}},
// which google.golang.org/api decodes into a *googleapi.Error whose Code is
// the HTTP status and whose Errors[0].Reason is reason.
type apiError struct {
	code       int
	reason     string
	message    string
	domain     string
	location   string // the offending parameter or field, if any
	retryAfter int    // seconds; 0 = no Retry-After header
}

func (e *apiError) Error() string { return strconv.Itoa(e.code) + " " + e.reason + ": " + e.message }

type errorItem struct {
	Message      string `json:"message"`
	Domain       string `json:"domain"`
	Reason       string `json:"reason"`
	Location     string `json:"location,omitempty"`
	LocationType string `json:"locationType,omitempty"`
}

type errorBody struct {
	Error struct {
		Code    int         `json:"code"`
		Message string      `json:"message"`
		Errors  []errorItem `json:"errors"`
		Status  string      `json:"status"`
	} `json:"error"`
}

// grpcStatus is the canonical status name Google's JSON errors carry.
func grpcStatus(code int) string {
	switch code {
	case http.StatusBadRequest:
		return "INVALID_ARGUMENT"
	case http.StatusUnauthorized:
		return "UNAUTHENTICATED"
	case http.StatusForbidden:
		return "PERMISSION_DENIED"
	case http.StatusNotFound:
		return "NOT_FOUND"
	case http.StatusConflict:
		return "ABORTED"
	case http.StatusRequestEntityTooLarge:
		return "OUT_OF_RANGE"
	case http.StatusTooManyRequests:
		return "RESOURCE_EXHAUSTED"
	case http.StatusNotImplemented:
		return "UNIMPLEMENTED"
	case http.StatusServiceUnavailable, http.StatusBadGateway:
		return "UNAVAILABLE"
	case http.StatusGatewayTimeout:
		return "DEADLINE_EXCEEDED"
	}
	if code >= 500 {
		return "INTERNAL"
	}
	return "FAILED_PRECONDITION"
}

// errorForStatus is the error Gmail typically answers with a given status;
// injected faults use it.
func errorForStatus(code int) *apiError {
	e := &apiError{code: code, domain: "global"}
	switch code {
	case http.StatusBadRequest:
		e.reason, e.message = "badRequest", "Bad Request"
	case http.StatusUnauthorized:
		e.reason, e.message = "authError", "Invalid Credentials"
	case http.StatusForbidden:
		e.reason, e.message, e.domain = "userRateLimitExceeded", "User-rate limit exceeded.", "usageLimits"
	case http.StatusNotFound:
		e.reason, e.message = "notFound", "Requested entity was not found."
	case http.StatusRequestEntityTooLarge:
		e.reason, e.message = "uploadTooLarge", "Request Entity Too Large"
	case http.StatusTooManyRequests:
		e.reason, e.message, e.domain = "rateLimitExceeded", "Rate Limit Exceeded", "usageLimits"
	case http.StatusServiceUnavailable:
		e.reason, e.message = "backendError", "The service is currently unavailable."
	default:
		if code >= 500 {
			e.reason, e.message = "backendError", "Backend Error"
		} else {
			e.reason, e.message = "failedPrecondition", http.StatusText(code)
		}
	}
	return e
}

func badRequest(msg string) *apiError {
	return &apiError{code: http.StatusBadRequest, reason: "badRequest", message: msg, domain: "global"}
}

func invalidArgument(msg string) *apiError {
	return &apiError{code: http.StatusBadRequest, reason: "invalidArgument", message: msg, domain: "global"}
}

func notFound() *apiError {
	return &apiError{code: http.StatusNotFound, reason: "notFound", message: "Requested entity was not found.", domain: "global"}
}

func writeAPIError(w http.ResponseWriter, e *apiError) {
	var b errorBody
	b.Error.Code = e.code
	b.Error.Message = e.message
	b.Error.Status = grpcStatus(e.code)
	item := errorItem{Message: e.message, Domain: e.domain, Reason: e.reason}
	if e.location != "" {
		item.Location, item.LocationType = e.location, "parameter"
	}
	if e.code == http.StatusUnauthorized {
		item.Location, item.LocationType = "Authorization", "header"
		w.Header().Set("WWW-Authenticate", `Bearer realm="https://accounts.google.com/"`)
	}
	b.Error.Errors = []errorItem{item}
	if e.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.retryAfter))
	}
	writeJSON(w, e.code, b)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		// Every value written here is built by this package from plain types.
		http.Error(w, "encode response: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
