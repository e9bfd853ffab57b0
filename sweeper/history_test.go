package sweeper_test

import (
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/policy"
	"github.com/gmailrelay/gmailrelay/relay"
)

// historyPolicy is the built-in default channel (retry, grace 3m, checks
// 2), with history_settle and witness as given.
func historyPolicy(settle time.Duration, witness policy.Witness) *policy.Policy {
	p := policy.Default()
	p.MsgIDDomain, p.VerifyHandle = "relay.test", policy.VerifyNever
	ch := p.Channels[policy.DefaultChannel]
	ch.HistorySettle, ch.Witness = settle, witness
	p.Channels[policy.DefaultChannel] = ch
	return p
}

// passEvery runs a pass every step of the clock until done says so or
// limit has passed, and returns how long it took.
func (h *harness) passEvery(step, limit time.Duration, done func() bool) time.Duration {
	h.t.Helper()
	start := h.clock.Now()
	for !done() {
		if h.clock.Now().Sub(start) >= limit {
			break
		}
		h.clock.Advance(step)
		h.sweep()
	}
	return h.clock.Now().Sub(start)
}

// effectSource is the Source of job id's one effect line.
func (h *harness) effectSource(id string) string {
	h.t.Helper()
	effects := h.lines(id, gmailrelay.KindEffect)
	if len(effects) != 1 {
		h.t.Fatalf("%s: %d effect lines, want 1", id, len(effects))
	}
	return effects[0].Source
}

// wantSentByHistory runs a pass every 5 s for up to 30 s until job id is
// sent, then checks it was sent once by its first attempt, delivered once,
// its one effect line from the history (why says how it was matched).
func (h *harness) wantSentByHistory(id, why string) {
	h.t.Helper()
	h.passEvery(5*time.Second, 30*time.Second, func() bool { return h.job(id).State == gmailrelay.StateSent })
	h.wantJob(id, gmailrelay.StateSent, 1, 1, 1)
	if src := h.effectSource(id); src != gmailrelay.SourceHistory {
		h.t.Errorf("effect source %q, want history%s", src, why)
	}
}

// Emulator result. The search index lags (p50 60 s, p99 5 min) and the
// channel is the default one (grace 3m, checks 2): without the history a
// dropped answer stays unknown for three minutes at least. With the
// history tail, ten sends whose answer was dropped (Gmail stored them and
// answered 500) are all sent within 30 s, resolved by the history (effect
// line, source history), each delivered once; the tail spends at most 10
// quota units per ambiguous job.
func TestEmulatorHistoryResolvesDroppedAnswersInSeconds(t *testing.T) {
	h := newHarness(t, setup{history: true, policy: historyPolicy(0, ""),
		lagDist: gmailfake.LagDistribution{P50: time.Minute, P99: 5 * time.Minute}})
	h.sweep() // the relay's first pass: the mailbox's cursor starts
	var ids []string
	for range 10 {
		ids = append(ids, h.sendAmbiguous(retryChannel))
	}
	units := h.srv.Stats().QuotaUnits
	allSent := func() bool {
		for _, id := range ids {
			if h.job(id).State != gmailrelay.StateSent {
				return false
			}
		}
		return true
	}
	took := h.passEvery(5*time.Second, time.Minute, allSent)
	if !allSent() || took > 30*time.Second {
		t.Fatalf("after %s: not all ten sent (want within 30 s)", took)
	}
	for _, id := range ids {
		h.wantJob(id, gmailrelay.StateSent, 1, 1, 1)
		if src := h.effectSource(id); src != gmailrelay.SourceHistory {
			t.Errorf("%s: effect source %q, want history", id, src)
		}
	}
	spent := h.srv.Stats().QuotaUnits - units
	t.Logf("emulator result: ten dropped answers sent after %s, %d quota units (%.1f a job)", took, spent, float64(spent)/10)
	if spent > 10*10 {
		t.Errorf("emulator result: the tail spent %d quota units on 10 ambiguous jobs, want at most 100", spent)
	}
}

// Emulator result. With witness: history and history_settle 5s, a send
// Gmail never stored (it answered 500 without storing) is resent once the
// history is complete 5 s past the attempt, without waiting for grace and
// searches, and delivered once, within 60 s. The miss is a search line
// with witness history.
func TestEmulatorHistoryMissResendsWithWitnessHistory(t *testing.T) {
	h := newHarness(t, setup{history: true, policy: historyPolicy(5*time.Second, policy.WitnessHistory)})
	h.sweep()
	id := h.sendLost(retryChannel)
	took := h.passEvery(5*time.Second, 2*time.Minute, func() bool { return h.job(id).State == gmailrelay.StateSent })
	if took > time.Minute {
		t.Fatalf("after %s: %s is %s, want sent within 60 s", took, id, h.job(id).State)
	}
	h.wantJob(id, gmailrelay.StateSent, 2, 1, 1)
	searches := h.lines(id, gmailrelay.KindSearch)
	if len(searches) != 1 || searches[0].Witness != "history" || searches[0].Hits != 0 {
		t.Errorf("search lines %+v, want one history miss", searches)
	}
	if src := h.effectSource(id); src != gmailrelay.SourceResponse {
		t.Errorf("effect source %q, want response (the resend's answer)", src)
	}
}

// Without witness: history, a history miss decides nothing on a retry
// channel: the lost send stays unknown until the search path's witnessed
// misses, after grace.
func TestEmulatorHistoryMissAloneDoesNotResend(t *testing.T) {
	h := newHarness(t, setup{history: true, policy: historyPolicy(5*time.Second, policy.WitnessSearch)})
	h.sweep()
	id := h.sendLost(retryChannel)
	h.passEvery(5*time.Second, time.Minute, func() bool { return false })
	h.wantJob(id, gmailrelay.StateUnknown, 1, 0, 0)
}

// Emulator result. A cursor Gmail no longer keeps (404: its records are
// past the history retention) falls back: the unknown job is still
// resolved, by the search path (effect source search), sent once; the
// fallback is counted in the mailbox's record and a new cursor starts.
func TestEmulatorHistoryExpiredCursorFallsBackToSearch(t *testing.T) {
	h := newHarness(t, setup{history: true, policy: historyPolicy(0, ""), historyKeep: time.Hour})
	h.sweep()
	before, err := h.log.Mailbox(h.ctx, policy.DefaultMailbox)
	if err != nil || before.History.ID == 0 {
		t.Fatalf("no cursor after the first pass: %+v, %v", before.History, err)
	}
	id := h.sendAmbiguous(retryChannel)
	h.clock.Advance(2 * time.Hour) // the send's record is past retention
	h.sweep()
	after, err := h.log.Mailbox(h.ctx, policy.DefaultMailbox)
	if err != nil {
		t.Fatal(err)
	}
	if after.History.Fallbacks != 1 || after.History.ID == before.History.ID || !after.History.Since.Equal(h.clock.Now()) {
		t.Errorf("cursor after the 404: %+v (before %+v); want one fallback and a new cursor from now", after.History, before.History)
	}
	h.passEvery(time.Minute, 10*time.Minute, func() bool { return h.job(id).State == gmailrelay.StateSent })
	h.wantJob(id, gmailrelay.StateSent, 1, 1, 1)
	if src := h.effectSource(id); src != gmailrelay.SourceSearch {
		t.Errorf("effect source %q, want search (the fallback)", src)
	}
}

// Emulator result. Gmail replaces the Message-ID of every send (the
// emulator's rewrite always): a dropped answer's copy carries another
// Message-ID, but the job header the relay wrote still names the job, so
// the history resolves it (source history), one delivery.
func TestEmulatorHistoryMatchesARewrittenCopyByJobHeader(t *testing.T) {
	h := newHarness(t, setup{history: true, policy: historyPolicy(0, ""),
		rewrite: gmailfake.RewritePolicy{Mode: gmailfake.RewriteAlways}})
	h.sweep()
	id := h.sendAmbiguous(retryChannel)
	h.wantSentByHistory(id, " (matched by its job header)")
}

// Emulator result. 300 healthy sends are verified through the history: each
// one's own copy, with the history complete history_settle past it and no
// second copy, makes the job verified without a verify search; over the
// run the sweeper spends at most 2 quota units a send. A send Gmail stored
// twice (the emulator's duplicate fault) is seen by its second copy:
// review duplicate_delivery.
func TestEmulatorHistoryVerifiesHealthySendsAndSeesASecondCopy(t *testing.T) {
	pol := historyPolicy(0, "")
	pol.VerifyHandle = policy.VerifyNever
	h := newHarness(t, setup{history: true, policy: pol})
	h.sweep()
	units := h.srv.Stats().QuotaUnits
	var ids []string
	const healthy = 300 // a burst; the tail's listings are shared by every send
	for i := range healthy {
		if i > 0 && i%100 == 0 {
			h.clock.Advance(time.Minute) // Gmail's per-minute quota: 150 sends
			h.sweep()
		}
		id, res := h.send(retryChannel)
		h.wantState(id, res.Job, gmailrelay.StateSent)
		ids = append(ids, id)
	}
	h.emulatorFault(gmailfake.Fault{Method: gmailfake.MethodSend, Action: gmailfake.ActionDuplicate})
	twice, res := h.send(retryChannel)
	h.wantState(twice, res.Job, gmailrelay.StateSent)
	h.passEvery(5*time.Second, 30*time.Minute, func() bool { return false })
	spent := h.srv.Stats().QuotaUnits - units - 100*(healthy+1) // all but the sends
	for _, id := range ids {
		j := h.job(id)
		if j.State != gmailrelay.StateSent || !j.Verified {
			t.Fatalf("%s: %s, verified %v; want sent and verified", id, j.State, j.Verified)
		}
		for _, l := range h.lines(id, gmailrelay.KindSearch) {
			if l.Witness != "history" {
				t.Fatalf("%s: a search line %+v besides the history's", id, l)
			}
		}
	}
	if j := h.job(twice); j.State != gmailrelay.StateReview {
		t.Errorf("stored twice: %s, want review", j.State)
	}
	if r := h.lines(twice, gmailrelay.KindReview); len(r) != 1 || r[0].Reason != gmailrelay.ReasonDuplicateDelivery {
		t.Errorf("stored twice: review lines %+v, want duplicate_delivery", r)
	}
	per := float64(spent) / (healthy + 1)
	t.Logf("emulator result: %d healthy sends and one stored twice, %d quota units beyond the sends over 30 min (%.2f a send)", healthy, spent, per)
	if per > 2 {
		t.Errorf("%.2f quota units a healthy send, want at most 2", per)
	}
}

// Emulator result. A raw message (message/rfc822) gets its job header on
// the way to Gmail: with every Message-ID rewritten and the answer lost,
// the history still matches the copy to its job (source history).
func TestEmulatorHistoryMatchesARewrittenRawSendByJobHeader(t *testing.T) {
	h := newHarness(t, setup{history: true, policy: historyPolicy(0, ""),
		rewrite: gmailfake.RewritePolicy{Mode: gmailfake.RewriteAlways}})
	h.sweep()
	raw := "From: " + gmailfake.DefaultAccount + "\r\nTo: customer@example.net\r\nSubject: Raw\r\n\r\nA raw message.\r\n"
	p, err := relay.PrepareRaw([]byte(raw), "raw-1", retryChannel, "relay.test")
	if err != nil {
		t.Fatal(err)
	}
	h.emulatorFault(gmailfake.Fault{Method: gmailfake.MethodSend, Action: gmailfake.ActionAcceptThenError, Status: 500})
	res, err := h.svc.Send(h.ctx, p, relay.SendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h.wantState(p.MessageID, res.Job, gmailrelay.StateUnknown)
	h.wantSentByHistory(p.MessageID, " (matched by the job header added on the way)")
}

// Emulator result. StartCursors starts each mailbox's cursor before any
// send (serve calls it before serving): a dropped answer of the very first
// send is then covered by the history, found and sent.
func TestEmulatorStartCursorsCoversTheFirstSend(t *testing.T) {
	h := newHarness(t, setup{history: true, policy: historyPolicy(0, "")})
	if err := h.sw.StartCursors(h.ctx); err != nil {
		t.Fatal(err)
	}
	mb, err := h.log.Mailbox(h.ctx, policy.DefaultMailbox)
	if err != nil || mb.History.ID == 0 {
		t.Fatalf("no cursor after StartCursors: %+v, %v", mb.History, err)
	}
	id := h.sendAmbiguous(retryChannel)
	h.wantSentByHistory(id, "")
}

// Emulator result. A copy whose Message-ID Gmail replaced, matched by its
// job header, also marks the mailbox's handle untrusted: the search path
// then never counts a miss there.
func TestEmulatorHistoryMarksARewrittenHandle(t *testing.T) {
	h := newHarness(t, setup{history: true, policy: historyPolicy(0, ""),
		rewrite: gmailfake.RewritePolicy{Mode: gmailfake.RewriteAlways}})
	h.sweep()
	id := h.sendAmbiguous(retryChannel)
	h.passEvery(5*time.Second, 30*time.Second, func() bool { return h.job(id).State == gmailrelay.StateSent })
	mb, err := h.log.Mailbox(h.ctx, policy.DefaultMailbox)
	if err != nil || !mb.HandleUntrusted || mb.Rewrites != 1 {
		t.Errorf("mailbox after a rewritten copy: %+v, %v; want untrusted, 1 rewrite", mb, err)
	}
}

// Emulator result. With the history tail on, a search path's resend of an
// attempt the history covers waits until the history is complete past it:
// while Gmail's history cannot be read, the lost send stays unknown after
// every search missed; once it can, the resend goes, delivered once.
func TestEmulatorSearchResendWaitsForTheHistory(t *testing.T) {
	h := newHarness(t, setup{history: true, policy: historyPolicy(5*time.Second, policy.WitnessSearch)})
	h.sweep()
	id := h.sendLost(retryChannel)
	h.emulatorFault(gmailfake.Fault{Method: gmailfake.MethodHistory, Action: gmailfake.ActionError, Status: 500, Count: 1000})
	h.passEvery(time.Minute, 10*time.Minute, func() bool { return false })
	if j := h.job(id); j.State != gmailrelay.StateUnknown || j.Attempts != 1 || len(h.lines(id, gmailrelay.KindSearch)) < 2 {
		t.Fatalf("while the history cannot be read: %s after %d attempts and %d searches; want unknown, 1 attempt, the searches made",
			j.State, j.Attempts, len(h.lines(id, gmailrelay.KindSearch)))
	}
	h.srv.ClearFaults()
	h.passEvery(time.Minute, 10*time.Minute, func() bool { return h.job(id).State == gmailrelay.StateSent })
	h.wantJob(id, gmailrelay.StateSent, 2, 1, 1)
}
