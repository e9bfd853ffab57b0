package sweeper_test

import (
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay/acceptlog"
	"github.com/gmailrelay/gmailrelay/faultmodes"
	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/sweeper"
)

// Several due jobs share one query, and hits are attributed by their
// Message-ID: 100 jobs take at most 5 list calls, plus one companion
// after: query (the misses have no later confirmed send to witness them).
func TestBatchedSearch(t *testing.T) {
	h := newHarness(t, setup{})
	var found, lost []string
	for i := range 100 {
		if i%4 == 3 {
			lost = append(lost, h.sendLost(retryChannel))
		} else {
			found = append(found, h.sendAmbiguous(retryChannel))
		}
	}
	before := h.srv.Stats().Calls
	h.clock.Advance(grace)
	r := h.sweep()
	wantResult(t, r, sweeper.Result{Checked: 100, Found: 75, Missed: 25})
	calls := h.srv.Stats().Calls
	if got := calls[gmailfake.MethodList] - before[gmailfake.MethodList]; got > 6 {
		t.Errorf("list calls for 100 jobs: %d, want at most 6 (5 searches, 1 companion query)", got)
	}
	if got := calls[gmailfake.MethodGet] - before[gmailfake.MethodGet]; got != 75 {
		t.Errorf("get calls: %d, want 75 (one per hit, to attribute it)", got)
	}
	for _, id := range found {
		h.wantJob(id, acceptlog.StateSent, 1, 1, 1)
	}
	for _, id := range lost {
		if j := h.wantJob(id, acceptlog.StateUnknown, 1, 0, 0); j.Checks != 1 {
			t.Errorf("job %s: checks %d, want 1", id, j.Checks)
		}
	}
}

// A hit that is gone when its header is read (messages.get answers 404,
// which the Gmail adapter hands over as relay.ErrMessageNotFound) is
// skipped, not a pass error: its job is simply not found this pass.
func TestBatchedSearchSkipsMessageGoneBeforeGet(t *testing.T) {
	h := newHarness(t, setup{})
	a, b := h.sendAmbiguous(retryChannel), h.sendAmbiguous(retryChannel)
	h.emulatorFault(gmailfake.Fault{Method: gmailfake.MethodGet, Action: gmailfake.ActionError, Status: 404})
	h.clock.Advance(grace)
	r := h.sweep()
	wantResult(t, r, sweeper.Result{Checked: 2, Found: 1, Missed: 1})
	sent := 0
	for _, id := range []string{a, b} {
		if h.job(id).State == acceptlog.StateSent {
			sent++
		}
	}
	if sent != 1 {
		t.Errorf("sent jobs after the pass: %d, want 1 (the other's hit was skipped)", sent)
	}
}

// Retryable failures on retry channels whose caller never came back are
// retried by the sweeper after grace, up to max_attempts; then review.
func TestRetryableFailure(t *testing.T) {
	h := newHarness(t, setup{})
	count := 3
	if _, err := h.faults.Add(faultmodes.Spec{Mode: faultmodes.FailBeforeForward, Count: &count}); err != nil {
		t.Fatalf("add fault rule: %v", err)
	}
	id, res := h.send(retryChannel) // attempt 1 fails before forward
	h.wantState(id, res.Job, acceptlog.StateFailed)

	h.clock.Advance(grace)
	wantResult(t, h.sweep(), sweeper.Result{Retried: 1}) // attempt 2 fails too
	h.wantJob(id, acceptlog.StateFailed, 2, 0, 0)
	h.clock.Advance(grace)
	wantResult(t, h.sweep(), sweeper.Result{Retried: 1}) // attempt 3 fails too
	h.clock.Advance(grace)
	wantResult(t, h.sweep(), sweeper.Result{Reviewed: 1}) // max_attempts is 3
	h.wantJob(id, acceptlog.StateReview, 3, 0, 0)
	if r := h.lines(id, acceptlog.KindReview); len(r) != 1 || r[0].Reason != sweeper.ReasonMaxAttempts {
		t.Errorf("review lines %+v, want one with reason %s", r, sweeper.ReasonMaxAttempts)
	}

	// A retry that gets through ends sent with one message.
	id2, res := h.send(retryChannel) // the rule's count is used up: sent
	h.wantState(id2, res.Job, acceptlog.StateSent)
	count = 1
	if _, err := h.faults.Add(faultmodes.Spec{Mode: faultmodes.FailBeforeForward, Count: &count}); err != nil {
		t.Fatalf("add fault rule: %v", err)
	}
	id3, res := h.send(retryChannel)
	h.wantState(id3, res.Job, acceptlog.StateFailed)
	h.clock.Advance(grace)
	r := h.sweep()
	if r.Retried != 1 {
		t.Errorf("retried %d, want 1", r.Retried)
	}
	h.wantJob(id3, acceptlog.StateSent, 2, 1, 1)
}

// Where Gmail was seen rewriting Message-IDs a search miss proves nothing:
// unknown jobs go to review without a search, and sent jobs are not
// verified.
func TestUntrustedHandle(t *testing.T) {
	h := newHarness(t, setup{})
	sent, res := h.send(retryChannel)
	h.wantState(sent, res.Job, acceptlog.StateSent)
	unknown := h.sendAmbiguous(retryChannel)
	if _, _, err := h.log.Mutate(h.ctx, sent, func(*acceptlog.Job) (acceptlog.Change, error) {
		return acceptlog.Change{Mailbox: &acceptlog.Mailbox{Name: "default", HandleChecked: true, HandleUntrusted: true, Rewrites: 1}}, nil
	}); err != nil {
		t.Fatalf("mark the handle untrusted: %v", err)
	}
	h.clock.Advance(grace)
	// The unknown job goes to review without a search; the sent job is
	// still verified (two hits would prove a duplicate even here).
	wantResult(t, h.sweep(), sweeper.Result{Reviewed: 1, Checked: 1, Verified: 1})
	h.wantJob(unknown, acceptlog.StateReview, 1, 0, 1)
	if r := h.lines(unknown, acceptlog.KindReview); len(r) != 1 || r[0].Reason != sweeper.ReasonHandleUntrusted {
		t.Errorf("review lines %+v, want one with reason %s", r, sweeper.ReasonHandleUntrusted)
	}
	if j := h.wantJob(sent, acceptlog.StateSent, 1, 1, 1); !confirmedOnce(j) {
		t.Errorf("sent job: next check %v, verified %v; want it confirmed once (late look to come)", j.NextCheckAt, j.Verified)
	}
	if got := h.srv.Stats().Calls[gmailfake.MethodList]; got != 1 {
		t.Errorf("list calls: %d, want 1 (the sent job's verify search)", got)
	}
}

// A 5xx answer to a search is an error of that search only: the job keeps
// its state, gets no line, and is searched again a little later.
func TestSearchServerErrorKeepsJobDue(t *testing.T) {
	h := newHarness(t, setup{})
	id := h.sendAmbiguous(retryChannel)
	h.emulatorFault(gmailfake.Fault{Method: gmailfake.MethodList, Action: gmailfake.ActionError, Status: 503})
	h.clock.Advance(grace)
	wantResult(t, h.sweep(), sweeper.Result{Errors: 1})
	j := h.wantJob(id, acceptlog.StateUnknown, 1, 0, 1)
	if len(h.lines(id, acceptlog.KindSearch)) != 0 || j.Checks != 0 {
		t.Errorf("after a failed search: %d search lines, checks %d; want none", len(h.lines(id, acceptlog.KindSearch)), j.Checks)
	}
	if !j.NextCheckAt.After(h.clock.Now()) || j.NextCheckAt.After(h.clock.Now().Add(grace)) {
		t.Errorf("next check %v: want a little after now (%v)", j.NextCheckAt, h.clock.Now())
	}
	wantResult(t, h.sweep(), sweeper.Result{}) // not due again at once
	h.clock.Advance(grace)
	wantResult(t, h.sweep(), sweeper.Result{Checked: 1, Found: 1})
	h.wantJob(id, acceptlog.StateSent, 1, 1, 1)
}

// Gmail's 429 never fails or resolves a job: the sweeper pauses the shared
// budget (longer each time), stops the pass, asks Gmail nothing while
// paused, and resolves the job once Gmail lets it.
func TestRateLimitedSearchBacksOff(t *testing.T) {
	h := newHarness(t, setup{})
	id := h.sendAmbiguous(retryChannel)
	h.emulatorFault(gmailfake.Fault{Method: gmailfake.MethodList, Action: gmailfake.ActionError, Status: 429, Count: 3})
	h.clock.Advance(grace)
	var last time.Duration
	for i := range 3 {
		lists := h.srv.Stats().Calls[gmailfake.MethodList]
		r := h.sweep()
		if r.Deferred != 1 || r.Wait <= 0 || r.Checked != 0 || r.Errors != 0 {
			t.Fatalf("pass %d under 429: %+v, want the job deferred with a wait", i, r)
		}
		if got := h.srv.Stats().Calls[gmailfake.MethodList] - lists; got != 1 {
			t.Fatalf("pass %d: %d list calls, want 1 (stop at the first 429)", i, got)
		}
		if r.Wait <= last {
			t.Errorf("pass %d: wait %v after %v, want exponential backoff", i, r.Wait, last)
		}
		last = r.Wait
		// Paused: a pass right away asks Gmail nothing.
		again := h.sweep()
		if got := h.srv.Stats().Calls[gmailfake.MethodList] - lists; got != 1 || again.Deferred != 1 {
			t.Fatalf("pass %d while paused: %d list calls in all, result %+v; want no new call and the job deferred", i, got, again)
		}
		h.wantJob(id, acceptlog.StateUnknown, 1, 0, 1)
		h.clock.Advance(r.Wait)
	}
	wantResult(t, h.sweep(), sweeper.Result{Checked: 1, Found: 1})
	h.wantJob(id, acceptlog.StateSent, 1, 1, 1)
	if n := len(h.lines(id, acceptlog.KindSearch)); n != 1 {
		t.Errorf("search lines %d, want 1 (a 429 is not a search)", n)
	}
}
