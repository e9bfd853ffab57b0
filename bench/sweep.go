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
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = sweeper.DefaultBatchSize
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
	ids, err := seedUnknown(ctx, srv.URL, log, cfg.Jobs, clock.Now(), ch.Grace)
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
	sw := sweeper.New(sweeper.Config{Log: log, Policy: pol, Mailboxes: svc, Attempter: svc, Now: clock.Now, BatchSize: cfg.BatchSize})
	run, err := runPasses(ctx, sw, log, emu, clock)
	if err != nil {
		return nil, err
	}
	m := run.metrics(cfg, ch.Checks, base, emu.Stats())
	resolved, pending, wrong, err := judge(ctx, log, emu, ids)
	if err != nil {
		return nil, err
	}
	m["resolved"], m["pending"], m["wrong"] = float64(resolved), float64(pending), float64(wrong)
	if resolved > 0 {
		m["units/job"] = m["units"] / float64(resolved)
	}
	return m, nil
}

// seedUnknown stores, through a pooled client, the even-numbered half of
// jobs messages in the emulator at url (really sent) and logs every job as
// unknown, due at now; it returns the jobs' Message-IDs.
func seedUnknown(ctx context.Context, url string, log gmailrelay.Store, jobs int, now time.Time, grace time.Duration) ([]string, error) {
	seedProv, err := gmailapi.New(ctx, gmailapi.Config{Endpoint: url,
		HTTPClient: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}})
	if err != nil {
		return nil, err
	}
	ids := make([]string, jobs)
	for i := range ids {
		ids[i] = fmt.Sprintf("<sweep-%06d@%s>", i, MsgIDDomain)
	}
	err = parallel(jobs, 64, func(i int) error {
		raw := BuildMessage(ids[i])
		if i%2 == 0 {
			if _, err := seedProv.Send(ctx, "me", raw, ""); err != nil {
				return fmt.Errorf("seed message %d: %w", i, err)
			}
		}
		_, _, err := log.Mutate(ctx, ids[i], unknownJob(ids[i], raw, now, grace))
		return err
	})
	return ids, err
}

// sweepRun is what runPasses saw: its passes, the passes with two or more
// 429 answers (storms: no backoff between them), and its clock's start,
// end and the time and quota units at which the jobs settled (no job
// unknown or forwarding any more: every ambiguous send decided; zero when
// they never did).
type sweepRun struct {
	passes, storms        int
	start, end, settledAt time.Time
	realTook              time.Duration
	settledUnits          int
}

// runPasses runs the sweeper until no job is due any more, advancing the
// clock by a pass's Wait when it stopped for quota and to the next job's
// check time when nothing is due. The verify pass's later looks at sent
// jobs (late look, index behind) go on after the jobs settle; they are the
// tail, not the resolution the ideal measures.
func runPasses(ctx context.Context, sw *sweeper.Sweeper, log gmailrelay.Store, emu *gmailfake.Server, clock *Clock) (sweepRun, error) {
	run := sweepRun{start: clock.Now()}
	realStart := time.Now()
	prevRL := emu.Stats().RateLimited
	for ; run.passes < maxPasses; run.passes++ {
		res, err := sw.RunOnce(ctx)
		if err != nil {
			return run, fmt.Errorf("sweep pass %d: %w", run.passes, err)
		}
		if run.settledAt.IsZero() {
			st, err := log.Stats(ctx)
			if err != nil {
				return run, err
			}
			if st.ByState[gmailrelay.StateUnknown]+st.ByState[gmailrelay.StateForwarding] == 0 {
				run.settledAt, run.settledUnits = clock.Now(), emu.Stats().QuotaUnits
			}
		}
		rl := emu.Stats().RateLimited
		if rl-prevRL >= 2 {
			run.storms++
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
			return run, err
		}
		if len(due) > 0 && res.Due > res.Deferred {
			continue // progress, and more is due now
		}
		next, err := log.Due(ctx, time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC), 1)
		if err != nil {
			return run, err
		}
		if len(next) == 0 {
			break
		}
		clock.Advance(max(next[0].NextCheckAt.Sub(clock.Now()), time.Second))
	}
	run.realTook, run.end = time.Since(realStart), clock.Now()
	return run, nil
}

// metrics are Sweep's figures of run but those judge gives; base and end
// are the emulator's statistics before the sweep and after it, checks
// the channel's searches per never-sent job.
func (run sweepRun) metrics(cfg SweepConfig, checks int, base, end gmailfake.Stats) Metrics {
	tail := run.end.Sub(run.start)
	virtual, units := tail, end.QuotaUnits-base.QuotaUnits
	if !run.settledAt.IsZero() {
		virtual, units = run.settledAt.Sub(run.start), run.settledUnits-base.QuotaUnits
	}
	perSec := float64(cfg.QuotaPerMinute) / 60
	ideal := time.Duration(float64(max(units-cfg.QuotaPerMinute, 0)) / perSec * float64(time.Second))
	missed, batch := cfg.Jobs/2, cfg.BatchSize
	lists := ceilDiv(cfg.Jobs, batch) + ceilDiv(missed, batch)*(checks-1) + ceilDiv(missed, batch)
	lb := lists*relay.UnitsList + missed*relay.UnitsSend
	idealLB := time.Duration(float64(max(lb-cfg.QuotaPerMinute, 0)) / perSec * float64(time.Second))
	m := Metrics{
		"jobs":         float64(cfg.Jobs),
		"units":        float64(units),
		"rate_limited": float64(end.RateLimited - base.RateLimited),
		"storms":       float64(run.storms),
		"passes":       float64(run.passes),
		"virtual_min":  virtual.Minutes(),
		"tail_min":     tail.Minutes(),
		"units_total":  float64(end.QuotaUnits - base.QuotaUnits),
		"ideal_min":    ideal.Minutes(),
		"ideal_lb_min": idealLB.Minutes(),
		"real_s":       run.realTook.Seconds(),
	}
	if virtual > 0 {
		m["ideal_pct"] = 100 * ideal.Seconds() / virtual.Seconds()
		m["ideal_lb_pct"] = 100 * idealLB.Seconds() / virtual.Seconds()
	}
	return m
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
