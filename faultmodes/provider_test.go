package faultmodes_test

import (
	"context"
	"errors"
	"testing"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/faultmodes"
	"github.com/gmailrelay/gmailrelay/internal/testenv"
	"github.com/gmailrelay/gmailrelay/relay"
)

// prepared is a message for the emulator's account, as the relay builds it.
func prepared(t *testing.T, te *testenv.Env, key string) relay.Prepared {
	t.Helper()
	p, err := relay.Prepare(relay.SendRequest{Key: key, To: relay.AddressList{"customer@example.org"}, Subject: "Receipt",
		Text: "Thanks."}, "", "relay.test", te.Clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// The wrapper's Send acts on the attempt's fault: a dropped answer and a
// crash forward the message first (the emulator's deliveries, emulator
// results), then the caller gets a *relay.FaultError carrying the rule and
// Gmail's own answer; no fault and forward-and-respond are the client's
// answer itself.
func TestEmulatorWrapActsOnTheAttemptsFault(t *testing.T) {
	tests := []struct {
		name    string
		mode    faultmodes.Mode
		crash   bool
		dropped bool
	}{
		{"no fault", "", false, false},
		{"forward-and-respond", faultmodes.ForwardAndRespond, false, false},
		{"forward-then-drop-response", faultmodes.ForwardThenDropResponse, false, true},
		{"crash-after-forward", faultmodes.CrashAfterForward, true, true},
		{"crash-after-forward without a crash function", faultmodes.CrashAfterForward, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			te := testenv.New(t, testenv.Options{})
			p := prepared(t, te, "wrap:"+tt.name)
			crashed := -1 // the deliveries when the crash function ran
			var crash func()
			if tt.crash {
				crash = func() { crashed = te.Emulator.Deliveries(p.MessageID) }
			}
			w := faultmodes.Wrap(te.Provider, te.Faults, crash)
			ctx := relay.WithFault(context.Background(), relay.Fault{RuleID: "f7", Mode: string(tt.mode)})
			sent, err := w.Send(ctx, "me", p.Raw, "")
			if got := te.Emulator.Deliveries(p.MessageID); got != 1 {
				t.Errorf("emulator deliveries %d, want 1: every mode here forwards", got)
			}
			if tt.crash && crashed != 1 {
				t.Errorf("crash ran with %d deliveries, want after the one forward", crashed)
			}
			var fe *relay.FaultError
			if got := errors.As(err, &fe); got != tt.dropped {
				t.Fatalf("Send: %v; dropped %v, want %v", err, got, tt.dropped)
			}
			if !tt.dropped {
				if sent.ID == "" {
					t.Errorf("Send answered %+v, want Gmail's id", sent)
				}
				return
			}
			if fe.Reason != gmailrelay.ReasonFaultInjectedDrop || fe.RuleID != "f7" || fe.Err != nil {
				t.Errorf("FaultError %+v, want reason %s, rule f7, Gmail's answer nil (accepted)", fe, gmailrelay.ReasonFaultInjectedDrop)
			}
		})
	}
}

// DecideFault takes the decision forced on the context when there is one,
// consuming no rule and giving none back; otherwise the Set's rule, whose
// count RefundFault restores.
func TestWrapDecidesForcedBeforeRules(t *testing.T) {
	set := faultmodes.New(faultmodes.Options{Seed: 1})
	one := 1
	rule := mustAdd(t, set, faultmodes.Spec{Mode: faultmodes.FailBeforeForward, Count: &one})
	w := faultmodes.Wrap(nil, set, nil).(relay.FaultInjector)
	q := relay.FaultQuery{Channel: "default", Key: "k", MessageID: msgID}
	remaining := func() int {
		for _, r := range set.List() {
			if r.ID == rule.ID {
				return *r.Remaining
			}
		}
		t.Fatalf("rule %s gone", rule.ID)
		return 0
	}

	// A forced decision consumes and gives back nothing, even one that
	// names the rule.
	forced := faultmodes.WithForced(context.Background(), faultmodes.Decision{RuleID: rule.ID, Mode: faultmodes.ForwardThenDropResponse})
	got := w.DecideFault(forced, q)
	if want := (relay.Fault{RuleID: rule.ID, Mode: string(faultmodes.ForwardThenDropResponse)}); got != want {
		t.Errorf("forced: %+v, want %+v", got, want)
	}
	w.RefundFault(forced, got)
	if n := remaining(); n != 1 {
		t.Errorf("after a forced decision and its refund the rule has %d left, want 1 (untouched)", n)
	}
	if got := set.Injected()[faultmodes.FailBeforeForward]; got != 0 {
		t.Errorf("after a forced decision and its refund the rule's mode counts %d injected, want 0", got)
	}

	got = w.DecideFault(context.Background(), q)
	if want := (relay.Fault{RuleID: rule.ID, Mode: string(faultmodes.FailBeforeForward), NotForwarded: true}); got != want {
		t.Errorf("by rule: %+v, want %+v", got, want)
	}
	if n := remaining(); n != 0 {
		t.Errorf("after the rule fired it has %d left, want 0", n)
	}
	w.RefundFault(context.Background(), got)
	if n := remaining(); n != 1 {
		t.Errorf("after the refund the rule has %d left, want 1", n)
	}
	if got := faultmodes.Wrap(nil, nil, nil).(relay.FaultInjector).DecideFault(context.Background(), q); got != (relay.Fault{}) {
		t.Errorf("no Set, nothing forced: %+v, want no fault", got)
	}
}

// The wrapper is a relay.GmailClock exactly when the client it wraps is
// one: the sweeper and the clock fence treat "no clock" and "clock not
// known yet" differently.
func TestWrapKeepsTheGmailClock(t *testing.T) {
	te := testenv.New(t, testenv.Options{})
	if _, ok := te.Provider.(relay.GmailClock); !ok {
		t.Fatal("the Gmail client is no GmailClock; the test needs one")
	}
	if _, ok := faultmodes.Wrap(te.Provider, nil, nil).(relay.GmailClock); !ok {
		t.Error("Wrap(Gmail client) is no GmailClock")
	}
	if _, ok := faultmodes.Wrap(plain{te.Provider}, nil, nil).(relay.GmailClock); ok {
		t.Error("Wrap(a client without a clock) is a GmailClock")
	}
}

// plain hides its Provider's other methods.
type plain struct{ relay.Provider }
