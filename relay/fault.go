package relay

import (
	"context"

	"github.com/gmailrelay/gmailrelay"
)

// Fault is a fault injected into one send attempt (docs/design.md#fault-modes):
// what a FaultInjector decided for it. The zero Fault (Mode "") is none.
type Fault struct {
	// RuleID names what decided the fault (a rule's id, or the request's
	// header); the attempt's fault line carries it, and so does its
	// not_sent or ambiguous line when the fault decides the outcome.
	RuleID string
	// Mode is the fault's mode, as the attempt's fault line records it.
	Mode string
	// NotForwarded: the attempt fails before Gmail is called. It takes no
	// quota and no daily budget; the job becomes failed, retryable, reason
	// fault_injected, in the admission transaction itself, and Send is
	// never called for it.
	NotForwarded bool
	// Drop, for a fault whose Send drops Gmail's answer (FaultError), is
	// how the caller is answered: "" cuts its connection, "504" answers
	// 504. The relay only carries it to the caller (Result.Fault).
	Drop string
}

// FaultQuery names the attempt a FaultInjector decides for.
type FaultQuery struct {
	// Channel is the job's channel.
	Channel string
	// Key is the job's key ("" for a raw message sent without one).
	Key string
	// MessageID is the job's Message-ID.
	MessageID string
}

// FaultInjector is implemented by a Provider that injects faults into send
// attempts: package faultmodes wraps the Gmail client with one, from
// outside the send path. The relay asks it once per attempt, at admission
// and before anything of the attempt is logged, so that the attempt's fault
// line is written in the same transaction as its forwarding (or not_sent)
// line. The attempt's Send then runs on a context that carries the Fault
// (FaultOf), and the injector's Send acts on it: it forwards and returns a
// *FaultError in place of Gmail's answer, or ends the process after
// forwarding. A Provider that does not implement FaultInjector injects
// nothing.
type FaultInjector interface {
	// DecideFault decides the fault of one attempt (the zero Fault: none).
	// A decision it takes counts against its rule (a counted rule's count).
	DecideFault(ctx context.Context, q FaultQuery) Fault
	// RefundFault gives back a decision DecideFault took on ctx for an
	// attempt that was then not made (the front door found nothing to
	// attempt, or the admission failed).
	RefundFault(ctx context.Context, f Fault)
}

// FaultError is what a FaultInjector's Send returns when it forwarded the
// message and then dropped Gmail's answer: the relay classifies Err (Gmail's
// own answer, nil when Gmail accepted) for the quota's pause and the
// metrics, as it would have, and records the attempt unknown with Reason
// and RuleID, as if the answer had been lost on the way.
type FaultError struct {
	// Reason is the ambiguous line's reason:
	// gmailrelay.ReasonFaultInjectedDrop.
	Reason gmailrelay.Reason
	// RuleID names what decided the fault (Fault.RuleID).
	RuleID string
	// Err is Gmail's answer to the forwarded message (nil: accepted).
	Err error
}

// Error implements error.
func (e *FaultError) Error() string {
	return "fault injected (rule " + e.RuleID + "): Gmail's answer was dropped (" + string(e.Reason) + ")"
}

// faultKey is the context key of the attempt's Fault (WithFault).
type faultKey struct{}

// WithFault returns ctx carrying f, the fault of the attempt whose Gmail
// call runs on it. The relay sets it on every send attempt's call.
func WithFault(ctx context.Context, f Fault) context.Context {
	return context.WithValue(ctx, faultKey{}, f)
}

// FaultOf returns the fault WithFault set on ctx (the zero Fault: none).
func FaultOf(ctx context.Context) Fault {
	f, _ := ctx.Value(faultKey{}).(Fault)
	return f
}
