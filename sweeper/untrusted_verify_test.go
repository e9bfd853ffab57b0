package sweeper_test

import (
	"testing"

	"github.com/gmailrelay/gmailrelay/acceptlog"
	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/sweeper"
)

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
	h.wantState(twice, res.Job, acceptlog.StateSent)
	h.clock.Advance(grace)
	wantResult(t, h.sweep(), sweeper.Result{Checked: 1, Duplicates: 1, Reviewed: 1})
	h.wantJob(twice, acceptlog.StateReview, 1, 1, 2)
	h.wantDeliveries(twice, 2, "the duplicate the review is about")
	if rl := h.lines(twice, acceptlog.KindReview); len(rl) != 1 || rl[0].Reason != sweeper.ReasonDuplicate {
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
	h.wantState(id, res.Job, acceptlog.StateSent)
	h.clock.Advance(grace)
	wantResult(t, h.sweep(), sweeper.Result{Checked: 1, Duplicates: 1, Reviewed: 1})
	h.wantJob(id, acceptlog.StateReview, 1, 1, 0) // no copy carries the relay's id
	h.wantDeliveries(id, 2, "")
	if hl := h.lines(id, acceptlog.KindHandle); len(hl) != 1 || hl[0].Reason != sweeper.ReasonHandleRewritten {
		t.Fatalf("handle lines %+v, want one %q", hl, sweeper.ReasonHandleRewritten)
	}
	if rl := h.lines(id, acceptlog.KindReview); len(rl) != 1 || rl[0].Reason != sweeper.ReasonDuplicate {
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
	h.wantJob(id, acceptlog.StateSent, 1, 1, 0)
	h.wantDeliveries(id, 1, "")
}
