//go:build !gmailrelay_broken

package relay

// brokenResendUnknown is false in every real build. The end-to-end suite
// builds the binary with -tags gmailrelay_broken to prove that its checker
// catches a relay that resends ambiguous jobs when a caller retries.
const brokenResendUnknown = false
