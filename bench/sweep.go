package bench

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/acceptlog"
	"github.com/gmailrelay/gmailrelay/gmailapi"
	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/policy"
	"github.com/gmailrelay/gmailrelay/relay"
	"github.com/gmailrelay/gmailrelay/sweeper"
)

// SweepConfig configures Sweep.
type SweepConfig struct {
	// Dir holds the acceptance log.
	Dir string
	// Jobs is the number of unknown jobs; the even-numbered half was
	// really sent (the emulator holds their message).
	Jobs int
	// QuotaPerMinute is both the emulator's per-user budget and the
	// relay's own (Gmail's figure is 15000).
	QuotaPerMinute int
	// BatchSize is the sweeper's ids per search (0: its default).
	BatchSize int
}

// maxPasses bounds a Sweep that would otherwise never finish.
const maxPasses = 1_000_000

// Sweep reconciles cfg.Jobs unknown jobs with the sweeper against the
// emulator, on one injected clock shared by the relay, the sweeper, the
// emulator and the log. The clock is advanced by Result.Wait whenever a pass
// stops for quota, and to the next job's check time when nothing is due;
// the run ends when no job is due any more (searches, resends and the
// verify passes of the resends all done). The channel is the built-in
// default: retry, 3m grace, 2 checks, 3 attempts.
//
// Figures: jobs, resolved (jobs now sent), pending (never-sent jobs still
// unknown awaiting a check), wrong (a really-sent job not sent with exactly
// one emulator message and one effect, or a never-sent job resent other
// than exactly once), units (quota units the emulator charged until the
// jobs settled: none unknown any more), units/job (per resolved job),
// rate_limited (429 answers), storms (passes with two or more 429s, i.e.
// without backoff between them), passes, virtual_min (clock time until the
// jobs settled), tail_min and units_total (clock time and units of the
// whole run, the verify pass's later looks at sent jobs included), ideal_min ((units − one minute's burst) ÷ the
// budget rate) and ideal_pct (ideal_min ÷ virtual_min), ideal_lb_min and
// ideal_lb_pct (the same from a lower bound of the units the strategy
// needs: one list call per batch for every search the policy requires,
// plus one send per never-sent job, no reads), real_s (real time of the
// sweep).
func Sweep(ctx context.Context, cfg SweepConfig) (Metrics, error) {
	if cfg.Jobs < 2 || cfg.QuotaPerMinute < 1 {
		return nil, fmt.Errorf("sweep: need at least 2 jobs and a positive quota")
	}
	batch := cfg.BatchSize
	if batch <= 0 {
		batch = sweeper.DefaultBatchSize
	}
	clock := NewClock()
	emu := gmailfake.New(gmailfake.Options{Now: clock.Now, QuotaPerMinute: unlimited})
	srv := httptest.NewServer(emu.Handler())
	defer srv.Close()
	log, err := acceptlog.Open(filepath.Join(cfg.Dir, "sweep.db"), acceptlog.Options{Now: clock.Now})
	if err != nil {
		return nil, err
	}
	defer log.Close()
	pol := policy.Default()
	pol.MsgIDDomain = MsgIDDomain
	// The row measures the quota-limited rate: the daily sending budget
	// (2000 by default) would hold half the resends for a day.
	pol.Mailboxes = map[string]policy.Mailbox{policy.DefaultMailbox: {Name: policy.DefaultMailbox, DailySendLimit: 1 << 30}}
	ch, err := pol.Channel(policy.DefaultChannel)
	if err != nil {
		return nil, err
	}

	// Seed: really sent messages into the emulator (through a pooled client)
	// and every job into the log as unknown, due now.
	seedProv, err := gmailapi.New(ctx, gmailapi.Config{Endpoint: srv.URL,
		HTTPClient: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}})
	if err != nil {
		return nil, err
	}
	ids := make([]string, cfg.Jobs)
	for i := range ids {
		ids[i] = fmt.Sprintf("<sweep-%06d@%s>", i, MsgIDDomain)
	}
	now := clock.Now()
	err = parallel(cfg.Jobs, 64, func(i int) error {
		raw := BuildMessage(ids[i])
		if i%2 == 0 {
			if _, err := seedProv.Send(ctx, "me", raw, ""); err != nil {
				return fmt.Errorf("seed message %d: %w", i, err)
			}
		}
		_, _, err := log.Mutate(ctx, ids[i], unknownJob(ids[i], raw, now, ch.Grace))
		return err
	})
	if err != nil {
		return nil, err
	}
	emu.SetQuotaPerMinute(cfg.QuotaPerMinute)
	base := emu.Stats()

	prov, err := gmailapi.New(ctx, gmailapi.Config{Endpoint: srv.URL})
	if err != nil {
		return nil, err
	}
	svc, err := relay.New(ctx, relay.Config{Log: log, Provider: prov, Policy: pol,
		Quota: relay.NewQuota(cfg.QuotaPerMinute, clock.Now), Now: clock.Now, Logger: zerolog.Nop()})
	if err != nil {
		return nil, err
	}
	sw := sweeper.New(sweeper.Config{Log: log, Policy: pol, Mailboxes: svc, Attempter: svc, Now: clock.Now, BatchSize: batch})

	start, realStart := clock.Now(), time.Now()
	passes, storms, prevRL := 0, 0, base.RateLimited
	// settled: when no job is unknown (or forwarding) any more — every
	// ambiguous send decided. The verify pass's later looks at sent jobs
	// (late look, index behind) go on after it; they are the tail, not
	// the resolution the ideal measures.
	var settledAt time.Time
	settledUnits := 0
	for ; passes < maxPasses; passes++ {
		res, err := sw.RunOnce(ctx)
		if err != nil {
			return nil, fmt.Errorf("sweep pass %d: %w", passes, err)
		}
		if settledAt.IsZero() {
			st, err := log.Stats(ctx)
			if err != nil {
				return nil, err
			}
			if st.ByState[gmailrelay.StateUnknown]+st.ByState[gmailrelay.StateForwarding] == 0 {
				settledAt, settledUnits = clock.Now(), emu.Stats().QuotaUnits
			}
		}
		rl := emu.Stats().RateLimited
		if rl-prevRL >= 2 {
			storms++
		}
		prevRL = rl
		if res.Wait > 0 {
			clock.Advance(res.Wait)
			continue
		}
		if res.Errors > 0 {
			clock.Advance(30 * time.Second)
			continue
		}
		due, err := log.Due(ctx, clock.Now(), 1)
		if err != nil {
			return nil, err
		}
		if len(due) > 0 && res.Due > res.Deferred {
			continue // progress, and more is due now
		}
		next, err := log.Due(ctx, time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC), 1)
		if err != nil {
			return nil, err
		}
		if len(next) == 0 {
			break
		}
		clock.Advance(max(next[0].NextCheckAt.Sub(clock.Now()), time.Second))
	}
	realTook := time.Since(realStart)
	tail := clock.Now().Sub(start)
	stats := emu.Stats()
	virtual, units := tail, stats.QuotaUnits-base.QuotaUnits
	if !settledAt.IsZero() {
		virtual, units = settledAt.Sub(start), settledUnits-base.QuotaUnits
	}

	resolved, pending, wrong, err := judge(ctx, log, emu, ids)
	if err != nil {
		return nil, err
	}
	perSec := float64(cfg.QuotaPerMinute) / 60
	ideal := time.Duration(float64(max(units-cfg.QuotaPerMinute, 0)) / perSec * float64(time.Second))
	missed := cfg.Jobs / 2
	lists := ceilDiv(cfg.Jobs, batch) + ceilDiv(missed, batch)*(ch.Checks-1) + ceilDiv(missed, batch)
	lb := lists*relay.UnitsList + missed*relay.UnitsSend
	idealLB := time.Duration(float64(max(lb-cfg.QuotaPerMinute, 0)) / perSec * float64(time.Second))
	m := Metrics{
		"jobs":         float64(cfg.Jobs),
		"resolved":     float64(resolved),
		"pending":      float64(pending),
		"wrong":        float64(wrong),
		"units":        float64(units),
		"rate_limited": float64(stats.RateLimited - base.RateLimited),
		"storms":       float64(storms),
		"passes":       float64(passes),
		"virtual_min":  virtual.Minutes(),
		"tail_min":     tail.Minutes(),
		"units_total":  float64(stats.QuotaUnits - base.QuotaUnits),
		"ideal_min":    ideal.Minutes(),
		"ideal_lb_min": idealLB.Minutes(),
		"real_s":       realTook.Seconds(),
	}
	if resolved > 0 {
		m["units/job"] = float64(units) / float64(resolved)
	}
	if virtual > 0 {
		m["ideal_pct"] = 100 * ideal.Seconds() / virtual.Seconds()
		m["ideal_lb_pct"] = 100 * idealLB.Seconds() / virtual.Seconds()
	}
	return m, nil
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// unknownJob logs a job whose only attempt was ambiguous, its grace already
// over (due now), with its message stored for a resend.
func unknownJob(id string, raw []byte, now time.Time, grace time.Duration) func(*gmailrelay.Job) (gmailrelay.Change, error) {
	return func(cur *gmailrelay.Job) (gmailrelay.Change, error) {
		if cur != nil {
			return gmailrelay.Change{}, fmt.Errorf("job %s exists already", id)
		}
		at := now.Add(-grace)
		j := gmailrelay.Job{MessageID: id, Key: id, Channel: policy.DefaultChannel, Mailbox: policy.DefaultMailbox, Fingerprint: "bench",
			State: gmailrelay.StateUnknown, Attempts: 1, LastReason: "timeout", AmbiguousAt: at, NextCheckAt: now,
			CreatedAt: at, UpdatedAt: at}
		return gmailrelay.Change{Job: &j, Raw: raw, Lines: []gmailrelay.Line{
			{Time: at, Kind: gmailrelay.KindReceived, Attempt: 1, Channel: policy.DefaultChannel},
			{Time: at, Kind: gmailrelay.KindForwarding, Attempt: 1, State: gmailrelay.StateForwarding},
			{Time: at, Kind: gmailrelay.KindAmbiguous, Attempt: 1, State: gmailrelay.StateUnknown, Reason: "timeout"},
		}}, nil
	}
}

// judge checks every job against the emulator's truth. The even-numbered
// jobs were really sent: right is sent, one effect, one message. The others
// were not: right is sent after exactly one resend (one message, two
// attempts), or still unknown with a check scheduled and no message.
func judge(ctx context.Context, log gmailrelay.Store, emu *gmailfake.Server, ids []string) (resolved, pending, wrong int, err error) {
	counts := map[string]int{}
	for _, m := range emu.Messages("") {
		counts[m.MessageID]++
	}
	for i, id := range ids {
		j, err := log.Get(ctx, id)
		if err != nil {
			return 0, 0, 0, err
		}
		sent := j.State == gmailrelay.StateSent && counts[id] == 1 && j.Effects == 1
		switch {
		case i%2 == 0 && sent && j.Attempts == 1:
			resolved++
		case i%2 == 1 && sent && j.Attempts == 2:
			resolved++
		case i%2 == 1 && j.State == gmailrelay.StateUnknown && !j.NextCheckAt.IsZero() && counts[id] == 0:
			pending++
		default:
			wrong++
		}
	}
	return resolved, pending, wrong, nil
}
