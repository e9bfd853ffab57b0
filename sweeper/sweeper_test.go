package sweeper_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/faultmodes"
	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/relay"
	"github.com/gmailrelay/gmailrelay/sweeper"

	"github.com/gmailrelay/gmailrelay/internal/testclock"
)

// A send Gmail accepted but whose answer was lost, on a retry channel: the
// sweeper waits for grace, does not take a miss inside the index lag as
// "not sent", finds the message once the index has it and marks the job
// sent — with no resend, one message at the emulator and one effect line.
func TestAmbiguousSendIsFoundNotResent(t *testing.T) {
	tests := []struct {
		name string
		send func(h *harness) string
	}{
		{"emulator accepts then answers 500", func(h *harness) string { return h.sendAmbiguous(retryChannel) }},
		{"fault rule forward-then-drop-response", func(h *harness) string {
			one := 1
			if _, err := h.faults.Add(faultmodes.Spec{Mode: faultmodes.ForwardThenDropResponse, Count: &one}); err != nil {
				t.Fatalf("add fault rule: %v", err)
			}
			id, res := h.send(retryChannel)
			if !res.Dropped {
				t.Fatalf("send: response not dropped (fault %+v)", res.Fault)
			}
			h.wantState(id, res.Job, gmailrelay.StateUnknown)
			return id
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, setup{indexLag: 90 * time.Second})
			id := tt.send(h)
			h.wantJob(id, gmailrelay.StateUnknown, 1, 0, 1)

			// Before grace: not due, nothing searched.
			wantResult(t, h.sweep(), sweeper.Result{})
			if got := h.srv.Stats().Calls[gmailfake.MethodList]; got != 0 {
				t.Errorf("list calls before grace: %d, want 0", got)
			}

			// After grace but inside the index lag: a miss, no resend.
			h.clock.Advance(grace)
			wantResult(t, h.sweep(), sweeper.Result{Checked: 1, Missed: 1})
			j := h.wantJob(id, gmailrelay.StateUnknown, 1, 0, 1)
			if j.Checks != 1 {
				t.Errorf("checks after the first miss: %d, want 1", j.Checks)
			}
			searches := h.lines(id, gmailrelay.KindSearch)
			if len(searches) != 1 || searches[0].Hits != 0 || searches[0].Check != 1 ||
				!strings.Contains(searches[0].Query, `rfc822msgid:"`+strings.Trim(id, "<>")+`"`) {
				t.Fatalf("search lines after the first miss: %+v", searches)
			}

			// After the lag: found once → sent, verified, no resend.
			h.clock.Advance(grace)
			wantResult(t, h.sweep(), sweeper.Result{Checked: 1, Found: 1})
			j = h.wantJob(id, gmailrelay.StateSent, 1, 1, 1)
			msgs := h.srv.Messages(id)
			if j.GmailID != msgs[0].ID || !confirmedOnce(j) {
				t.Errorf("sent job: gmail id %q (emulator %q), verified %v, next check %v", j.GmailID, msgs[0].ID, j.Verified, j.NextCheckAt)
			}
			effect := h.lines(id, gmailrelay.KindEffect)[0]
			if effect.Source != gmailrelay.SourceSearch || effect.GmailID != msgs[0].ID || effect.State != gmailrelay.StateSent {
				t.Errorf("effect line %+v, want source search, gmail id %s, state sent", effect, msgs[0].ID)
			}
			if got := h.srv.Stats().Calls[gmailfake.MethodSend]; got != 1 {
				t.Errorf("send calls at the emulator: %d, want 1", got)
			}

			// The late look finds one copy still; then nothing more to do, ever.
			h.lateLookDone(id)
			h.clock.Advance(24 * time.Hour)
			wantResult(t, h.sweep(), sweeper.Result{})
			h.wantJob(id, gmailrelay.StateSent, 1, 1, 1)
		})
	}
}

// On a review-only channel the sweeper never forwards again: found once, the
// job goes to review with the search as evidence (and its effect line: Gmail
// accepted it), and a human's mark-sent closes it; a human's retry instead
// is a second delivery, handed back as duplicate_delivery; missing after the
// checks, it goes to review too.
func TestReviewChannelNeverResends(t *testing.T) {
	t.Run("found", func(t *testing.T) {
		h := newHarness(t, setup{indexLag: 30 * time.Second})
		id := h.sendAmbiguous(reviewChannel)
		h.clock.Advance(grace)
		wantResult(t, h.sweep(), sweeper.Result{Checked: 1, Found: 1, Reviewed: 1})
		h.wantJob(id, gmailrelay.StateReview, 1, 1, 1)
		if e := h.lines(id, gmailrelay.KindEffect); e[0].Source != gmailrelay.SourceSearch || e[0].State != "" {
			t.Errorf("effect line %+v, want source search and no state (the job stays in review)", e[0])
		}
		reviews := h.lines(id, gmailrelay.KindReview)
		msgs := h.srv.Messages(id)
		if len(reviews) != 1 {
			t.Fatalf("review lines: %+v, want one", reviews)
		}
		r := reviews[0]
		if r.Reason != sweeper.ReasonReviewChannel || r.SentHits != 1 || r.GmailID != msgs[0].ID || r.Query == "" || r.State != gmailrelay.StateReview {
			t.Errorf("review line %+v: want reason %s with the search evidence (1 SENT hit, gmail id %s)", r, sweeper.ReasonReviewChannel, msgs[0].ID)
		}

		h.clock.Advance(24 * time.Hour)
		wantResult(t, h.sweep(), sweeper.Result{})
		if got := h.srv.Stats().Calls[gmailfake.MethodSend]; got != 1 {
			t.Errorf("send calls: %d, want 1 (never a second forward)", got)
		}

		res, err := h.svc.Resolve(h.ctx, relay.ResolveRequest{ID: id, Action: relay.ActionMarkSent, Note: "found it in the mailbox", Actor: "ops@example.com", Seen: relay.AnyAttempts})
		if err != nil {
			t.Fatalf("resolve mark-sent: %v", err)
		}
		h.wantState(id, res.Job, gmailrelay.StateSent)
		h.wantJob(id, gmailrelay.StateSent, 1, 1, 1)
		h.clock.Advance(24 * time.Hour)
		wantResult(t, h.sweep(), sweeper.Result{})
	})
	t.Run("found, then a human retries", func(t *testing.T) {
		// A response and a hit are two effects → review
		// duplicate_delivery, in the retry's own transaction
		// (docs/design.md#own-effects-count). Were the hit to write no
		// effect line, the retry's response would make the only one and,
		// Gmail folding the second copy into the first (sent-dedupe), the
		// job would end sent and verified: the second delivery unseen.
		h := newHarness(t, setup{sentDedupe: true})
		id := h.sendAmbiguous(reviewChannel)
		h.clock.Advance(grace)
		wantResult(t, h.sweep(), sweeper.Result{Checked: 1, Found: 1, Reviewed: 1})
		res, err := h.svc.Resolve(h.ctx, relay.ResolveRequest{ID: id, Action: relay.ActionRetry, Actor: "ops@example.com", Seen: relay.AnyAttempts})
		if err != nil {
			t.Fatalf("resolve retry: %v", err)
		}
		h.wantState(id, res.Job, gmailrelay.StateReview)
		h.wantJob(id, gmailrelay.StateReview, 2, 2, 2)
		if got := reviewReason(h, id); got != sweeper.ReasonDuplicateDelivery {
			t.Errorf("review reason %q, want %q", got, sweeper.ReasonDuplicateDelivery)
		}
	})
	t.Run("missing after checks", func(t *testing.T) {
		h := newHarness(t, setup{})
		id := h.sendLost(reviewChannel)
		h.clock.Advance(grace)
		wantResult(t, h.sweep(), sweeper.Result{Checked: 1, Reviewed: 1})
		h.wantJob(id, gmailrelay.StateReview, 1, 0, 0)
		reviews := h.lines(id, gmailrelay.KindReview)
		if len(reviews) != 1 || reviews[0].Reason != sweeper.ReasonMissingAfterChecks || reviews[0].Hits != 0 || reviews[0].Check != 1 {
			t.Errorf("review lines %+v, want one with reason %s and the empty search", reviews, sweeper.ReasonMissingAfterChecks)
		}
		if got := h.srv.Stats().Calls[gmailfake.MethodSend]; got != 1 {
			t.Errorf("send calls: %d, want 1", got)
		}
	})
}

// A send that really did not happen (Gmail answered 500 and stored
// nothing) is resent only after `checks` misses spaced by grace, with the
// same Message-ID, and ends with exactly one message.
func TestLostSendIsResentAfterChecks(t *testing.T) {
	h := newHarness(t, setup{indexLag: 30 * time.Second})
	id := h.sendLost(retryChannel)
	h.wantJob(id, gmailrelay.StateUnknown, 1, 0, 0)

	h.clock.Advance(grace)
	wantResult(t, h.sweep(), sweeper.Result{Checked: 1, Missed: 1})
	h.clock.Advance(grace / 2)
	wantResult(t, h.sweep(), sweeper.Result{}) // the next check waits a full grace
	h.wantJob(id, gmailrelay.StateUnknown, 1, 0, 0)

	h.clock.Advance(grace / 2)
	wantResult(t, h.sweep(), sweeper.Result{Checked: 1, Resent: 1})
	j := h.wantJob(id, gmailrelay.StateSent, 2, 1, 1)
	if got := h.srv.Messages(id)[0].MessageID; got != id {
		t.Errorf("resent Message-ID %s, want %s", got, id)
	}
	received := h.lines(id, gmailrelay.KindReceived)
	if len(received) != 2 || received[1].Reason != sweeper.ReasonResend || received[1].Attempt != 2 {
		t.Errorf("received lines %+v, want a second one for attempt 2 with reason %s", received, sweeper.ReasonResend)
	}
	if searches := h.lines(id, gmailrelay.KindSearch); len(searches) != 2 || searches[1].Check != 2 {
		t.Errorf("search lines %+v, want checks 1 and 2", searches)
	}

	// The verify pass confirms the resend once the index has it.
	if j.Verified {
		t.Fatalf("a sent-by-response job starts unverified")
	}
	h.clock.Advance(grace)
	wantResult(t, h.sweep(), sweeper.Result{Checked: 1, Verified: 1})
	if j := h.wantJob(id, gmailrelay.StateSent, 2, 1, 1); !confirmedOnce(j) {
		t.Errorf("after the verify pass: verified %v, next check %v", j.Verified, j.NextCheckAt)
	}
	h.lateLookDone(id)
}

// Two messages with one Message-ID is what the relay exists to catch:
// review, on the unknown path and on the verify pass.
func TestDuplicateGoesToReview(t *testing.T) {
	t.Run("unknown", func(t *testing.T) {
		h := newHarness(t, setup{})
		p := h.prepare(retryChannel)
		// Gmail stored it twice: once from an earlier attempt, once now.
		if _, err := h.prov.Send(h.ctx, "me", p.Raw, ""); err != nil {
			t.Fatalf("direct send: %v", err)
		}
		h.emulatorFault(gmailfake.Fault{Method: gmailfake.MethodSend, Action: gmailfake.ActionAcceptThenError, Status: 502})
		res, err := h.svc.Send(h.ctx, p, relay.SendOptions{})
		if err != nil {
			t.Fatalf("send: %v", err)
		}
		id := p.MessageID
		h.wantState(id, res.Job, gmailrelay.StateUnknown)

		h.wantDuplicateReview(id, 0)
		h.clock.Advance(24 * time.Hour)
		wantResult(t, h.sweep(), sweeper.Result{})
		if got := h.srv.Deliveries(id); got != 2 {
			t.Errorf("emulator deliveries %d, want 2 (no resend)", got)
		}
	})
	t.Run("verify pass", func(t *testing.T) {
		h := newHarness(t, setup{})
		h.emulatorFault(gmailfake.Fault{Method: gmailfake.MethodSend, Action: gmailfake.ActionDuplicate})
		id, res := h.send(retryChannel)
		h.wantState(id, res.Job, gmailrelay.StateSent)

		wantResult(t, h.sweep(), sweeper.Result{}) // the verify pass waits for grace too
		h.wantDuplicateReview(id, 1)
	})
}

// The verify pass on a sent job whose message search cannot find (Gmail
// holds it under our Message-ID, its index never shows it): checked again
// after grace, ten looks in all (the index is behind: a second copy may
// still show up), then left sent with a line saying so.
func TestVerifyPassGivesUpWithoutStateChange(t *testing.T) {
	h := newHarness(t, setup{})
	id, res := h.send(retryChannel)
	h.wantState(id, res.Job, gmailrelay.StateSent)
	// Make the message invisible to search.
	h.srv.SetIndexLag(1000 * time.Hour)

	for range 9 {
		h.clock.Advance(grace)
		wantResult(t, h.sweep(), sweeper.Result{Checked: 1, Missed: 1})
	}
	h.clock.Advance(grace)
	wantResult(t, h.sweep(), sweeper.Result{Checked: 1})
	j := h.wantJob(id, gmailrelay.StateSent, 1, 1, 1)
	if j.Verified || !j.NextCheckAt.IsZero() {
		t.Errorf("verified %v, next check %v: want unverified and no check scheduled", j.Verified, j.NextCheckAt)
	}
	searches := h.lines(id, gmailrelay.KindSearch)
	if len(searches) != 10 || searches[9].Reason != sweeper.ReasonVerifyGaveUp || searches[9].State != "" {
		t.Errorf("search lines %+v, want the second with reason %s and no state", searches, sweeper.ReasonVerifyGaveUp)
	}
	h.clock.Advance(24 * time.Hour)
	wantResult(t, h.sweep(), sweeper.Result{})
}

// After a restart, a job left forwarding by a crash is recovered as
// unknown and reconciled: sent when Gmail has it, resent exactly once when
// it does not.
func TestRestartRecovery(t *testing.T) {
	tests := []struct {
		name                        string
		gmailHasIt                  bool
		want                        sweeper.Result
		wantAttempts, wantSendCalls int
		passes                      int
	}{
		{"gmail has it", true, sweeper.Result{Checked: 1, Found: 1}, 1, 1, 1},
		{"gmail does not", false, sweeper.Result{Checked: 2, Missed: 1, Resent: 1}, 2, 1, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, setup{})
			p := h.prepare(retryChannel)
			id := p.MessageID
			now := h.clock.Now()
			_, _, err := h.log.Mutate(h.ctx, id, func(cur *gmailrelay.Job) (gmailrelay.Change, error) {
				j := gmailrelay.Job{MessageID: id, Key: p.Key, Channel: retryChannel, Mailbox: "me", Fingerprint: p.Fingerprint,
					State: gmailrelay.StateForwarding, Attempts: 1, CreatedAt: now, UpdatedAt: now}
				return gmailrelay.Change{Job: &j, Raw: p.Raw, Lines: []gmailrelay.Line{
					{Kind: gmailrelay.KindReceived, Attempt: 1, Channel: retryChannel},
					{Kind: gmailrelay.KindForwarding, Attempt: 1, State: gmailrelay.StateForwarding},
				}}, nil
			})
			if err != nil {
				t.Fatalf("leave a job forwarding: %v", err)
			}
			if tt.gmailHasIt {
				if _, err := h.prov.Send(h.ctx, "me", p.Raw, ""); err != nil {
					t.Fatalf("direct send: %v", err)
				}
			}

			h.restart()
			delivered := 0
			if tt.gmailHasIt {
				delivered = 1
			}
			h.wantJob(id, gmailrelay.StateUnknown, 1, 0, delivered)
			var total sweeper.Result
			for range tt.passes {
				h.clock.Advance(grace)
				r := h.sweep()
				r.Due, r.Wait = 0, 0
				total.Checked += r.Checked
				total.Found += r.Found
				total.Missed += r.Missed
				total.Resent += r.Resent
			}
			wantResult(t, total, tt.want)
			h.wantJob(id, gmailrelay.StateSent, tt.wantAttempts, 1, 1)
			if got := h.srv.Stats().Calls[gmailfake.MethodSend]; got != tt.wantSendCalls {
				t.Errorf("send calls at the emulator: %d, want %d", got, tt.wantSendCalls)
			}
		})
	}
}

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
		h.wantJob(id, gmailrelay.StateSent, 1, 1, 1)
	}
	for _, id := range lost {
		if j := h.wantJob(id, gmailrelay.StateUnknown, 1, 0, 0); j.Checks != 1 {
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
		if h.job(id).State == gmailrelay.StateSent {
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
	h.wantState(id, res.Job, gmailrelay.StateFailed)

	h.clock.Advance(grace)
	wantResult(t, h.sweep(), sweeper.Result{Retried: 1}) // attempt 2 fails too
	h.wantJob(id, gmailrelay.StateFailed, 2, 0, 0)
	h.clock.Advance(grace)
	wantResult(t, h.sweep(), sweeper.Result{Retried: 1}) // attempt 3 fails too
	h.clock.Advance(grace)
	wantResult(t, h.sweep(), sweeper.Result{Reviewed: 1}) // max_attempts is 3
	h.wantJob(id, gmailrelay.StateReview, 3, 0, 0)
	if r := h.lines(id, gmailrelay.KindReview); len(r) != 1 || r[0].Reason != sweeper.ReasonMaxAttempts {
		t.Errorf("review lines %+v, want one with reason %s", r, sweeper.ReasonMaxAttempts)
	}

	// A retry that gets through ends sent with one message.
	id2, res := h.send(retryChannel) // the rule's count is used up: sent
	h.wantState(id2, res.Job, gmailrelay.StateSent)
	count = 1
	if _, err := h.faults.Add(faultmodes.Spec{Mode: faultmodes.FailBeforeForward, Count: &count}); err != nil {
		t.Fatalf("add fault rule: %v", err)
	}
	id3, res := h.send(retryChannel)
	h.wantState(id3, res.Job, gmailrelay.StateFailed)
	h.clock.Advance(grace)
	r := h.sweep()
	if r.Retried != 1 {
		t.Errorf("retried %d, want 1", r.Retried)
	}
	h.wantJob(id3, gmailrelay.StateSent, 2, 1, 1)
}

// Where Gmail was seen rewriting Message-IDs a search miss proves nothing:
// unknown jobs go to review without a search, and sent jobs are not
// verified.
func TestUntrustedHandle(t *testing.T) {
	h := newHarness(t, setup{})
	sent, res := h.send(retryChannel)
	h.wantState(sent, res.Job, gmailrelay.StateSent)
	unknown := h.sendAmbiguous(retryChannel)
	if _, _, err := h.log.Mutate(h.ctx, sent, func(*gmailrelay.Job) (gmailrelay.Change, error) {
		return gmailrelay.Change{Mailbox: &gmailrelay.Mailbox{Name: "default", HandleChecked: true, HandleUntrusted: true, Rewrites: 1}}, nil
	}); err != nil {
		t.Fatalf("mark the handle untrusted: %v", err)
	}
	h.clock.Advance(grace)
	// The unknown job goes to review without a search; the sent job is
	// still verified (two hits would prove a duplicate even here).
	wantResult(t, h.sweep(), sweeper.Result{Reviewed: 1, Checked: 1, Verified: 1})
	h.wantJob(unknown, gmailrelay.StateReview, 1, 0, 1)
	if r := h.lines(unknown, gmailrelay.KindReview); len(r) != 1 || r[0].Reason != sweeper.ReasonHandleUntrusted {
		t.Errorf("review lines %+v, want one with reason %s", r, sweeper.ReasonHandleUntrusted)
	}
	if j := h.wantJob(sent, gmailrelay.StateSent, 1, 1, 1); !confirmedOnce(j) {
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
	j := h.wantJob(id, gmailrelay.StateUnknown, 1, 0, 1)
	if len(h.lines(id, gmailrelay.KindSearch)) != 0 || j.Checks != 0 {
		t.Errorf("after a failed search: %d search lines, checks %d; want none", len(h.lines(id, gmailrelay.KindSearch)), j.Checks)
	}
	if !j.NextCheckAt.After(h.clock.Now()) || j.NextCheckAt.After(h.clock.Now().Add(grace)) {
		t.Errorf("next check %v: want a little after now (%v)", j.NextCheckAt, h.clock.Now())
	}
	wantResult(t, h.sweep(), sweeper.Result{}) // not due again at once
	h.clock.Advance(grace)
	wantResult(t, h.sweep(), sweeper.Result{Checked: 1, Found: 1})
	h.wantJob(id, gmailrelay.StateSent, 1, 1, 1)
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
		h.wantJob(id, gmailrelay.StateUnknown, 1, 0, 1)
		h.clock.Advance(r.Wait)
	}
	wantResult(t, h.sweep(), sweeper.Result{Checked: 1, Found: 1})
	h.wantJob(id, gmailrelay.StateSent, 1, 1, 1)
	if n := len(h.lines(id, gmailrelay.KindSearch)); n != 1 {
		t.Errorf("search lines %d, want 1 (a 429 is not a search)", n)
	}
}

// With a small Gmail budget, 500 unknown jobs are all resolved correctly by
// passes that stop when the budget is spent; Gmail's rate-limit answers
// never come twice in a pass (each one pauses the sweeper), and a send
// still gets through while the sweeper has work.
func TestQuota(t *testing.T) {
	tests := []struct {
		name          string
		relayQuota    int
		emulatorQuota int
		quotaStatus   int // the emulator's over-quota answer
		found, lost   int
		foreground    bool
	}{
		{"relay budget matches gmail", 600, 600, 429, 400, 100, true},
		{"gmail stricter than the relay budget, 429", 1200, 600, 429, 100, 20, false},
		{"gmail stricter than the relay budget, 403", 1200, 600, 403, 100, 20, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, setup{indexLag: 30 * time.Second, emulatorQuota: 1 << 30, quotaStatus: tt.quotaStatus, limit: 100})
			h.emulatorFault(gmailfake.Fault{Method: gmailfake.MethodSend, Action: gmailfake.ActionAcceptThenError, Status: 500, Count: tt.found})
			found := h.sendMany(tt.found, retryChannel)
			h.emulatorFault(gmailfake.Fault{Method: gmailfake.MethodSend, Action: gmailfake.ActionError, Status: 500, Count: tt.lost})
			lost := h.sendMany(tt.lost, retryChannel)

			// From now on Gmail's budget is small, and so is the relay's.
			unitsBefore := h.srv.Stats().QuotaUnits
			h.srv.SetQuotaPerMinute(tt.emulatorQuota)
			h.set.relayQuota = tt.relayQuota
			h.build(tt.relayQuota)
			h.clock.Advance(grace)

			var foreground string
			prevLimited := h.srv.Stats().RateLimited
			unresolved := func() int {
				st, err := h.log.Stats(h.ctx)
				if err != nil {
					t.Fatalf("stats: %v", err)
				}
				return st.ByState[gmailrelay.StateUnknown] + st.ByState[gmailrelay.StateFailed] + st.ByState[gmailrelay.StateForwarding]
			}
			pass := 0
			for ; unresolved() > 0; pass++ {
				if pass > 3000 {
					t.Fatalf("%d jobs unresolved after %d passes", unresolved(), pass)
				}
				r := h.sweep()
				limited := h.srv.Stats().RateLimited
				if limited-prevLimited > 1 {
					t.Fatalf("pass %d: %d rate-limit answers in one pass, want at most 1 (then pause)", pass, limited-prevLimited)
				}
				prevLimited = limited
				if tt.foreground && pass == 2 {
					id, res := h.send(retryChannel)
					h.wantState(id, res.Job, gmailrelay.StateSent)
					foreground = id
				}
				step := r.Wait
				if step <= 0 {
					step = 10 * time.Second
				}
				h.clock.Advance(step)
			}
			totals := h.sw.Totals()
			if totals.Found != tt.found || totals.Resent != tt.lost || totals.Reviewed != 0 || totals.Duplicates != 0 {
				t.Errorf("totals %+v: want %d found, %d resent, none reviewed", totals, tt.found, tt.lost)
			}
			for _, id := range found {
				h.wantJob(id, gmailrelay.StateSent, 1, 1, 1)
			}
			for _, id := range lost {
				// One ambiguous attempt and one resend; a resend that Gmail
				// refused with a rate limit sent nothing and was retried.
				j := h.job(id)
				h.wantJob(id, gmailrelay.StateSent, j.Attempts, 1, 1)
				limited := 0
				for _, l := range h.lines(id, gmailrelay.KindNotSent) {
					if l.Reason == "rate_limited" {
						limited++
					}
				}
				if j.Attempts-limited != 2 {
					t.Errorf("job %s: %d attempts, %d of them rate limited; want 2 others", id, j.Attempts, limited)
				}
			}
			if foreground != "" {
				h.wantJob(foreground, gmailrelay.StateSent, 1, 1, 1)
			}
			st := h.srv.Stats()
			if tt.relayQuota <= tt.emulatorQuota && st.RateLimited != 0 {
				t.Errorf("%d rate-limit answers although the relay's budget is within Gmail's", st.RateLimited)
			}
			// The relay's budget spends exactly what Gmail charged: asking
			// whether a search fits takes nothing (a peek, not a take).
			if got, want := h.te.Quota.Spent(), int64(st.QuotaUnits-unitsBefore); tt.relayQuota <= tt.emulatorQuota && got != want {
				t.Errorf("the relay's quota spent %d units, Gmail charged %d for the same calls", got, want)
			}
			t.Logf("%d passes, %v of fake time, emulator %+v, sweeper totals %+v", pass, h.clock.Now().Sub(testclock.New().Now()), st, totals)
		})
	}
}

// The loop runs a pass at start and another one on Wake, reported through
// Passes; Stop waits for it and is safe twice.
func TestStartWakeStop(t *testing.T) {
	h := newHarness(t, setup{})
	id := h.sendAmbiguous(retryChannel)
	h.sw.Stop() // before Start: nothing to stop

	ctx, cancel := context.WithCancel(h.ctx)
	defer cancel()
	h.sw.Start(ctx)
	h.sw.Start(ctx) // already started: nothing happens
	first := waitPass(t, h.sw)
	wantResult(t, first, sweeper.Result{})

	h.clock.Advance(grace)
	h.sw.Wake()
	second := waitPass(t, h.sw)
	wantResult(t, second, sweeper.Result{Checked: 1, Found: 1})
	h.wantJob(id, gmailrelay.StateSent, 1, 1, 1)

	h.sw.Stop()
	h.sw.Stop()
	if got := h.sw.Totals(); got.Found != 1 || got.Checked != 1 {
		t.Errorf("totals %+v, want the second pass's counts", got)
	}
	// Stopped: a Wake runs nothing, RunOnce still works.
	h.sw.Wake()
	wantResult(t, h.sweep(), sweeper.Result{})
	select {
	case r := <-h.sw.Passes():
		wantResult(t, r, sweeper.Result{})
	default:
		t.Errorf("RunOnce's pass was not reported on Passes")
	}
	select {
	case r := <-h.sw.Passes():
		t.Errorf("a pass ran after Stop: %+v", r)
	default:
	}
}

// waitPass waits for the next finished pass. The timeout only turns a hang
// into a failure; nothing waits on it in a passing run.
func waitPass(t *testing.T, sw *sweeper.Sweeper) sweeper.Result {
	t.Helper()
	select {
	case r := <-sw.Passes():
		return r
	case <-time.After(10 * time.Second):
		t.Fatalf("no pass finished")
	}
	return sweeper.Result{}
}
