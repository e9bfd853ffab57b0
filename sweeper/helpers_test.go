package sweeper_test

import (
	"cmp"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/acceptlog"
	"github.com/gmailrelay/gmailrelay/faultmodes"
	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/internal/testclock"
	"github.com/gmailrelay/gmailrelay/internal/testenv"
	"github.com/gmailrelay/gmailrelay/policy"
	"github.com/gmailrelay/gmailrelay/relay"
	"github.com/gmailrelay/gmailrelay/sweeper"
)

// Channels of testPolicy.
const (
	retryChannel  = "default" // retry, grace 1m, 2 checks, 3 attempts
	reviewChannel = "billing" // review, grace 1m, 1 check
	grace         = time.Minute
)

func testPolicy() *policy.Policy {
	return &policy.Policy{
		MsgIDDomain:  "relay.test",
		VerifyHandle: policy.VerifyNever,
		Channels: map[string]policy.Channel{
			retryChannel:  {Name: retryChannel, OnUnknown: policy.Retry, Grace: grace, Checks: 2, MaxAttempts: 3},
			reviewChannel: {Name: reviewChannel, OnUnknown: policy.Review, Grace: grace, Checks: 1, MaxAttempts: 1},
		},
	}
}

// setup configures a harness; zero values are fine.
type setup struct {
	indexLag      time.Duration
	emulatorQuota int // per minute; 0 = the emulator's default
	relayQuota    int // per minute; 0 = plenty
	quotaStatus   int // the emulator's over-quota answer: 429 (0) or 403
	batchSize     int
	limit         int // due jobs per pass; 0 = the sweeper's default
	sentDedupe    bool
	strictQueries bool
	history       bool           // the history tail on
	policy        *policy.Policy // nil: testPolicy()
	lagDist       gmailfake.LagDistribution
	historyKeep   time.Duration // the emulator's history retention; 0: its default
	rewrite       gmailfake.RewritePolicy
	dailyLimit    int   // the emulator's daily send limit (0: none)
	dailyLag      int   // sends past it answered 200 and not delivered
	seed          int64 // the emulator's; 0 = 7 (not 1: the relay's fault set draws from seed 1, and equal draws would couple the two)
}

// harness is a relay and a sweeper over a real acceptance log and the Gmail
// emulator behind Google's client, all on one fake clock.
type harness struct {
	te     *testenv.Env
	t      *testing.T
	ctx    context.Context
	clock  *testclock.Clock
	srv    *gmailfake.Server
	prov   relay.Provider
	path   string
	log    *acceptlog.Log
	faults *faultmodes.Set
	svc    *relay.Service
	sw     *sweeper.Sweeper
	set    setup

	mu   sync.Mutex
	keys int
}

func newHarness(t *testing.T, set setup) *harness {
	t.Helper()
	pol := set.policy
	if pol == nil {
		pol = testPolicy()
	}
	te := testenv.New(t, testenv.Options{Policy: pol, SendTimeout: 60 * time.Second,
		Emulator: gmailfake.Options{IndexLag: set.indexLag, IndexLagDistribution: set.lagDist, HistoryRetention: set.historyKeep, Rewrite: set.rewrite, DailySendLimit: set.dailyLimit, DailyLimitLag: set.dailyLag,
			QuotaPerMinute: set.emulatorQuota, QuotaStatus: set.quotaStatus,
			SentDedupe: set.sentDedupe, StrictQueries: set.strictQueries, Seed: cmp.Or(set.seed, 7)}})
	h := &harness{t: t, ctx: context.Background(), te: te, clock: te.Clock, srv: te.Emulator, prov: te.Provider,
		path: te.Path, log: te.Log, faults: te.Faults, set: set}
	h.build(set.relayQuota)
	return h
}

// build makes a new Service (running its crash recovery) and Sweeper over
// the current log and h.prov, with a fresh quota budget of perMinute (0 =
// plenty).
func (h *harness) build(perMinute int) {
	h.t.Helper()
	if perMinute == 0 {
		perMinute = 1 << 30
	}
	h.te.Log, h.te.Provider = h.log, h.prov
	h.te.Build(perMinute)
	h.svc = h.te.Service
	cfg := h.te.SweeperConfig()
	cfg.BatchSize, cfg.Limit, cfg.Interval = h.set.batchSize, h.set.limit, time.Hour
	cfg.History = h.set.history
	h.sw = sweeper.New(cfg)
}

// restart closes the log, opens it again and builds a new Service (which
// recovers jobs left forwarding) and Sweeper, as a process restart would.
func (h *harness) restart() {
	h.t.Helper()
	if err := h.log.Close(); err != nil {
		h.t.Fatalf("close log: %v", err)
	}
	h.te.OpenLog()
	h.log = h.te.Log
	h.build(h.set.relayQuota)
}

// prepare builds a new message with a fresh key.
func (h *harness) prepare(channel string) relay.Prepared {
	h.t.Helper()
	h.mu.Lock()
	h.keys++
	key := fmt.Sprintf("cus_%d:order.shipped:ord_%d", h.keys, h.keys)
	h.mu.Unlock()
	p, err := relay.Prepare(relay.SendRequest{Key: key, Channel: channel, From: gmailfake.DefaultAccount,
		To: relay.AddressList{"customer@example.net"}, Subject: "Your order shipped", Text: "It is on its way."},
		"", "relay.test", h.clock.Now())
	if err != nil {
		h.t.Fatalf("prepare: %v", err)
	}
	return p
}

// send sends a new message through the relay's front door.
func (h *harness) send(channel string) (string, relay.Result) {
	h.t.Helper()
	p := h.prepare(channel)
	res, err := h.svc.Send(h.ctx, p, relay.SendOptions{})
	if err != nil {
		h.t.Fatalf("send: %v", err)
	}
	return p.MessageID, res
}

// sendAmbiguous sends a message that Gmail stores but answers 500 for: a
// real ambiguous send. It returns the Message-ID.
func (h *harness) sendAmbiguous(channel string) string {
	h.t.Helper()
	return h.sendUnknown(channel, gmailfake.ActionAcceptThenError)
}

// sendLost sends a message that Gmail answers 500 for without storing it:
// unknown to the relay, really not sent.
func (h *harness) sendLost(channel string) string {
	h.t.Helper()
	return h.sendUnknown(channel, gmailfake.ActionError)
}

// sendUnknown sends a message through an emulator fault answering 500 with
// action, checks that the job is unknown and returns its Message-ID.
func (h *harness) sendUnknown(channel string, action string) string {
	h.t.Helper()
	h.emulatorFault(gmailfake.Fault{Method: gmailfake.MethodSend, Action: action, Status: 500})
	id, res := h.send(channel)
	h.wantState(id, res.Job, gmailrelay.StateUnknown)
	return id
}

// wantDuplicateReview moves the clock on by grace and checks that the pass
// finds job id twice in Sent (emulator: 2 messages) and sends it to review
// with one review line, reason duplicate, after 1 attempt and effects
// effect lines.
func (h *harness) wantDuplicateReview(id string, effects int) {
	h.t.Helper()
	h.clock.Advance(grace)
	wantResult(h.t, h.sweep(), sweeper.Result{Checked: 1, Duplicates: 1, Reviewed: 1})
	h.wantJob(id, gmailrelay.StateReview, 1, effects, 2)
	reviews := h.lines(id, gmailrelay.KindReview)
	if len(reviews) != 1 || reviews[0].Reason != sweeper.ReasonDuplicate || reviews[0].SentHits != 2 {
		h.t.Errorf("review lines %+v, want one with reason duplicate and 2 SENT hits", reviews)
	}
}

func (h *harness) emulatorFault(f gmailfake.Fault) {
	h.t.Helper()
	if _, err := h.srv.AddFault(f); err != nil {
		h.t.Fatalf("emulator fault: %v", err)
	}
}

// sweep runs one pass and fails the test on a pass error.
func (h *harness) sweep() sweeper.Result {
	h.t.Helper()
	r, err := h.sw.RunOnce(h.ctx)
	if err != nil {
		h.t.Fatalf("RunOnce: %v", err)
	}
	return r
}

// sweeps moves the clock on by grace and runs a pass, n times.
func (h *harness) sweeps(n int) {
	h.t.Helper()
	for range n {
		h.clock.Advance(grace)
		h.sweep()
	}
}

// wantDeliveries stops the test unless the emulator delivered the message
// id exactly want times (why, when not empty, says what that means).
func (h *harness) wantDeliveries(id string, want int, why string) {
	h.t.Helper()
	if d := h.srv.Deliveries(id); d != want {
		if why != "" {
			why = " (" + why + ")"
		}
		h.t.Fatalf("emulator result: %d deliveries of %s, want %d%s", d, id, want, why)
	}
}

func (h *harness) job(id string) gmailrelay.Job {
	h.t.Helper()
	j, err := h.log.Get(h.ctx, id)
	if err != nil {
		h.t.Fatalf("get %s: %v", id, err)
	}
	return j
}

// lines returns the job's lines of kind (all lines when kind is "").
func (h *harness) lines(id string, kind gmailrelay.Kind) []gmailrelay.Line {
	h.t.Helper()
	all, err := h.log.JobLines(h.ctx, id)
	if err != nil {
		h.t.Fatalf("lines of %s: %v", id, err)
	}
	var out []gmailrelay.Line
	for _, l := range all {
		if kind == "" || l.Kind == kind {
			out = append(out, l)
		}
	}
	return out
}

// wantOneSearch checks that id has exactly one search line and that its
// witness is witness (why says what that shows), and returns the line.
func (h *harness) wantOneSearch(id, witness, why string) gmailrelay.Line {
	h.t.Helper()
	s := h.lines(id, gmailrelay.KindSearch)
	if len(s) != 1 || s[0].Witness != witness {
		h.t.Fatalf("search lines %+v, want one with witness %s (%s)", s, witness, why)
	}
	return s[0]
}

// sentCopyRemoved sends one job on the retry channel (sent, one copy),
// takes its copy away with remove (the emulator's Trash or Delete), lets
// grace pass and returns the job's id.
func (h *harness) sentCopyRemoved(remove func(gmailID string) error) string {
	h.t.Helper()
	id, _ := h.send(retryChannel)
	if err := remove(h.srv.Messages(id)[0].ID); err != nil {
		h.t.Fatalf("remove the copy of %s: %v", id, err)
	}
	h.clock.Advance(grace)
	return id
}

func (h *harness) wantState(id string, j gmailrelay.Job, want gmailrelay.State) {
	h.t.Helper()
	if j.State != want {
		h.t.Fatalf("job %s: state %q (reason %q), want %q", id, j.State, j.LastReason, want)
	}
}

// wantJob checks the job's state, attempts and effect lines in the log and
// how many times the emulator delivered its Message-ID.
func (h *harness) wantJob(id string, state gmailrelay.State, attempts, effects, deliveries int) gmailrelay.Job {
	h.t.Helper()
	j := h.wantJobLog(id, state, attempts, effects)
	if got := h.srv.Deliveries(id); got != deliveries {
		h.t.Errorf("emulator has %d deliveries of %s, want %d", got, id, deliveries)
	}
	return j
}

// wantJobCopies is wantJob for a test about stored copies (a send Gmail
// folded or whose id it rewrote, where copies and deliveries differ): it
// also checks the copies the emulator stores under the job's Message-ID.
func (h *harness) wantJobCopies(id string, state gmailrelay.State, attempts, effects, deliveries, copies int) gmailrelay.Job {
	h.t.Helper()
	j := h.wantJob(id, state, attempts, effects, deliveries)
	if got := h.srv.Count(id); got != copies {
		h.t.Errorf("emulator holds %d copies with %s, want %d", got, id, copies)
	}
	return j
}

// wantJobLog checks the job's state, attempts and effect lines in the log.
func (h *harness) wantJobLog(id string, state gmailrelay.State, attempts, effects int) gmailrelay.Job {
	h.t.Helper()
	j := h.job(id)
	h.wantState(id, j, state)
	if j.Attempts != attempts {
		h.t.Errorf("job %s: %d attempts, want %d", id, j.Attempts, attempts)
	}
	if got := len(h.lines(id, gmailrelay.KindEffect)); got != effects || j.Effects != effects {
		h.t.Errorf("job %s: %d effect lines (Effects %d), want %d", id, got, j.Effects, effects)
	}
	return j
}

// wantResult compares the counters of a pass that matter to a test (Wait
// and Due are left out).
func wantResult(t *testing.T, got, want sweeper.Result) {
	t.Helper()
	got.Wait, got.Due = 0, 0
	if got != want {
		t.Errorf("pass result\n got %+v\nwant %+v", got, want)
	}
}

// sendMany sends n messages on channel concurrently (the log groups their
// commits), each answered by the emulator's fault rule already in place,
// and returns their Message-IDs.
func (h *harness) sendMany(n int, channel string) []string {
	h.t.Helper()
	ids := make([]string, n)
	errs := make(chan error, n)
	work := make(chan int)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				p := h.prepare(channel)
				ids[i] = p.MessageID
				if _, err := h.svc.Send(h.ctx, p, relay.SendOptions{}); err != nil {
					errs <- err
				}
			}
		}()
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		h.t.Fatalf("send: %v", err)
	}
	return ids
}
