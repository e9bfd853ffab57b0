package gmailrelay

// Reason is the machine-readable why of a line (Line.Reason) and of a job's
// last failure (Job.LastReason). Every reason the relay writes or reads is
// one of the constants below; the log stores them as plain strings.
type Reason string

// Reasons of not_sent lines (and Job.LastReason of failed jobs).
const (
	ReasonNotReached       Reason = "not_reached"       // the request never reached Gmail
	ReasonTokenRefresh     Reason = "token_refresh"     // the OAuth token could not be refreshed (alarm)
	ReasonRateLimited      Reason = "rate_limited"      // Gmail said 429, or 403 with a rate reason
	ReasonAuth             Reason = "auth"              // Gmail refused the credentials (alarm)
	ReasonProviderRejected Reason = "provider_rejected" // Gmail refused the message (other 4xx)
	ReasonFaultInjected    Reason = "fault_injected"    // the fail-before-forward fault
)

// Reasons of ambiguous lines (and Job.LastReason of unknown jobs).
const (
	ReasonProvider5xx           Reason = "provider_5xx"            // Gmail answered 5xx
	ReasonTimeout               Reason = "timeout"                 // no answer in time
	ReasonTransport             Reason = "transport"               // the connection broke after the request left
	ReasonFaultInjectedDrop     Reason = "fault_injected_drop"     // forward-then-drop-response or crash-after-forward
	ReasonRecoveredAfterRestart Reason = "recovered_after_restart" // a restart found the attempt in flight
	ReasonLeaseExpired          Reason = "lease_expired"           // a shared log's attempt outlived its lease (its replica died)
	ReasonOutcomeNotLogged      Reason = "outcome_not_logged"      // Gmail was called, but the log refused to record its answer
)

// Reasons of received lines of attempts the caller did not make.
const (
	ReasonSweeperResend Reason = "sweeper_resend" // a resend after the last search miss
	ReasonSweeperRetry  Reason = "sweeper_retry"  // a retry of a retryable failure
	ReasonResolvedRetry Reason = "resolved_retry" // a human's resolve retry
	ReasonOutbox        Reason = "outbox"         // the delivery loop's attempt of a queued job
)

// Reasons of the outbox's state lines and of a cancel's resolved line.
const (
	ReasonBudgetSpent Reason = "budget_spent" // queued: the quota, the daily limit or a Gmail pause holds it
	ReasonSendAt      Reason = "send_at"      // queued: the caller asked for later
	ReasonCancelled   Reason = "cancelled"    // resolved: a queued job cancelled (DELETE /v1/jobs/{id})
)

// Reasons of the sweeper's effect, review and search lines.
const (
	ReasonFound              Reason = "found_in_mailbox"        // effect line: exactly one SENT hit
	ReasonReviewChannel      Reason = "review_channel"          // found once, but the channel never auto-resolves
	ReasonDuplicate          Reason = "duplicate"               // two or more SENT hits
	ReasonMissingAfterChecks Reason = "missing_after_checks"    // review channel: every check missed
	ReasonMaxAttempts        Reason = "max_attempts"            // no attempt left for a resend or retry
	ReasonHandleUntrusted    Reason = "handle_untrusted"        // Gmail rewrote Message-IDs in this mailbox
	ReasonVerified           Reason = "verified"                // verify pass: exactly one SENT hit
	ReasonVerifyMiss         Reason = "verify_miss"             // verify pass: no hit yet, checked again after grace
	ReasonVerifyGaveUp       Reason = "verify_gave_up"          // verify pass: still no hit; Gmail's answer stands
	ReasonUnsearchable       Reason = "unsearchable_message_id" // review: the Message-ID could change the query; never searched
	ReasonQueryRefused       Reason = "query_refused"           // review: Gmail refused (400) the search for this Message-ID alone
	ReasonDuplicateDelivery  Reason = "duplicate_delivery"      // review: two own effect lines for one Message-ID
	ReasonIndexUnverifiable  Reason = "index_unverifiable"      // review: no witness for max_unwitnessed (alarm)
	ReasonSendingLimitBounce Reason = "sending_limit_bounce"    // review: Gmail said the mailbox hit its sending limit after answering 200
)

// Reasons of resolved lines: the human's action.
const (
	ReasonMarkSent Reason = "mark-sent"
	ReasonRetry    Reason = "retry"
	ReasonAbandon  Reason = "abandon"
)

// Reasons of handle lines.
const (
	ReasonHandleKept      Reason = "kept"      // Gmail stored our Message-ID
	ReasonHandleRewritten Reason = "rewritten" // Gmail replaced it
	ReasonHandleDeleted   Reason = "deleted"   // the message is gone (404): unverifiable, not a rewrite
)
