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
	"github.com/gmailrelay/gmailrelay/outbox"
	"github.com/gmailrelay/gmailrelay/policy"
	"github.com/gmailrelay/gmailrelay/relay"
	"github.com/gmailrelay/gmailrelay/sweeper"
)

// The three mailboxes of these tests, each an account of the emulator.
const (
	supportAddr = "support@shop.test"
	billingAddr = "billing@shop.test"
	brandAddr   = "hello@brand.test"
)

// threeBoxes is a relay of three mailboxes over one emulator serving three
// accounts, with a sweeper and an outbox.
type threeBoxes struct {
	te  *testenv.Env
	sw  *sweeper.Sweeper
	box *outbox.Outbox
	t   *testing.T
	n   int
}

func threeMailboxPolicy(billingLimit int) *policy.Policy {
	p := testPolicy()
	p.VerifyHandle = policy.VerifyFirst
	p.Mailboxes = map[string]policy.Mailbox{
		"support": {Name: "support", Address: supportAddr, SendAs: []string{"help@shop.test"}, DailySendLimit: 100},
		"billing": {Name: "billing", Address: billingAddr, DailySendLimit: billingLimit},
		"brand":   {Name: "brand", Address: brandAddr, DailySendLimit: 100},
	}
	return p
}

func newThreeBoxes(t *testing.T, em gmailfake.Options, billingLimit int) *threeBoxes {
	t.Helper()
	em.Accounts = []string{supportAddr, billingAddr, brandAddr}
	em.Seed = 7
	tb := &threeBoxes{t: t, te: testenv.New(t, testenv.Options{Policy: threeMailboxPolicy(billingLimit), Emulator: em})}
	tb.build()
	return tb
}

// build makes the sweeper and the outbox over the current Service.
func (tb *threeBoxes) build() {
	cfg := tb.te.SweeperConfig()
	cfg.Interval = time.Hour
	tb.sw = sweeper.New(cfg)
	var err error
	if tb.box, err = outbox.New(outbox.Config{Log: tb.te.Log, Relay: tb.te.Service, Now: tb.te.Clock.Now}); err != nil {
		tb.t.Fatal(err)
	}
}

// send sends a new message with the given From and mailbox field.
func (tb *threeBoxes) send(from, mailbox string, o relay.SendOptions) (relay.Result, error) {
	tb.t.Helper()
	return tb.sendOn(context.Background(), from, mailbox, o)
}

// sendOn is send on ctx (which may force a fault: ambiguous).
func (tb *threeBoxes) sendOn(ctx context.Context, from, mailbox string, o relay.SendOptions) (relay.Result, error) {
	tb.t.Helper()
	tb.n++
	p, err := relay.Prepare(relay.SendRequest{Key: fmt.Sprintf("cus_%d:invoice:%d", tb.n, tb.n), From: from, Mailbox: mailbox,
		To: relay.AddressList{"customer@example.net"}, Subject: "Invoice", Text: "Attached."}, "", "relay.test", tb.te.Clock.Now())
	if err != nil {
		return relay.Result{}, err
	}
	return tb.te.Service.Send(ctx, p, o)
}

func (tb *threeBoxes) mustSend(from, mailbox string, o relay.SendOptions) relay.Result {
	tb.t.Helper()
	return tb.mustSendOn(context.Background(), from, mailbox, o)
}

func (tb *threeBoxes) mustSendOn(ctx context.Context, from, mailbox string, o relay.SendOptions) relay.Result {
	tb.t.Helper()
	res, err := tb.sendOn(ctx, from, mailbox, o)
	if err != nil {
		tb.t.Fatalf("send from %q mailbox %q: %v", from, mailbox, err)
	}
	return res
}

// ambiguous is the context of an attempt Gmail accepts whose answer is lost.
var ambiguous = faultmodes.WithForced(context.Background(), faultmodes.Decision{RuleID: "test", Mode: faultmodes.ForwardThenDropResponse})

// account returns the emulator account that stored id, and its deliveries.
func (tb *threeBoxes) account(id string) (string, int) {
	tb.t.Helper()
	truth := tb.te.Emulator.Lookup("", id)
	if len(truth.Messages) != 1 {
		tb.t.Fatalf("%s: %d stored copies, want 1", id, len(truth.Messages))
	}
	return truth.Messages[0].Account, truth.Deliveries
}

func (tb *threeBoxes) mailbox(name string) gmailrelay.Mailbox {
	tb.t.Helper()
	mb, err := tb.te.Log.Mailbox(context.Background(), name)
	if err != nil {
		tb.t.Fatal(err)
	}
	return mb
}

func TestEmulatorSendsRouteToTheirMailbox(t *testing.T) {
	tb := newThreeBoxes(t, gmailfake.Options{}, 100)
	for _, tc := range []struct{ from, mailbox, wantBox, wantAccount string }{
		{supportAddr, "", "support", supportAddr},
		{"Help Desk <HELP@shop.test>", "", "support", supportAddr}, // a send_as alias, any case
		{billingAddr, "", "billing", billingAddr},
		{"", "brand", "brand", brandAddr},
		{brandAddr, "brand", "brand", brandAddr},
	} {
		res := tb.mustSend(tc.from, tc.mailbox, relay.SendOptions{})
		j := tb.te.Job(res.Job.MessageID)
		if j.State != gmailrelay.StateSent || j.Mailbox != tc.wantBox {
			t.Errorf("from %q mailbox %q: job %s in mailbox %q, want sent in %q", tc.from, tc.mailbox, j.State, j.Mailbox, tc.wantBox)
		}
		if acct, n := tb.account(j.MessageID); acct != tc.wantAccount || n != 1 {
			t.Errorf("from %q mailbox %q: emulator stored it in %s with %d deliveries, want %s once", tc.from, tc.mailbox, acct, n, tc.wantAccount)
		}
	}
	before := tb.te.Emulator.Stats().Deliveries
	for _, tc := range []struct{ from, mailbox, field string }{
		{"stranger@elsewhere.test", "", "from"},
		{"", "", "from"}, // several mailboxes and no way to choose
		{"", "sales", "mailbox"},
		{supportAddr, "billing", "from"},
	} {
		_, err := tb.send(tc.from, tc.mailbox, relay.SendOptions{})
		testenv.WantInvalid(t, err, tc.field)
	}
	if n := tb.te.Emulator.Stats().Deliveries; n != before {
		t.Errorf("refused sends delivered %d messages", n-before)
	}
	if st, _ := tb.te.Log.Stats(context.Background()); st.Jobs != 5 {
		t.Errorf("log holds %d jobs, want the 5 accepted ones only", st.Jobs)
	}
}

func TestEmulatorRewriteInOneMailboxUntrustsOnlyThatMailbox(t *testing.T) {
	tb := newThreeBoxes(t, gmailfake.Options{Rewrite: gmailfake.RewritePolicy{Mode: gmailfake.RewriteAlways, Accounts: []string{brandAddr}}}, 100)
	// The first send of each mailbox is read back (verify_handle: first).
	for _, from := range []string{supportAddr, billingAddr, brandAddr} {
		tb.mustSend(from, "", relay.SendOptions{})
	}
	if !tb.mailbox("brand").HandleUntrusted {
		t.Fatal("brand's rewritten Message-ID did not make it untrusted")
	}
	// Ambiguous sends in every mailbox; the sweep resolves them by search
	// where the handle holds and hands brand's to a human.
	ids := map[string][]string{}
	for _, from := range []string{supportAddr, billingAddr, brandAddr} {
		for range 2 {
			res := tb.mustSendOn(ambiguous, from, "", relay.SendOptions{})
			ids[from] = append(ids[from], res.Job.MessageID)
		}
	}
	listsBefore := map[string]int{}
	for from := range ids {
		listsBefore[from] = tb.te.Emulator.AccountStats(from).Calls[gmailfake.MethodList]
	}
	tb.te.Clock.Advance(grace + time.Second)
	if _, err := tb.sw.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	for from, list := range ids {
		want := gmailrelay.StateSent
		if from == brandAddr {
			want = gmailrelay.StateReview
		}
		for _, id := range list {
			j := tb.te.Job(id)
			if j.State != want {
				t.Errorf("%s's ambiguous job: %s, want %s", from, j.State, want)
			}
			if want == gmailrelay.StateReview && !hasReview(tb.te.Lines(id), sweeper.ReasonHandleUntrusted) {
				t.Errorf("%s's ambiguous job went to review without a %s line", from, sweeper.ReasonHandleUntrusted)
			}
			if n := tb.te.Emulator.Deliveries(id); n != 1 {
				t.Errorf("%s's job %s delivered %d times", from, id, n)
			}
		}
		if from != brandAddr && tb.te.Emulator.AccountStats(from).Calls[gmailfake.MethodList] == listsBefore[from] {
			t.Errorf("no search reached %s, whose jobs were resolved: a query went to another mailbox", from)
		}
	}
	if tb.mailbox("support").HandleUntrusted || tb.mailbox("billing").HandleUntrusted {
		t.Errorf("a rewrite in brand marked another mailbox untrusted: support %+v, billing %+v", tb.mailbox("support"), tb.mailbox("billing"))
	}
	// Restart with the same policy: trust comes back from the log.
	tb.te.Restart()
	tb.build()
	if !tb.mailbox("brand").HandleUntrusted || tb.mailbox("support").HandleUntrusted {
		t.Error("after a restart the mailboxes' trust is not what the log recorded")
	}
	res := tb.mustSendOn(ambiguous, brandAddr, "", relay.SendOptions{})
	tb.te.Clock.Advance(grace + time.Second)
	if _, err := tb.sw.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if j := tb.te.Job(res.Job.MessageID); j.State != gmailrelay.StateReview {
		t.Errorf("after restart, brand's ambiguous job is %s, want review (still untrusted)", j.State)
	}
}

func TestEmulatorGmailPauseInOneMailboxDoesNotSlowTheOthers(t *testing.T) {
	// Gmail's daily refusal (per account) pauses billing for most of a
	// day; its retry time is only in the message text.
	const gmailDaily = 8
	tb := newThreeBoxes(t, gmailfake.Options{DailySendLimit: gmailDaily}, 1000)
	ctx := context.Background()
	for range gmailDaily {
		tb.mustSend(billingAddr, "", relay.SendOptions{})
	}
	res := tb.mustSend(billingAddr, "", relay.SendOptions{})
	if res.Job.LastReason != gmailrelay.ReasonRateLimited {
		t.Fatalf("billing's send past Gmail's daily limit: %s %s, want failed rate_limited", res.Job.State, res.Job.LastReason)
	}
	billing, err := tb.te.Service.MailboxOf("billing")
	if err != nil {
		t.Fatal(err)
	}
	if p := billing.Quota().PausedFor(); p < time.Hour {
		t.Fatalf("billing paused for %s after Gmail's daily refusal, want until Gmail's retry time (hours)", p)
	}
	billingCalls := tb.te.Emulator.AccountStats(billingAddr).Calls
	if _, err := tb.send(billingAddr, "", relay.SendOptions{}); !relay.IsRateLimited(err) {
		t.Errorf("billing's send during its pause: %v, want a rate-limited refusal", err)
	}
	if q := tb.mustSend(billingAddr, "", relay.SendOptions{Queue: true}); q.Job.State != gmailrelay.StateQueued {
		t.Errorf("billing's queueing send during its pause: %s, want queued", q.Job.State)
	}
	// The other two send at once (billing's queue holds back only
	// billing) and their ambiguous sends are resolved in the next pass.
	var others []string
	for i := range 10 {
		from := supportAddr
		if i%2 == 1 {
			from = brandAddr
		}
		sendCtx, o := context.Background(), relay.SendOptions{Queue: true}
		if i < 4 {
			sendCtx, o = ambiguous, relay.SendOptions{}
		}
		r := tb.mustSendOn(sendCtx, from, "", o)
		if want := gmailrelay.StateSent; i >= 4 && r.Job.State != want {
			t.Errorf("send from %s while billing is paused: %s, want %s at once", from, r.Job.State, want)
		}
		others = append(others, r.Job.MessageID)
	}
	tb.te.Clock.Advance(grace + time.Second)
	pass, err := tb.sw.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range others {
		if j := tb.te.Job(id); j.State != gmailrelay.StateSent {
			t.Errorf("%s (mailbox %s) is %s after one pass, want sent: billing's pause held it back", id, j.Mailbox, j.State)
		}
		if n := tb.te.Emulator.Deliveries(id); n != 1 {
			t.Errorf("%s delivered %d times", id, n)
		}
	}
	if pass.Deferred != gmailDaily+1 {
		t.Errorf("pass deferred %d jobs, want %d (billing's verifies and retry, waiting for Gmail)", pass.Deferred, gmailDaily+1)
	}
	if d := tb.te.Emulator.AccountStats(billingAddr).Calls; d[gmailfake.MethodSend] != billingCalls[gmailfake.MethodSend] ||
		d[gmailfake.MethodList] != billingCalls[gmailfake.MethodList] || d[gmailfake.MethodGet] != billingCalls[gmailfake.MethodGet] {
		t.Errorf("Gmail calls for billing during its pause: %v → %v, want none", billingCalls, d)
	}
	if ob, err := tb.box.RunOnce(ctx); err != nil || ob.Left != 1 || ob.Next < time.Hour {
		t.Errorf("outbox pass: %+v, %v; want billing's job left, waiting for its pause", ob, err)
	}
}

func TestEmulatorSpentDailyBudgetInOneMailboxDoesNotSlowTheOthers(t *testing.T) {
	tb := newThreeBoxes(t, gmailfake.Options{}, 2)
	ctx := context.Background()
	for range 2 {
		tb.mustSend(billingAddr, "", relay.SendOptions{})
	}
	held := tb.mustSend(billingAddr, "", relay.SendOptions{Queue: true})
	if held.Job.State != gmailrelay.StateQueued {
		t.Fatalf("billing's third send with a daily budget of 2: %s, want queued", held.Job.State)
	}
	for _, from := range []string{supportAddr, brandAddr, supportAddr, brandAddr} {
		if r := tb.mustSend(from, "", relay.SendOptions{Queue: true}); r.Job.State != gmailrelay.StateSent {
			t.Errorf("send from %s with billing's budget spent: %s, want sent at once", from, r.Job.State)
		}
	}
	// A support job due later, queued behind nothing of its own.
	p, err := relay.Prepare(relay.SendRequest{Key: "cus_x:reminder:1", From: supportAddr, To: relay.AddressList{"customer@example.net"},
		Subject: "Reminder", Text: "Soon."}, "", "relay.test", tb.te.Clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	p.SendAt = tb.te.Clock.Now().Add(time.Minute)
	later, err := tb.te.Service.Send(ctx, p, relay.SendOptions{Queue: true})
	if err != nil || later.Job.State != gmailrelay.StateQueued {
		t.Fatalf("support's send_at job: %+v, %v", later.Job, err)
	}
	tb.te.Clock.Advance(time.Minute)
	ob, err := tb.box.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if j := tb.te.Job(later.Job.MessageID); j.State != gmailrelay.StateSent || ob.Sent != 1 {
		t.Errorf("support's due job is %s after an outbox pass (%+v), want sent: billing's queue held it back", j.State, ob)
	}
	if j := tb.te.Job(held.Job.MessageID); j.State != gmailrelay.StateQueued || tb.te.Emulator.Deliveries(j.MessageID) != 0 {
		t.Errorf("billing's held job is %s, want still queued and never sent", j.State)
	}
	// Restart with the same policy: what billing spent today comes back.
	tb.te.Restart()
	tb.build()
	billing, err := tb.te.Service.MailboxOf("billing")
	if err != nil {
		t.Fatal(err)
	}
	if left := billing.Budget().Left(); left != 0 {
		t.Errorf("billing's budget left after a restart = %d, want 0 (counted from the log)", left)
	}
	support, _ := tb.te.Service.MailboxOf("support")
	if left := support.Budget().Left(); left != 100-3 {
		t.Errorf("support's budget left after a restart = %d, want 97", left)
	}
}

func hasReview(lines []gmailrelay.Line, reason gmailrelay.Reason) bool {
	for _, l := range lines {
		if l.Kind == gmailrelay.KindReview && l.Reason == reason {
			return true
		}
	}
	return false
}

// A mailbox paused for hours with more due jobs than a pass takes must not
// hold the other mailboxes' jobs out of every pass until it resumes.
func TestEmulatorPausedMailboxDoesNotCrowdOutTheOthersDueJobs(t *testing.T) {
	const gmailDaily = 8
	tb := newThreeBoxes(t, gmailfake.Options{DailySendLimit: gmailDaily}, 1000)
	ctx := context.Background()
	for range gmailDaily + 1 { // the last one meets Gmail's daily refusal: billing pauses for hours
		tb.mustSend(billingAddr, "", relay.SendOptions{})
	}
	tb.te.Clock.Advance(30 * time.Second)
	res := tb.mustSendOn(ambiguous, supportAddr, "", relay.SendOptions{}) // due after billing's nine
	cfg := tb.te.SweeperConfig()
	cfg.Interval, cfg.Limit = time.Hour, 5
	sw := sweeper.New(cfg)
	tb.te.Clock.Advance(grace + time.Second)
	for range 3 {
		if _, err := sw.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if j := tb.te.Job(res.Job.MessageID); j.State != gmailrelay.StateSent {
		t.Errorf("support's ambiguous job is %s after three passes of 5, want sent: billing's paused jobs took every slot", j.State)
	}
	if n := tb.te.Emulator.Deliveries(res.Job.MessageID); n != 1 {
		t.Errorf("support's job delivered %d times", n)
	}
}
