package sweeper_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/faultmodes"
	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/internal/testenv"
	"github.com/gmailrelay/gmailrelay/policy"
	"github.com/gmailrelay/gmailrelay/relay"
	"github.com/gmailrelay/gmailrelay/sweeper"
)

// BenchmarkWitnessQuota measures what the witness rule costs in Gmail
// quota (emulator results): search units (every list and get, the verify
// pass's and the companion after: query's included; sends excluded) per
// ambiguous job the sweeper resolved, with the rule (/witness) and without
// it (/nowitness, every miss counts), side by side on the same scenario:
// the Gmail-like lag p50=5s,p99=10m,max=30m in fifo order, grace 1m and 2
// checks, one send a minute for 200 minutes with 10 % of responses dropped
// and every 25th send lost, then two quiet hours; the sweeper runs every
// 30 s of the fake clock. The figure is in docs/benchmarks.md.
//
//	go test ./sweeper/ -run '^$' -bench BenchmarkWitnessQuota -benchtime 1x
func BenchmarkWitnessQuota(b *testing.B) {
	for _, c := range []struct {
		name    string
		disable bool
	}{{"witness", false}, {"nowitness", true}} {
		b.Run(c.name, func(b *testing.B) {
			var units, resolved, resentSent int
			for b.Loop() {
				r := witnessQuotaScenario(b, c.disable)
				units += r.units
				resolved += r.resolved
				resentSent += r.resentSent
			}
			b.ReportMetric(float64(units)/float64(resolved), "units/job")
			b.ReportMetric(float64(resentSent)/float64(b.N), "resent-sent/op")
		})
	}
}

// quotaRun is one run of the scenario, by the emulator's ground truth.
type quotaRun struct {
	units      int // search quota units (all but sends)
	resolved   int // ambiguous jobs that ended sent or in review
	resentSent int // jobs delivered more than once (Gmail had stored them, and they were resent)
}

func witnessQuotaScenario(tb testing.TB, disableWitness bool) quotaRun {
	tb.Helper()
	ctx := context.Background()
	pol := &policy.Policy{MsgIDDomain: "relay.test", VerifyHandle: policy.VerifyNever, Channels: map[string]policy.Channel{
		"default": {Name: "default", OnUnknown: policy.Retry, Grace: time.Minute, Checks: 2, MaxAttempts: 3},
	}}
	e := testenv.New(tb, testenv.Options{Policy: pol, Emulator: gmailfake.Options{QuotaPerMinute: 1 << 30, Seed: 13,
		IndexLagDistribution: gmailfake.LagDistribution{P50: 5 * time.Second, P99: 10 * time.Minute, Max: 30 * time.Minute},
		IndexOrder:           gmailfake.IndexFIFO}})
	clock, srv, svc, faults, log := e.Clock, e.Emulator, e.Service, e.Faults, e.Log
	cfg := e.SweeperConfig()
	cfg.Interval, cfg.DisableWitness = time.Hour, disableWitness
	sw := sweeper.New(cfg)
	sweep := func() {
		clock.Advance(30 * time.Second)
		if _, err := sw.RunOnce(ctx); err != nil {
			tb.Fatalf("RunOnce: %v", err)
		}
	}
	p := 0.1
	rule, err := faults.Add(faultmodes.Spec{Mode: faultmodes.ForwardThenDropResponse, Probability: &p})
	if err != nil {
		tb.Fatalf("fault rule: %v", err)
	}
	var ids []string
	for m := range 200 {
		if m == 160 {
			faults.Remove(rule.ID)
		}
		if m%25 == 24 {
			if _, err := srv.AddFault(gmailfake.Fault{Method: gmailfake.MethodSend, Action: gmailfake.ActionError, Status: 500}); err != nil {
				tb.Fatalf("emulator fault: %v", err)
			}
		}
		key := fmt.Sprintf("cus_%d:order.shipped:ord_%d", m, m)
		msg, err := relay.Prepare(relay.SendRequest{Key: key, Channel: "default", From: gmailfake.DefaultAccount,
			To: relay.AddressList{"customer@example.net"}, Subject: "Your order shipped", Text: "It is on its way."},
			"", "relay.test", clock.Now())
		if err != nil {
			tb.Fatalf("prepare: %v", err)
		}
		if _, err := svc.Send(ctx, msg, relay.SendOptions{}); err != nil {
			tb.Fatalf("send: %v", err)
		}
		ids = append(ids, msg.MessageID)
		sweep()
		sweep()
	}
	for range 240 {
		sweep()
	}
	st := srv.Stats()
	r := quotaRun{units: st.QuotaUnits - 100*st.Calls[gmailfake.MethodSend]}
	for _, id := range ids {
		j, err := log.Get(ctx, id)
		if err != nil {
			tb.Fatalf("get %s: %v", id, err)
		}
		lines, err := log.JobLines(ctx, id)
		if err != nil {
			tb.Fatalf("lines of %s: %v", id, err)
		}
		ambiguous := false
		for _, l := range lines {
			ambiguous = ambiguous || l.Kind == gmailrelay.KindAmbiguous
		}
		if ambiguous && (j.State == gmailrelay.StateSent || j.State == gmailrelay.StateReview) {
			r.resolved++
		}
		if srv.Deliveries(id) > 1 { // a lost send resent is delivered once
			r.resentSent++
		}
	}
	return r
}
