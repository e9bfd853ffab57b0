// Package relay is gmailrelay's domain and send path: it turns a request
// into a job with a deterministic Message-ID (intake, msgid), admits it
// through the idempotent front door in one acceptance-log transaction,
// calls Gmail on a context the caller cannot cancel, and records the
// outcome (sent, failed or unknown) guarded on the attempt in flight. It
// also holds the shared Gmail quota budget (Quota), the classification of
// Gmail's answers (Classify), the read-back of stored Message-IDs
// (RecordHandle) and human resolutions (Resolve). State changes follow
// gmailrelay.Transitions; the sweeper closes what the send path leaves
// unknown. Gmail is reached through the Provider interface; package
// gmailapi implements it and hands back Gmail's errors as *ProviderError,
// so relay never depends on Google's client. HTTP shapes are not relay's:
// package api decodes requests into SendRequest and encodes the answers.
package relay
