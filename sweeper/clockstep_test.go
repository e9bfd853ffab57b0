package sweeper_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/internal/testclock"
	"github.com/gmailrelay/gmailrelay/internal/testenv"
	"github.com/gmailrelay/gmailrelay/relay"
	"github.com/gmailrelay/gmailrelay/sweeper"
)

// stepRig is a harness whose relay (log, Gmail client, fault rules,
// Service, Sweeper) runs on a hostClock (see clockskew_test.go) while the
// emulator runs on the real clock (h.clock): a testenv Env with Options.Now.
// Its harness has no te, so build and restart (which would make a sweeper
// without the rig's) are not for it, and it sends through its own send,
// which dates messages on the host's clock as the api does.
type stepRig struct {
	*harness
	host *hostClock
}

// rigSetup configures a stepRig.
type rigSetup struct {
	indexLag time.Duration
	// mono: the sweeper's monotonic clock follows the real clock; without
	// it the sweeper has none (Config.Mono nil over a manual clock) and
	// finds no step, as before clock steps were looked for.
	mono bool
	// wrap, when set, wraps the relay's Gmail client.
	wrap func(relay.Provider) relay.Provider
	// logger is the sweeper's; nil means none.
	logger *zerolog.Logger
	// dates, when set, rewrites the Date header of the emulator's answers
	// before the relay's Gmail client reads them (a proxy's clock).
	dates func(now time.Time) time.Time
}

func newStepRig(t *testing.T, set rigSetup) *stepRig {
	t.Helper()
	real := testclock.New()
	host := &hostClock{real: real}
	o := testenv.Options{Clock: real, Now: host.Now, Policy: testPolicy(), SendTimeout: 60 * time.Second, QuotaPerMinute: 1 << 30,
		Emulator: gmailfake.Options{IndexLag: set.indexLag, Seed: 7}}
	if set.dates != nil {
		o.HTTPClient = &http.Client{Transport: &redated{base: http.DefaultTransport, now: real.Now, date: set.dates}}
	}
	var prov relay.Provider
	o.Configure = func(c *relay.Config) {
		if set.wrap != nil {
			c.Provider = set.wrap(c.Provider)
		}
		prov = c.Provider
	}
	te := testenv.New(t, o)
	cfg := te.SweeperConfig()
	cfg.Interval = time.Hour
	if set.logger != nil {
		cfg.Logger = set.logger
	}
	if set.mono {
		start := real.Now()
		cfg.Mono = func() time.Duration { return real.Now().Sub(start) }
	}
	h := &harness{t: t, ctx: context.Background(), clock: real, srv: te.Emulator, prov: prov, log: te.Log, faults: te.Faults,
		svc: te.Service, sw: sweeper.New(cfg)}
	return &stepRig{harness: h, host: host}
}

// redated sets the Date of every answer from its own clock, as a proxy
// between the relay and Gmail may.
type redated struct {
	base http.RoundTripper
	now  func() time.Time
	date func(time.Time) time.Time
}

func (r *redated) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.base.RoundTrip(req)
	if err == nil {
		resp.Header.Set("Date", r.date(r.now()).UTC().Format(http.TimeFormat))
	}
	return resp, err
}

// send sends a new message on the retry channel, dated on the relay's
// clock as the api dates it; action, when set, is an emulator fault
// answering the send 500 (the job must then be unknown).
func (r *stepRig) send(action string) string {
	r.t.Helper()
	if action != "" {
		r.emulatorFault(gmailfake.Fault{Method: gmailfake.MethodSend, Action: action, Status: 500})
	}
	r.keys++
	key := fmt.Sprintf("cus_%d:order.shipped:ord_%d", r.keys, r.keys)
	p, err := relay.Prepare(relay.SendRequest{Key: key, Channel: retryChannel, From: gmailfake.DefaultAccount,
		To: relay.AddressList{"customer@example.net"}, Subject: "Your order shipped", Text: "It is on its way."},
		"", "relay.test", r.host.Now())
	if err != nil {
		r.t.Fatalf("prepare: %v", err)
	}
	res, err := r.svc.Send(r.ctx, p, relay.SendOptions{})
	if err != nil {
		r.t.Fatalf("send: %v", err)
	}
	want := gmailrelay.StateSent
	if action != "" {
		want = gmailrelay.StateUnknown
	}
	r.wantState(p.MessageID, res.Job, want)
	return p.MessageID
}

// measureLag sends one message and sweeps every grace until its verify
// pass measured the mailbox's index lag, and returns the p99.
func (r *stepRig) measureLag() time.Duration {
	r.t.Helper()
	id := r.send("")
	mailbox := r.job(id).Mailbox
	for range 10 {
		r.clock.Advance(grace)
		r.sweep()
		if p99, n := r.sw.IndexLag(mailbox, 0.99); n > 0 {
			return p99
		}
	}
	r.t.Fatalf("no index lag measured after 10 graces")
	return 0
}

// stepRun is what the ambiguous send across a step led to.
type stepRun struct {
	id      string
	results []sweeper.Result
	// searches: each search line of the job, as check/witness/hits.
	searches []string
}

// ambiguousAcrossStep is the audit's scenario: Gmail indexes 150 s after a
// send; one plain send is verified, so the mailbox's lag p99 (3m) is
// measured; then a send Gmail stores but answers 500 for, the relay's wall
// clock steps by step, and the sweeper runs 16 times a grace apart (and
// once more a grace for each grace of a step back, which holds every
// check back by that much).
func ambiguousAcrossStep(t *testing.T, step time.Duration, mono bool) (*stepRig, stepRun) {
	t.Helper()
	r := newStepRig(t, rigSetup{indexLag: 150 * time.Second, mono: mono})
	if p99 := r.measureLag(); p99 != 3*time.Minute {
		t.Fatalf("measured lag p99 %s, want 3m", p99)
	}
	run := stepRun{id: r.send(gmailfake.ActionAcceptThenError)}
	r.host.Step(step)
	for range 16 + int(max(-step, 0)/grace) {
		run.results = append(run.results, r.sweep())
		r.clock.Advance(grace)
	}
	for _, l := range r.lines(run.id, gmailrelay.KindSearch) {
		run.searches = append(run.searches, fmt.Sprintf("%d/%s/%d", l.Check, l.Witness, l.Hits))
	}
	return r, run
}

// A forward step of the relay's wall clock makes the ambiguous attempt
// look older than it is; the misses that follow must not count before
// real time caught up, or the job is resent while Gmail has not indexed
// its first copy yet: delivered twice.
func TestClockStepForwardResendsNothingGmailHas(t *testing.T) {
	for _, step := range []time.Duration{0, 2 * time.Minute, time.Hour} {
		t.Run(fmt.Sprint(step), func(t *testing.T) {
			r, run := ambiguousAcrossStep(t, step, true)
			r.wantDeliveries(run.id, 1, "Gmail stored the ambiguous send; the step is no reason to send it again")
			r.wantJob(run.id, gmailrelay.StateSent, 1, 1, 1)
		})
	}
}

// A step of zero or back changes nothing: pass for pass, the sweeper that
// watches its clock does what the one that cannot (no monotonic clock)
// does, and the job is found, delivered once.
func TestClockStepZeroOrBackChangesNothing(t *testing.T) {
	for _, step := range []time.Duration{0, -2 * time.Minute, -time.Hour} {
		t.Run(fmt.Sprint(step), func(t *testing.T) {
			r, watched := ambiguousAcrossStep(t, step, true)
			_, blind := ambiguousAcrossStep(t, step, false)
			if fmt.Sprint(watched.results) != fmt.Sprint(blind.results) {
				t.Errorf("pass results\nwatching the clock %+v\n   without a clock %+v", watched.results, blind.results)
			}
			if fmt.Sprint(watched.searches) != fmt.Sprint(blind.searches) {
				t.Errorf("search lines (check/witness/hits)\nwatching the clock %v\n   without a clock %v", watched.searches, blind.searches)
			}
			r.wantDeliveries(watched.id, 1, "")
			r.wantJob(watched.id, gmailrelay.StateSent, 1, 1, 1)
		})
	}
}

// A send Gmail really lost is still resent after a forward step, once
// real time has caught up (max of grace and the measured p99 after the
// pass that found the step), and only once.
func TestClockStepForwardStillResendsLost(t *testing.T) {
	r := newStepRig(t, rigSetup{indexLag: 150 * time.Second, mono: true})
	p99 := r.measureLag()
	id := r.send(gmailfake.ActionError)
	r.host.Step(time.Hour)
	stepped := r.clock.Now()
	var resentAt time.Time
	for range 16 {
		r.sweep()
		if resentAt.IsZero() && r.srv.Deliveries(id) > 0 {
			resentAt = r.clock.Now()
		}
		r.clock.Advance(grace)
	}
	if resentAt.IsZero() {
		t.Fatalf("never resent")
	}
	if waited := resentAt.Sub(stepped); waited < max(grace, p99) {
		t.Errorf("resent %s after the step, want at least %s (max of grace and p99) of real time", waited, max(grace, p99))
	}
	r.wantJob(id, gmailrelay.StateSent, 2, 1, 1)
}

// A step forward of an hour must not send an unknown job whose witness is
// missing to review with a false ALARM: max_unwitnessed (1h) counts real
// time, so the review comes an hour after the attempt, as without a step.
func TestClockStepForwardNoFalseUnwitnessedAlarm(t *testing.T) {
	var logs testenv.LockedBuffer
	logger := zerolog.New(&logs)
	r := newStepRig(t, rigSetup{mono: true, logger: &logger,
		wrap: func(p relay.Provider) relay.Provider { return blindGmail{p} }})
	lost := r.send(gmailfake.ActionError)
	attempted := r.clock.Now()
	r.clock.Advance(10 * time.Second)
	r.send("") // a later send Gmail confirmed: the witness the blind search never shows
	for range 5 {
		r.clock.Advance(grace)
		r.sweep()
	}
	r.host.Step(time.Hour)
	var reviewedAt time.Time
	for range 80 {
		r.sweep()
		if r.job(lost).State != gmailrelay.StateUnknown {
			reviewedAt = r.clock.Now()
			break
		}
		r.clock.Advance(grace)
	}
	r.wantJob(lost, gmailrelay.StateReview, 1, 0, 0)
	if got := reviewReason(r.harness, lost); got != sweeper.ReasonIndexUnverifiable {
		t.Fatalf("review reason %q, want %q", got, sweeper.ReasonIndexUnverifiable)
	}
	if waited := reviewedAt.Sub(attempted); waited < time.Hour || waited > time.Hour+2*grace {
		t.Errorf("review %s of real time after the attempt, want just after max_unwitnessed (1h)", waited)
	}
	if n := strings.Count(logs.String(), "ALARM"); n != 1 {
		t.Errorf("%d ALARM lines, want 1 (the review's)", n)
	}
}

// The sweeper names a step once, in a warning, and never one that did not
// happen.
func TestClockStepWarnsOnce(t *testing.T) {
	for _, tc := range []struct {
		step time.Duration
		want int
	}{{0, 0}, {time.Second, 0}, {time.Hour, 1}, {-time.Hour, 1}} {
		t.Run(fmt.Sprint(tc.step), func(t *testing.T) {
			var logs testenv.LockedBuffer
			logger := zerolog.New(&logs)
			r := newStepRig(t, rigSetup{mono: true, logger: &logger})
			r.sweep()
			r.clock.Advance(grace)
			r.host.Step(tc.step)
			for range 5 {
				r.sweep()
				r.clock.Advance(grace)
			}
			if got := strings.Count(logs.String(), "wall clock stepped"); got != tc.want {
				t.Errorf("%d warnings of a step, want %d; log:\n%s", got, tc.want, logs.String())
			}
			if tc.want > 0 && !strings.Contains(logs.String(), `"step":"`+tc.step.String()+`"`) {
				t.Errorf("the warning does not name the step %s; log:\n%s", tc.step, logs.String())
			}
		})
	}
}

// A send answered before a step back and verified after it gives no lag
// sample: the interval its sample would measure is short by the step, and
// a lag floor too low lets misses count too early. Sends after the step
// are measured as usual.
func TestClockStepBackTakesNoLagSampleAcrossIt(t *testing.T) {
	r := newStepRig(t, rigSetup{indexLag: 150 * time.Second, mono: true})
	r.sweep()
	id := r.send("")
	mailbox := r.job(id).Mailbox
	r.host.Step(-2 * time.Minute)
	for range 8 {
		r.clock.Advance(grace)
		r.sweep()
	}
	if j := r.job(id); j.VerifyLooks == 0 {
		t.Fatalf("job %s: not found by its verify pass (%+v)", id, j)
	}
	if d, n := r.sw.IndexLag(mailbox, 1); n != 0 {
		t.Fatalf("a lag sample of %s across the step back; want none", d)
	}
	if p99 := r.measureLag(); p99 != 3*time.Minute {
		t.Errorf("a send after the step: lag p99 %s, want 3m", p99)
	}
}
