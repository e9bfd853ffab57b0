package sweeper_test

import (
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay/acceptlog"
	"github.com/gmailrelay/gmailrelay/faultmodes"
	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/sweeper"
)

// Issue 13, the sweeper's defences against Gmail as it really is. Every
// test checks the acceptance log and the emulator's ground truth
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
	h.wantJob(id, acceptlog.StateSent, 1, 1, 1)
	h.wantDeliveries(id, 1, "not resent")
	if calls := h.srv.Stats().Calls[gmailfake.MethodSend]; calls != 1 {
		t.Fatalf("emulator result: %d send calls, want 1", calls)
	}
}

// The verify pass of a sent job whose copy was trashed also finds it.
func TestVerifyFindsTrashedCopy(t *testing.T) {
	h := newHarness(t, setup{})
	id, _ := h.send(retryChannel)
	if err := h.srv.Trash(h.srv.Messages(id)[0].ID); err != nil {
		t.Fatalf("trash: %v", err)
	}
	h.clock.Advance(grace)
	wantResult(t, h.sweep(), sweeper.Result{Checked: 1, Verified: 1})
	if j := h.wantJob(id, acceptlog.StateSent, 1, 1, 1); !confirmedOnce(j) {
		t.Fatal("trashed sent copy not verified")
	}
	h.lateLookDone(id)
}

// A sent job whose copy the user deleted for good: the verify pass's
// messages.get answers 404 → a handle line "deleted", the mailbox stays
// trusted, the job stays sent and is not checked again.
func TestVerifyHandleDeleted(t *testing.T) {
	h := newHarness(t, setup{})
	id, _ := h.send(retryChannel)
	if err := h.srv.Delete(h.srv.Messages(id)[0].ID); err != nil {
		t.Fatalf("delete: %v", err)
	}
	h.clock.Advance(grace)
	wantResult(t, h.sweep(), sweeper.Result{Checked: 1})
	j := h.wantJob(id, acceptlog.StateSent, 1, 1, 1)
	if !j.NextCheckAt.IsZero() {
		t.Errorf("next check %v, want none", j.NextCheckAt)
	}
	hl := h.lines(id, acceptlog.KindHandle)
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
		for _, l := range h.lines(id, acceptlog.KindHandle) {
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
		wasAmbiguous := len(h.lines(id, acceptlog.KindAmbiguous)) > 0
		if truth.Deliveries > 1 {
			resentSent++
			t.Errorf("emulator result: %s delivered %d times (state %s, rewritten %v)", id, truth.Deliveries, j.State, isRewritten)
		}
		if truth.Deliveries == 0 {
			lost++
		}
		if isRewritten && wasAmbiguous {
			ambiguousRewritten++
			if j.State != acceptlog.StateReview {
				t.Errorf("ambiguous job %s with a rewritten id: state %s, want review", id, j.State)
			}
		}
		if j.State == acceptlog.StateReview {
			reviewed++
		}
		if j.State != acceptlog.StateSent && j.State != acceptlog.StateReview {
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
// one copy, the recipients got two. The job's two own effect lines send it
// to review with reason duplicate_delivery, once.
func TestSentDedupeForcedResendIsDuplicateDelivery(t *testing.T) {
	h := newHarness(t, setup{sentDedupe: true})
	id, res := h.send(retryChannel)
	h.wantState(id, res.Job, acceptlog.StateSent)
	// A forced resend: the job is handed to a human, who asks for a retry.
	if _, _, err := h.log.Mutate(h.ctx, id, func(cur *acceptlog.Job) (acceptlog.Change, error) {
		n := *cur
		n.State, n.NextCheckAt = acceptlog.StateReview, time.Time{}
		return acceptlog.Change{Job: &n, Lines: []acceptlog.Line{{Kind: acceptlog.KindReview, Attempt: n.Attempts,
			State: acceptlog.StateReview, Reason: acceptlog.ReasonDuplicate, Note: "test: forced"}}}, nil
	}); err != nil {
		t.Fatalf("to review: %v", err)
	}
	res2, err := h.svc.Attempt(h.ctx, id, []acceptlog.State{acceptlog.StateReview}, acceptlog.ReasonResolvedRetry, true)
	if err != nil {
		t.Fatalf("forced resend: %v", err)
	}
	h.wantState(id, res2.Job, acceptlog.StateSent)
	if c, d := h.srv.Count(id), h.srv.Deliveries(id); c != 1 || d != 2 {
		t.Fatalf("emulator result: %d copies, %d deliveries; want 1 copy (folded), 2 deliveries", c, d)
	}
	h.clock.Advance(grace)
	wantResult(t, h.sweep(), sweeper.Result{Reviewed: 1})
	h.wantJob(id, acceptlog.StateReview, 2, 2, 1)
	if got := reviewReason(h, id); got != sweeper.ReasonDuplicateDelivery {
		t.Fatalf("review reason %q, want %q", got, sweeper.ReasonDuplicateDelivery)
	}
	// The human marks it sent: no second review for the same duplicate.
	if _, _, err := h.log.Mutate(h.ctx, id, func(cur *acceptlog.Job) (acceptlog.Change, error) {
		n := *cur
		n.State, n.Effects, n.NextCheckAt = acceptlog.StateSent, n.Effects+1, h.clock.Now().Add(grace)
		return acceptlog.Change{Job: &n, Lines: []acceptlog.Line{
			{Kind: acceptlog.KindResolved, Attempt: n.Attempts, Reason: acceptlog.ReasonMarkSent, Actor: "test"},
			{Kind: acceptlog.KindEffect, Attempt: n.Attempts, State: acceptlog.StateSent, Reason: acceptlog.ReasonMarkSent, Source: acceptlog.SourceHuman}}}, nil
	}); err != nil {
		t.Fatalf("mark sent: %v", err)
	}
	h.clock.Advance(grace)
	h.sweep()
	if j := h.job(id); j.State != acceptlog.StateSent {
		t.Fatalf("after the human's mark-sent: state %s, want sent", j.State)
	}
}
