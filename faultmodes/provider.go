package faultmodes

import (
	"context"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/relay"
)

// Provider wraps a mailbox's Gmail client (a relay.Provider) with the
// fault rules of a Set: it is the relay.FaultInjector the send path asks
// once per attempt, at admission, and its Send acts on the fault the
// attempt carries (relay.FaultOf):
//
//   - FailBeforeForward: the relay never calls Send (relay.Fault.NotForwarded);
//   - ForwardThenDropResponse: the message is forwarded and Gmail's answer
//     comes back as a *relay.FaultError (reason fault_injected_drop);
//   - CrashAfterForward: the message is forwarded and the process ends
//     (the crash function), before anything is logged; without a crash
//     function it is ForwardThenDropResponse;
//   - ForwardAndRespond and no fault: Send is the wrapped client's.
//
// List, GetHeader and SendAs are the wrapped client's, and so is its
// relay.GmailClock when it has one (Wrap). See docs/design.md#fault-modes.
type Provider struct {
	relay.Provider
	set   *Set
	crash func()
}

var _ relay.FaultInjector = (*Provider)(nil)

// Wrap returns p with the fault rules of set: a *Provider, or one that is
// also a relay.GmailClock when p is one (the relay and the sweeper ask a
// mailbox's client for it). A nil set decides no fault of its own: only a
// fault forced on the request's context (WithForced) applies. crash is
// CrashAfterForward's end of the process; it must not return (nil: the
// fault drops the answer instead).
func Wrap(p relay.Provider, set *Set, crash func()) relay.Provider {
	fp := &Provider{Provider: p, set: set, crash: crash}
	if gc, ok := p.(relay.GmailClock); ok {
		return &clockProvider{Provider: fp, clock: gc}
	}
	return fp
}

// clockProvider is a Provider whose wrapped client knows Gmail's clock.
type clockProvider struct {
	*Provider
	clock relay.GmailClock
}

// ClockOffset implements relay.GmailClock with the wrapped client's.
func (p *clockProvider) ClockOffset() (lo, hi time.Duration, ok bool) { return p.clock.ClockOffset() }

// DecideFault implements relay.FaultInjector: the decision forced on ctx
// (WithForced) if any, else the Set's (Set.Decide, which counts it).
func (p *Provider) DecideFault(ctx context.Context, q relay.FaultQuery) relay.Fault {
	d, forced := Forced(ctx)
	if !forced && p.set != nil {
		d = p.set.Decide(q.Channel, q.Key, q.MessageID)
	}
	if d.Mode == "" {
		return relay.Fault{}
	}
	return relay.Fault{RuleID: d.RuleID, Mode: string(d.Mode), NotForwarded: d.Mode == FailBeforeForward, Drop: d.Drop}
}

// RefundFault implements relay.FaultInjector: a rule's decision is given
// back to the Set (Set.Refund); a forced one consumed no rule.
func (p *Provider) RefundFault(ctx context.Context, f relay.Fault) {
	if _, forced := Forced(ctx); forced || p.set == nil {
		return
	}
	p.set.Refund(Decision{RuleID: f.RuleID, Mode: Mode(f.Mode), Drop: f.Drop})
}

// Send forwards the message through the wrapped client and then acts on
// the attempt's fault (relay.FaultOf(ctx)): see Provider.
func (p *Provider) Send(ctx context.Context, mailbox string, raw []byte, threadID string) (relay.SentMessage, error) {
	f := relay.FaultOf(ctx)
	sent, err := p.Provider.Send(ctx, mailbox, raw, threadID)
	switch Mode(f.Mode) {
	case CrashAfterForward:
		if p.crash != nil {
			p.crash()
		}
	case ForwardThenDropResponse:
	default:
		return sent, err
	}
	return relay.SentMessage{}, &relay.FaultError{Reason: gmailrelay.ReasonFaultInjectedDrop, RuleID: f.RuleID, Err: err}
}

// forcedKey is the context key of a forced decision (WithForced).
type forcedKey struct{}

// WithForced returns ctx carrying d: every send attempt on the returned
// context takes d instead of the rules' decision, and consumes no rule.
// The API's X-Relay-Fault middleware sets it (Set.Force makes d), once the
// request is authorised.
func WithForced(ctx context.Context, d Decision) context.Context {
	return context.WithValue(ctx, forcedKey{}, d)
}

// Forced returns the decision WithForced set on ctx, and whether one was
// (a zero Decision forces nothing).
func Forced(ctx context.Context) (Decision, bool) {
	d, _ := ctx.Value(forcedKey{}).(Decision)
	return d, d.Mode != ""
}
