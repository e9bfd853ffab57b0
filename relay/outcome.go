package relay

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/gmailrelay/gmailrelay"
)

// Verdict is what an attempt's outcome means for the job.
type Verdict int

// Verdicts.
const (
	// Sent: Gmail accepted the message.
	Sent Verdict = iota
	// Failed: definitely not sent (Outcome.Retryable says if a new attempt may follow).
	Failed
	// Unknown: Gmail may or may not have sent it.
	Unknown
)

// String returns "sent", "failed" or "unknown".
func (v Verdict) String() string {
	return [...]string{"sent", "failed", "unknown"}[v]
}

// Outcome is the classification of one Gmail call.
type Outcome struct {
	Verdict   Verdict
	Retryable bool              // Failed only
	Alarm     bool              // authentication or authorisation trouble: an operator must look
	Status    int               // Gmail's HTTP status, 0 when there was none
	Reason    gmailrelay.Reason // short machine-readable reason, written on the log line
	RetryIn   time.Duration     // Gmail's retry time (ProviderError.RetryAfter), 0 when it gave none
	Err       error
}

// rateReasons are the 403 reasons Gmail uses for quota, which mean "not sent,
// try later" rather than "forbidden".
var rateReasons = map[string]bool{
	"rateLimitExceeded": true, "userRateLimitExceeded": true, "dailyLimitExceeded": true,
	"quotaExceeded": true, "concurrentLimitExceeded": true,
}

// Classify sorts a Gmail call's error into sent / failed / unknown. The
// table, row by row (tests in outcome_test.go, one per row):
//
//	nil                                   → sent
//	*NotReachedError (refused, DNS, TLS, deadline before write) → failed, retryable ("not_reached")
//	*NotReachedError wrapping ErrTokenRefresh → failed, retryable, alarm ("token_refresh")
//	*ProviderError (Gmail answered with an error status):
//	429; 403 with a rate reason           → failed, retryable ("rate_limited")
//	401; 403 otherwise                    → failed, not retryable, alarm ("auth")
//	other 4xx (400, 404, 413, …)          → failed, not retryable ("provider_rejected")
//	5xx                                   → unknown ("provider_5xx")
//	anything else after the request left  → unknown ("timeout" or "transport")
func Classify(err error) Outcome {
	if err == nil {
		return Outcome{Verdict: Sent}
	}
	var nr *NotReachedError
	if errors.As(err, &nr) {
		if errors.Is(err, ErrTokenRefresh) {
			return Outcome{Verdict: Failed, Retryable: true, Alarm: true, Reason: gmailrelay.ReasonTokenRefresh, Err: err}
		}
		return Outcome{Verdict: Failed, Retryable: true, Reason: gmailrelay.ReasonNotReached, Err: err}
	}
	var g *ProviderError
	if errors.As(err, &g) {
		o := Outcome{Status: g.Status, Err: err, RetryIn: g.RetryAfter}
		switch {
		case g.Status == http.StatusTooManyRequests || (g.Status == http.StatusForbidden && rateReasons[g.Reason]):
			o.Verdict, o.Retryable, o.Reason = Failed, true, gmailrelay.ReasonRateLimited
		case g.Status == http.StatusUnauthorized || g.Status == http.StatusForbidden:
			o.Verdict, o.Alarm, o.Reason = Failed, true, gmailrelay.ReasonAuth
		case g.Status >= 400 && g.Status < 500:
			o.Verdict, o.Reason = Failed, gmailrelay.ReasonProviderRejected
		default:
			o.Verdict, o.Reason = Unknown, gmailrelay.ReasonProvider5xx
		}
		return o
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return Outcome{Verdict: Unknown, Reason: gmailrelay.ReasonTimeout, Err: err}
	}
	return Outcome{Verdict: Unknown, Reason: gmailrelay.ReasonTransport, Err: err}
}
