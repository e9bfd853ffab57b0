package sweeper_test

import (
	"strings"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay/acceptlog"
	"github.com/gmailrelay/gmailrelay/faultmodes"
	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/relay"
	"github.com/gmailrelay/gmailrelay/sweeper"
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
			h.wantState(id, res.Job, acceptlog.StateUnknown)
			return id
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, setup{indexLag: 90 * time.Second})
			id := tt.send(h)
			h.wantJob(id, acceptlog.StateUnknown, 1, 0, 1)

			// Before grace: not due, nothing searched.
			wantResult(t, h.sweep(), sweeper.Result{})
			if got := h.srv.Stats().Calls[gmailfake.MethodList]; got != 0 {
				t.Errorf("list calls before grace: %d, want 0", got)
			}

			// After grace but inside the index lag: a miss, no resend.
			h.clock.Advance(grace)
			wantResult(t, h.sweep(), sweeper.Result{Checked: 1, Missed: 1})
			j := h.wantJob(id, acceptlog.StateUnknown, 1, 0, 1)
			if j.Checks != 1 {
				t.Errorf("checks after the first miss: %d, want 1", j.Checks)
			}
			searches := h.lines(id, acceptlog.KindSearch)
			if len(searches) != 1 || searches[0].Hits != 0 || searches[0].Check != 1 ||
				!strings.Contains(searches[0].Query, `rfc822msgid:"`+strings.Trim(id, "<>")+`"`) {
				t.Fatalf("search lines after the first miss: %+v", searches)
			}

			// After the lag: found once → sent, verified, no resend.
			h.clock.Advance(grace)
			wantResult(t, h.sweep(), sweeper.Result{Checked: 1, Found: 1})
			j = h.wantJob(id, acceptlog.StateSent, 1, 1, 1)
			msgs := h.srv.Messages(id)
			if j.GmailID != msgs[0].ID || !confirmedOnce(j) {
				t.Errorf("sent job: gmail id %q (emulator %q), verified %v, next check %v", j.GmailID, msgs[0].ID, j.Verified, j.NextCheckAt)
			}
			effect := h.lines(id, acceptlog.KindEffect)[0]
			if effect.Source != acceptlog.SourceSearch || effect.GmailID != msgs[0].ID || effect.State != acceptlog.StateSent {
				t.Errorf("effect line %+v, want source search, gmail id %s, state sent", effect, msgs[0].ID)
			}
			if got := h.srv.Stats().Calls[gmailfake.MethodSend]; got != 1 {
				t.Errorf("send calls at the emulator: %d, want 1", got)
			}

			// The late look finds one copy still; then nothing more to do, ever.
			h.lateLookDone(id)
			h.clock.Advance(24 * time.Hour)
			wantResult(t, h.sweep(), sweeper.Result{})
			h.wantJob(id, acceptlog.StateSent, 1, 1, 1)
		})
	}
}

// On a review-only channel the sweeper never forwards again: found once, the
// job goes to review with the search as evidence, and a human's mark-sent
// closes it; missing after the checks, it goes to review too.
func TestReviewChannelNeverResends(t *testing.T) {
	t.Run("found", func(t *testing.T) {
		h := newHarness(t, setup{indexLag: 30 * time.Second})
		id := h.sendAmbiguous(reviewChannel)
		h.clock.Advance(grace)
		wantResult(t, h.sweep(), sweeper.Result{Checked: 1, Found: 1, Reviewed: 1})
		h.wantJob(id, acceptlog.StateReview, 1, 0, 1)
		reviews := h.lines(id, acceptlog.KindReview)
		msgs := h.srv.Messages(id)
		if len(reviews) != 1 {
			t.Fatalf("review lines: %+v, want one", reviews)
		}
		r := reviews[0]
		if r.Reason != sweeper.ReasonReviewChannel || r.SentHits != 1 || r.GmailID != msgs[0].ID || r.Query == "" || r.State != acceptlog.StateReview {
			t.Errorf("review line %+v: want reason %s with the search evidence (1 SENT hit, gmail id %s)", r, sweeper.ReasonReviewChannel, msgs[0].ID)
		}

		h.clock.Advance(24 * time.Hour)
		wantResult(t, h.sweep(), sweeper.Result{})
		if got := h.srv.Stats().Calls[gmailfake.MethodSend]; got != 1 {
			t.Errorf("send calls: %d, want 1 (never a second forward)", got)
		}

		res, err := h.svc.Resolve(h.ctx, id, relay.ActionMarkSent, "found it in the mailbox", "ops@example.com")
		if err != nil {
			t.Fatalf("resolve mark-sent: %v", err)
		}
		h.wantState(id, res.Job, acceptlog.StateSent)
		h.wantJob(id, acceptlog.StateSent, 1, 1, 1)
		h.clock.Advance(24 * time.Hour)
		wantResult(t, h.sweep(), sweeper.Result{})
	})
	t.Run("missing after checks", func(t *testing.T) {
		h := newHarness(t, setup{})
		id := h.sendLost(reviewChannel)
		h.clock.Advance(grace)
		wantResult(t, h.sweep(), sweeper.Result{Checked: 1, Reviewed: 1})
		h.wantJob(id, acceptlog.StateReview, 1, 0, 0)
		reviews := h.lines(id, acceptlog.KindReview)
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
	h.wantJob(id, acceptlog.StateUnknown, 1, 0, 0)

	h.clock.Advance(grace)
	wantResult(t, h.sweep(), sweeper.Result{Checked: 1, Missed: 1})
	h.clock.Advance(grace / 2)
	wantResult(t, h.sweep(), sweeper.Result{}) // the next check waits a full grace
	h.wantJob(id, acceptlog.StateUnknown, 1, 0, 0)

	h.clock.Advance(grace / 2)
	wantResult(t, h.sweep(), sweeper.Result{Checked: 1, Resent: 1})
	j := h.wantJob(id, acceptlog.StateSent, 2, 1, 1)
	if got := h.srv.Messages(id)[0].MessageID; got != id {
		t.Errorf("resent Message-ID %s, want %s", got, id)
	}
	received := h.lines(id, acceptlog.KindReceived)
	if len(received) != 2 || received[1].Reason != sweeper.ReasonResend || received[1].Attempt != 2 {
		t.Errorf("received lines %+v, want a second one for attempt 2 with reason %s", received, sweeper.ReasonResend)
	}
	if searches := h.lines(id, acceptlog.KindSearch); len(searches) != 2 || searches[1].Check != 2 {
		t.Errorf("search lines %+v, want checks 1 and 2", searches)
	}

	// The verify pass confirms the resend once the index has it.
	if j.Verified {
		t.Fatalf("a sent-by-response job starts unverified")
	}
	h.clock.Advance(grace)
	wantResult(t, h.sweep(), sweeper.Result{Checked: 1, Verified: 1})
	if j := h.wantJob(id, acceptlog.StateSent, 2, 1, 1); !confirmedOnce(j) {
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
		h.wantState(id, res.Job, acceptlog.StateUnknown)

		h.wantDuplicateReview(id, 0)
		h.clock.Advance(24 * time.Hour)
		wantResult(t, h.sweep(), sweeper.Result{})
		if got := h.srv.Count(id); got != 2 {
			t.Errorf("emulator messages %d, want 2 (no resend)", got)
		}
	})
	t.Run("verify pass", func(t *testing.T) {
		h := newHarness(t, setup{})
		h.emulatorFault(gmailfake.Fault{Method: gmailfake.MethodSend, Action: gmailfake.ActionDuplicate})
		id, res := h.send(retryChannel)
		h.wantState(id, res.Job, acceptlog.StateSent)

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
	h.wantState(id, res.Job, acceptlog.StateSent)
	// Make the message invisible to search.
	h.srv.SetIndexLag(1000 * time.Hour)

	for range 9 {
		h.clock.Advance(grace)
		wantResult(t, h.sweep(), sweeper.Result{Checked: 1, Missed: 1})
	}
	h.clock.Advance(grace)
	wantResult(t, h.sweep(), sweeper.Result{Checked: 1})
	j := h.wantJob(id, acceptlog.StateSent, 1, 1, 1)
	if j.Verified || !j.NextCheckAt.IsZero() {
		t.Errorf("verified %v, next check %v: want unverified and no check scheduled", j.Verified, j.NextCheckAt)
	}
	searches := h.lines(id, acceptlog.KindSearch)
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
			_, _, err := h.log.Mutate(h.ctx, id, func(cur *acceptlog.Job) (acceptlog.Change, error) {
				j := acceptlog.Job{MessageID: id, Key: p.Key, Channel: retryChannel, Mailbox: "me", Fingerprint: p.Fingerprint,
					State: acceptlog.StateForwarding, Attempts: 1, CreatedAt: now, UpdatedAt: now}
				return acceptlog.Change{Job: &j, Raw: p.Raw, Lines: []acceptlog.Line{
					{Kind: acceptlog.KindReceived, Attempt: 1, Channel: retryChannel},
					{Kind: acceptlog.KindForwarding, Attempt: 1, State: acceptlog.StateForwarding},
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
			h.wantJob(id, acceptlog.StateUnknown, 1, 0, h.srv.Count(id))
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
			h.wantJob(id, acceptlog.StateSent, tt.wantAttempts, 1, 1)
			if got := h.srv.Stats().Calls[gmailfake.MethodSend]; got != tt.wantSendCalls {
				t.Errorf("send calls at the emulator: %d, want %d", got, tt.wantSendCalls)
			}
		})
	}
}
