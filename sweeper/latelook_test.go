package sweeper_test

import (
	"bytes"
	"testing"

	"github.com/gmailrelay/gmailrelay/acceptlog"
	"github.com/gmailrelay/gmailrelay/sweeper"
)

// confirmedOnce reports whether a verify (or found) search saw exactly
// one copy of j's message: Verified after the late look, VerifyLooks
// before it.
func confirmedOnce(j acceptlog.Job) bool { return j.Verified || j.VerifyLooks >= 1 }

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
	if got := h.job(id).State; got != acceptlog.StateReview {
		t.Fatalf("state after the late look = %s, want review (two copies)", got)
	}
	if r := h.lines(id, acceptlog.KindReview); len(r) != 1 || r[0].Reason != sweeper.ReasonDuplicate {
		t.Errorf("review lines %+v, want one with reason %s", r, sweeper.ReasonDuplicate)
	}
}

// A send Gmail stored under a Message-ID of its own, and stored twice with
// the second copy indexed late: the verify pass finds the rewrite, sees one
// copy under Gmail's id, and looks once more later, where the second copy
// sends the job to review. Before, the one search under Gmail's id settled
// the job for good (a residual of the realism soak).
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
	if j.State != acceptlog.StateSent || j.NextCheckAt.IsZero() || j.VerifyLooks != 1 {
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
	if got := h.job(id).State; got != acceptlog.StateReview {
		t.Fatalf("state after the late look = %s, want review (two copies under Gmail's id)", got)
	}
	if r := h.lines(id, acceptlog.KindReview); len(r) != 1 || r[0].Reason != sweeper.ReasonDuplicate {
		t.Errorf("review lines %+v, want one with reason %s", r, sweeper.ReasonDuplicate)
	}
	mb, err := h.log.Mailbox(h.ctx, "default")
	if err != nil || mb.Rewrites != 1 {
		t.Errorf("mailbox rewrites = %d, %v; want 1 (the late look counts none)", mb.Rewrites, err)
	}
}
