//go:build gmailrelay_broken

package relay

// brokenResendUnknown: a deliberately broken relay, built only by the
// end-to-end suite (-tags gmailrelay_broken) to prove its checker can fail.
// A caller's retry of an unknown job makes a new attempt: the very duplicate
// the relay exists to prevent.
const brokenResendUnknown = true
