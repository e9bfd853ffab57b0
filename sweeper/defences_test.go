package sweeper_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/faultmodes"
	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/relay"
	"github.com/gmailrelay/gmailrelay/sweeper"
)

// The sweeper's defences against Gmail as it really is
// (docs/guarantees.md#defences). Every test checks the acceptance log and the emulator's ground truth
// (deliveries, not copies).

// (c) A user trashes the Sent copy before the sweep: the search still
// finds it (includeSpamTrash=true), so the job is sent, not resent.
func TestTrashedSentCopyStillProvesTheSend(t *testing.T) {
	h := newHarness(t, setup{})
	id := h.sendAmbiguous(retryChannel)
	msgs := h.srv.Messages(id)
	if len(msgs) != 1 {
		t.Fatalf("emulator holds %d copies, want 1", len(msgs))
	}
	if err := h.srv.Trash(msgs[0].ID); err != nil {
		t.Fatalf("trash: %v", err)
	}
	h.sweeps(4)
	h.wantJob(id, gmailrelay.StateSent, 1, 1, 1)
	h.wantDeliveries(id, 1, "not resent")
	if calls := h.srv.Stats().Calls[gmailfake.MethodSend]; calls != 1 {
		t.Fatalf("emulator result: %d send calls, want 1", calls)
	}
}

// The verify pass of a sent job whose copy was trashed also finds it.
func TestVerifyFindsTrashedCopy(t *testing.T) {
	h := newHarness(t, setup{})
	id := h.sentCopyRemoved(h.srv.Trash)
	if m := h.srv.Messages(id); len(m) != 1 || !m[0].Trashed || m[0].Deleted {
		t.Fatalf("emulator copies %+v, want one trashed copy", m)
	}
	wantResult(t, h.sweep(), sweeper.Result{Checked: 1, Verified: 1})
	if j := h.wantJob(id, gmailrelay.StateSent, 1, 1, 1); !confirmedOnce(j) {
		t.Fatal("trashed sent copy not verified")
	}
	h.lateLookDone(id)
}

// A sent job whose copy the user deleted for good: the verify pass's
// messages.get answers 404 → a handle line "deleted", the mailbox stays
// trusted, the job stays sent and is not checked again.
func TestVerifyHandleDeleted(t *testing.T) {
	h := newHarness(t, setup{})
	id := h.sentCopyRemoved(h.srv.Delete)
	wantResult(t, h.sweep(), sweeper.Result{Checked: 1})
	j := h.wantJob(id, gmailrelay.StateSent, 1, 1, 1)
	if !j.NextCheckAt.IsZero() {
		t.Errorf("next check %v, want none", j.NextCheckAt)
	}
	hl := h.lines(id, gmailrelay.KindHandle)
	if len(hl) != 1 || hl[0].Reason != sweeper.ReasonHandleDeleted {
		t.Fatalf("handle lines %+v, want one %q", hl, sweeper.ReasonHandleDeleted)
	}
	mb, err := h.log.Mailbox(h.ctx, j.Mailbox)
	if err != nil || mb.HandleUntrusted {
		t.Fatalf("mailbox %+v (%v): a deleted message must not make it untrusted", mb, err)
	}
	h.wantDeliveries(id, 1, "")
}

// (b) Gmail rewrites 5 % of Message-IDs over 500 sends, 10 % of them with
// their response dropped: no sent message is resent, the mailbox is marked
// untrusted within one verify pass (the first sweep after grace), and its
// ambiguous jobs whose id Gmail rewrote go to review.
func TestRewriteFractionNeverResends(t *testing.T) {
	if testing.Short() {
		t.Skip("500 sends")
	}
	h := newHarness(t, setup{batchSize: 20, limit: 1000, emulatorQuota: 1 << 30})
	h.srv.SetRewrite(gmailfake.RewritePolicy{Mode: gmailfake.RewriteFraction, Fraction: 0.05})
	p := 0.1
	if _, err := h.faults.Add(faultmodes.Spec{Mode: faultmodes.ForwardThenDropResponse, Probability: &p}); err != nil {
		t.Fatalf("fault rule: %v", err)
	}
	var ids []string
	for range 500 {
		id, _ := h.send(retryChannel)
		ids = append(ids, id)
	}
	h.clock.Advance(grace)
	h.sweep() // the first verify pass
	mb, err := h.log.Mailbox(h.ctx, "default")
	if err != nil {
		t.Fatalf("mailbox: %v", err)
	}
	rewrittenSent := 0
	for _, id := range ids {
		for _, l := range h.lines(id, gmailrelay.KindHandle) {
			if l.Reason == sweeper.ReasonHandleRewritten {
				rewrittenSent++
			}
		}
	}
	if rewrittenSent > 0 && !mb.HandleUntrusted {
		t.Fatalf("%d rewritten sends found, but the mailbox is still trusted after one verify pass", rewrittenSent)
	}
	h.sweeps(6)
	var resentSent, rewritten, ambiguousRewritten, reviewed, lost int
	original := map[string]bool{} // client Message-IDs Gmail replaced
	for _, m := range h.srv.Lookup("", "").Messages {
		if m.OriginalMessageID != "" {
			original[m.OriginalMessageID] = true
		}
	}
	for _, id := range ids {
		truth := h.srv.Lookup("", id)
		j := h.job(id)
		isRewritten := original[id]
		if isRewritten {
			rewritten++
		}
		wasAmbiguous := len(h.lines(id, gmailrelay.KindAmbiguous)) > 0
		if truth.Deliveries > 1 {
			resentSent++
			t.Errorf("emulator result: %s delivered %d times (state %s, rewritten %v)", id, truth.Deliveries, j.State, isRewritten)
		}
		if truth.Deliveries == 0 {
			lost++
		}
		if isRewritten && wasAmbiguous {
			ambiguousRewritten++
			if j.State != gmailrelay.StateReview {
				t.Errorf("ambiguous job %s with a rewritten id: state %s, want review", id, j.State)
			}
		}
		if j.State == gmailrelay.StateReview {
			reviewed++
		}
		if j.State != gmailrelay.StateSent && j.State != gmailrelay.StateReview {
			t.Errorf("job %s stuck in %s", id, j.State)
		}
	}
	t.Logf("emulator results: 500 sends, %d ids rewritten (%d sent jobs caught by the verify pass, %d ambiguous → review), "+
		"%d jobs in review, %d delivered more than once, %d never delivered", rewritten, rewrittenSent, ambiguousRewritten, reviewed, resentSent, lost)
	if rewritten == 0 || rewrittenSent == 0 {
		t.Fatalf("the emulator rewrote %d ids (%d found by verify): the test proves nothing", rewritten, rewrittenSent)
	}
	if lost != 0 {
		t.Errorf("emulator result: %d jobs never delivered", lost)
	}
}

// (f) Gmail folds a resend with the same Message-ID into the stored copy
// (--sent-dedupe) and answers 200 with that copy's id: the mailbox shows
// one copy, the recipients got two. The resend's effect line is the job's
// second: the same transaction hands it to review with reason
// duplicate_delivery, once, and a human's mark-sent closes it.
func TestSentDedupeForcedResendIsDuplicateDelivery(t *testing.T) {
	h := newHarness(t, setup{sentDedupe: true})
	id, res := h.send(retryChannel)
	h.wantState(id, res.Job, gmailrelay.StateSent)
	// A forced resend: the job is handed to a human, who asks for a retry.
	if _, _, err := h.log.Mutate(h.ctx, id, func(cur *gmailrelay.Job) (gmailrelay.Change, error) {
		n := *cur
		n.State, n.NextCheckAt = gmailrelay.StateReview, time.Time{}
		return gmailrelay.Change{Job: &n, Lines: []gmailrelay.Line{{Kind: gmailrelay.KindReview, Attempt: n.Attempts,
			State: gmailrelay.StateReview, Reason: gmailrelay.ReasonDuplicate, Note: "test: forced"}}}, nil
	}); err != nil {
		t.Fatalf("to review: %v", err)
	}
	res2, err := h.svc.Attempt(h.ctx, relay.AttemptRequest{ID: id, From: []gmailrelay.State{gmailrelay.StateReview}, Seen: relay.AnyAttempts, Reason: gmailrelay.ReasonResolvedRetry, Priority: relay.Foreground})
	if err != nil {
		t.Fatalf("forced resend: %v", err)
	}
	h.wantState(id, res2.Job, gmailrelay.StateReview)
	// Sent-dedupe folded the resend into the one stored copy: assert both.
	h.wantJobCopies(id, gmailrelay.StateReview, 2, 2, 2, 1) // the folded resend was delivered
	if got := reviewReason(h, id); got != sweeper.ReasonDuplicateDelivery {
		t.Fatalf("review reason %q, want %q", got, sweeper.ReasonDuplicateDelivery)
	}
	h.clock.Advance(grace)
	wantResult(t, h.sweep(), sweeper.Result{})
	// The human marks it sent: no second review for the same duplicate.
	if _, err := h.svc.Resolve(h.ctx, relay.ResolveRequest{ID: id, Action: relay.ActionMarkSent, Note: "told the customer", Actor: "ops@example.com", Seen: relay.AnyAttempts}); err != nil {
		t.Fatalf("mark sent: %v", err)
	}
	h.clock.Advance(grace)
	h.sweep()
	if j := h.job(id); j.State != gmailrelay.StateSent {
		t.Fatalf("after the human's mark-sent: state %s, want sent", j.State)
	}
}

// A sent job with two own effect lines (written by a version that left it
// sent) is handed to review by the verify pass, reason duplicate_delivery.
func TestSentJobWithTwoOwnEffectsGoesToReview(t *testing.T) {
	h := newHarness(t, setup{})
	id, _ := h.send(retryChannel)
	if _, _, err := h.log.Mutate(h.ctx, id, func(cur *gmailrelay.Job) (gmailrelay.Change, error) {
		n := *cur
		n.Effects++
		return gmailrelay.Change{Job: &n, Lines: []gmailrelay.Line{{Kind: gmailrelay.KindEffect, Attempt: n.Attempts,
			Source: gmailrelay.SourceResponse, GmailID: n.GmailID}}}, nil
	}); err != nil {
		t.Fatal(err)
	}
	h.clock.Advance(grace)
	wantResult(t, h.sweep(), sweeper.Result{Duplicates: 1, Reviewed: 1})
	if got := reviewReason(h, id); got != sweeper.ReasonDuplicateDelivery {
		t.Fatalf("review reason %q, want %q", got, sweeper.ReasonDuplicateDelivery)
	}
}

// Found by the realism soak (e2e.TestRealismSoak): once the verify pass had
// found Gmail rewriting ids in a mailbox, it stopped verifying that
// mailbox's sent jobs, so a send Gmail stored twice stayed sent, delivered
// twice outside review. A miss proves nothing there, but two hits still
// prove a duplicate: every sent job is still verified.
func TestUntrustedMailboxStillVerifiesSentJobs(t *testing.T) {
	h := newHarness(t, setup{})
	h.srv.SetRewrite(gmailfake.RewritePolicy{Mode: gmailfake.RewriteAlways})
	rewritten, _ := h.send(retryChannel)
	h.srv.SetRewrite(gmailfake.RewritePolicy{})
	h.clock.Advance(grace)
	h.sweep()
	j := h.job(rewritten)
	if mb, err := h.log.Mailbox(h.ctx, j.Mailbox); err != nil || !mb.HandleUntrusted {
		t.Fatalf("mailbox %+v (%v): want untrusted after the rewritten send's verify pass", mb, err)
	}

	h.emulatorFault(gmailfake.Fault{Method: gmailfake.MethodSend, Action: gmailfake.ActionDuplicate})
	twice, res := h.send(retryChannel)
	h.wantState(twice, res.Job, gmailrelay.StateSent)
	h.clock.Advance(grace)
	wantResult(t, h.sweep(), sweeper.Result{Checked: 1, Duplicates: 1, Reviewed: 1})
	h.wantJob(twice, gmailrelay.StateReview, 1, 1, 2)
	h.wantDeliveries(twice, 2, "the duplicate the review is about")
	if rl := h.lines(twice, gmailrelay.KindReview); len(rl) != 1 || rl[0].Reason != sweeper.ReasonDuplicate {
		t.Fatalf("review lines %+v, want one %q", rl, sweeper.ReasonDuplicate)
	}
}

// Found by the realism soak too: a send Gmail stored twice and whose id it
// rewrote (two copies under Gmail's Message-ID, none under the relay's)
// stayed sent: the verify search by the relay's id finds nothing, and the
// handle check only said "rewritten". The verify pass now also searches
// the id Gmail gave, and two copies there are a duplicate in review.
func TestRewrittenDuplicateGoesToReview(t *testing.T) {
	h := newHarness(t, setup{})
	h.srv.SetRewrite(gmailfake.RewritePolicy{Mode: gmailfake.RewriteAlways})
	h.emulatorFault(gmailfake.Fault{Method: gmailfake.MethodSend, Action: gmailfake.ActionDuplicate})
	id, res := h.send(retryChannel)
	h.wantState(id, res.Job, gmailrelay.StateSent)
	h.clock.Advance(grace)
	wantResult(t, h.sweep(), sweeper.Result{Checked: 1, Duplicates: 1, Reviewed: 1})
	// Gmail rewrote the id: no copy carries the relay's id, yet two were delivered.
	h.wantJobCopies(id, gmailrelay.StateReview, 1, 1, 2, 0)
	if hl := h.lines(id, gmailrelay.KindHandle); len(hl) != 1 || hl[0].Reason != sweeper.ReasonHandleRewritten {
		t.Fatalf("handle lines %+v, want one %q", hl, sweeper.ReasonHandleRewritten)
	}
	if rl := h.lines(id, gmailrelay.KindReview); len(rl) != 1 || rl[0].Reason != sweeper.ReasonDuplicate {
		t.Fatalf("review lines %+v, want one %q", rl, sweeper.ReasonDuplicate)
	}
	mb, err := h.log.Mailbox(h.ctx, h.job(id).Mailbox)
	if err != nil || !mb.HandleUntrusted {
		t.Fatalf("mailbox %+v (%v): want untrusted", mb, err)
	}
}

// A rewritten send Gmail stored once stays sent after the extra search.
func TestRewrittenSingleCopyStaysSent(t *testing.T) {
	h := newHarness(t, setup{})
	h.srv.SetRewrite(gmailfake.RewritePolicy{Mode: gmailfake.RewriteAlways})
	id, _ := h.send(retryChannel)
	h.clock.Advance(grace)
	wantResult(t, h.sweep(), sweeper.Result{Checked: 1})
	// Gmail rewrote the id: no copy carries the relay's id, yet one was delivered.
	h.wantJobCopies(id, gmailrelay.StateSent, 1, 1, 1, 0)
}

// Gmail stored one send twice (the emulator's duplicate fault) and its
// index shows neither copy for longer than the verify pass's two looks
// (lag 3 min, grace 1 min). The handle check read the message back under
// our Message-ID: the index is behind, so the verify pass keeps looking
// (at most lateLookGraces looks) instead of giving up, and sees both
// copies: review duplicate. Were the second miss to end the verify pass,
// the job would stay sent with two deliveries (the realism soak's
// gmail_stored_one_send_twice_unseen).
func TestVerifyKeepsLookingWhileTheIndexIsBehind(t *testing.T) {
	h := newHarness(t, setup{indexLag: 3 * time.Minute})
	h.emulatorFault(gmailfake.Fault{Method: gmailfake.MethodSend, Action: gmailfake.ActionDuplicate})
	id, res := h.send(retryChannel)
	h.wantState(id, res.Job, gmailrelay.StateSent)
	for range 4 {
		h.clock.Advance(grace)
		h.sweep()
	}
	if d := h.srv.Deliveries(id); d != 2 {
		t.Fatalf("emulator result: %d deliveries, want 2 (Gmail stored the send twice)", d)
	}
	if got := h.job(id).State; got != gmailrelay.StateReview {
		t.Fatalf("state %s, want review (two copies once the index caught up)", got)
	}
	if r := h.lines(id, gmailrelay.KindReview); len(r) != 1 || r[0].Reason != sweeper.ReasonDuplicate {
		t.Fatalf("review lines %+v, want one with reason %s", r, sweeper.ReasonDuplicate)
	}
}

// The index never shows a sent message that Gmail still holds under our
// Message-ID: the verify pass looks a bounded number of times and then
// gives up (the job stays sent, as Gmail's answer said).
func TestVerifyGivesUpAfterBoundedLooksWhileTheIndexIsBehind(t *testing.T) {
	h := newHarness(t, setup{indexLag: 24 * time.Hour})
	id, _ := h.send(retryChannel)
	looks := 0
	for range 30 {
		h.clock.Advance(grace)
		looks += h.sweep().Checked
	}
	j := h.job(id)
	if j.State != gmailrelay.StateSent || !j.NextCheckAt.IsZero() {
		t.Fatalf("state %s, next check %v; want sent with nothing scheduled", j.State, j.NextCheckAt)
	}
	if looks != 10 {
		t.Errorf("%d verify looks, want 10 (lateLookGraces)", looks)
	}
	if got := h.lines(id, gmailrelay.KindSearch); got[len(got)-1].Reason != sweeper.ReasonVerifyGaveUp {
		t.Errorf("last search line %+v, want reason %s", got[len(got)-1], sweeper.ReasonVerifyGaveUp)
	}
}

// confirmedOnce reports whether a verify (or found) search saw exactly
// one copy of j's message: Verified after the late look, VerifyLooks
// before it.
func confirmedOnce(j gmailrelay.Job) bool { return j.Verified || j.VerifyLooks >= 1 }

// lateLookDone moves the clock to j's late look, sweeps, and checks that
// the job is now verified for good with no check scheduled.
func (h *harness) lateLookDone(id string) {
	h.t.Helper()
	j := h.job(id)
	if j.Verified || j.VerifyLooks != 1 || j.NextCheckAt.IsZero() {
		h.t.Fatalf("before the late look: verified %v, looks %d, next check %v; want one look and a check scheduled", j.Verified, j.VerifyLooks, j.NextCheckAt)
	}
	h.clock.Advance(j.NextCheckAt.Sub(h.clock.Now()))
	h.sweep()
	if j := h.job(id); !j.Verified || !j.NextCheckAt.IsZero() {
		h.t.Fatalf("after the late look: verified %v, next check %v; want verified and nothing scheduled", j.Verified, j.NextCheckAt)
	}
}

// A second copy of a sent message that Gmail indexes after the first
// verify search found one (Gmail stored the send twice, the second copy
// with a longer lag) is caught by the late look: review duplicate. Without
// the late look the job stayed sent, verified, with two deliveries (the
// realism soak's gmail_stored_one_send_twice_unseen).
func TestLateLookCatchesASecondCopyIndexedLate(t *testing.T) {
	h := newHarness(t, setup{})
	id, _ := h.send(retryChannel)
	h.clock.Advance(grace)
	wantResult(t, h.sweep(), sweeper.Result{Checked: 1, Verified: 1})
	j := h.job(id)
	if j.Verified || j.NextCheckAt.IsZero() {
		t.Fatalf("after the first verify: verified %v, next check %v; want a late look scheduled", j.Verified, j.NextCheckAt)
	}
	if got, want := j.NextCheckAt.Sub(h.clock.Now()), 10*grace; got != want {
		t.Errorf("late look in %s, want %s (ten graces)", got, want)
	}
	raw, err := h.log.Raw(h.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.prov.Send(h.ctx, "me", raw, ""); err != nil { // Gmail's second copy, indexed late
		t.Fatal(err)
	}
	h.clock.Advance(j.NextCheckAt.Sub(h.clock.Now()))
	wantResult(t, h.sweep(), sweeper.Result{Checked: 1, Duplicates: 1, Reviewed: 1})
	if got := h.job(id).State; got != gmailrelay.StateReview {
		t.Fatalf("state after the late look = %s, want review (two copies)", got)
	}
	if r := h.lines(id, gmailrelay.KindReview); len(r) != 1 || r[0].Reason != sweeper.ReasonDuplicate {
		t.Errorf("review lines %+v, want one with reason %s", r, sweeper.ReasonDuplicate)
	}
}

// A send Gmail stored under a Message-ID of its own, and stored twice with
// the second copy indexed late: the verify pass finds the rewrite, sees one
// copy under Gmail's id, and looks once more later, where the second copy
// sends the job to review. Were the one search under Gmail's id to settle
// the job for good, the second copy would go unseen (as the realism soak
// found).
func TestLateLookCatchesALateSecondCopyOfARewrittenSend(t *testing.T) {
	h := newHarness(t, setup{})
	h.srv.SetRewriteMessageID(true)
	id, res := h.send(retryChannel)
	h.srv.SetRewriteMessageID(false)
	hdr, err := h.prov.GetHeader(h.ctx, "me", res.Job.GmailID)
	if err != nil {
		t.Fatal(err)
	}
	stored := hdr.MessageID
	if stored == id || stored == "" {
		t.Fatalf("stored Message-ID %q: the emulator did not rewrite %s", stored, id)
	}
	h.clock.Advance(grace)
	h.sweep()
	j := h.job(id)
	if j.State != gmailrelay.StateSent || j.NextCheckAt.IsZero() || j.VerifyLooks != 1 {
		t.Fatalf("after the rewrite was found: state %s, next check %v, looks %d; want sent with a late look scheduled", j.State, j.NextCheckAt, j.VerifyLooks)
	}
	raw, err := h.log.Raw(h.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	second := bytes.ReplaceAll(raw, []byte(id), []byte(stored)) // Gmail's second copy, under its id, indexed late
	if _, err := h.prov.Send(h.ctx, "me", second, ""); err != nil {
		t.Fatal(err)
	}
	h.clock.Advance(j.NextCheckAt.Sub(h.clock.Now()))
	h.sweep()
	if got := h.job(id).State; got != gmailrelay.StateReview {
		t.Fatalf("state after the late look = %s, want review (two copies under Gmail's id)", got)
	}
	if r := h.lines(id, gmailrelay.KindReview); len(r) != 1 || r[0].Reason != sweeper.ReasonDuplicate {
		t.Errorf("review lines %+v, want one with reason %s", r, sweeper.ReasonDuplicate)
	}
	mb, err := h.log.Mailbox(h.ctx, "default")
	if err != nil || mb.Rewrites != 1 {
		t.Errorf("mailbox rewrites = %d, %v; want 1 (the late look counts none)", mb.Rewrites, err)
	}
}

// A copy the log counts already is one delivery, however often a search
// finds it: a review channel's send found once (its effect line), then a
// human's retry that Gmail answers 500 without storing anything, then the
// next search finds the same copy. Counting each finding would write a
// second effect line (2 effects, 1 delivery at the emulator).
func TestFoundAgainCopyIsNotASecondEffect(t *testing.T) {
	h := newHarness(t, setup{})
	id := h.sendAmbiguous(reviewChannel)
	h.clock.Advance(grace)
	h.sweep()
	h.emulatorFault(gmailfake.Fault{Method: gmailfake.MethodSend, Action: gmailfake.ActionError, Status: 500, Count: 1})
	if _, err := h.svc.Resolve(h.ctx, relay.ResolveRequest{ID: id, Action: relay.ActionRetry, Actor: "ops@example.com", Seen: relay.AnyAttempts}); err != nil {
		t.Fatalf("resolve retry: %v", err)
	}
	h.clock.Advance(grace)
	h.sweep()
	h.wantJob(id, gmailrelay.StateReview, 2, 1, 1)
}

// A copy other than the one an effect line counts is a second delivery:
// found once by a retry channel's search, the job goes to review
// (duplicate_delivery), not to sent with two effects.
func TestFoundOtherCopyOfADeliveredJobIsADuplicate(t *testing.T) {
	h := newHarness(t, setup{})
	id := h.sendAmbiguous(retryChannel)
	if _, _, err := h.log.Mutate(h.ctx, id, func(cur *gmailrelay.Job) (gmailrelay.Change, error) {
		n := *cur
		n.Effects, n.GmailID = 1, "an-earlier-copy" // a delivery the log counted, since deleted by the user
		return gmailrelay.Change{Job: &n, Lines: []gmailrelay.Line{{Kind: gmailrelay.KindEffect, Attempt: n.Attempts,
			Source: gmailrelay.SourceResponse, GmailID: n.GmailID}}}, nil
	}); err != nil {
		t.Fatal(err)
	}
	h.clock.Advance(grace)
	wantResult(t, h.sweep(), sweeper.Result{Checked: 1, Found: 1, Duplicates: 1, Reviewed: 1})
	h.wantJob(id, gmailrelay.StateReview, 1, 2, 1)
	if got := reviewReason(h, id); got != sweeper.ReasonDuplicateDelivery {
		t.Errorf("review reason %q, want %q", got, sweeper.ReasonDuplicateDelivery)
	}
}
