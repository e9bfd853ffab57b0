package e2e_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/e2e"
	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/relay"
)

// These tests run the real gmailrelay binary against the Gmail emulator.
// What they prove are emulator results: the relay's logic holds against a
// provider that behaves as the emulator does, not a guarantee about Gmail.

// linesOf returns the lines of kind k.
func linesOf(lines []gmailrelay.Line, k gmailrelay.Kind) []gmailrelay.Line {
	var out []gmailrelay.Line
	for _, l := range lines {
		if l.Kind == k {
			out = append(out, l)
		}
	}
	return out
}

// wantJob checks a job's state, attempts, forwarding and effect lines and
// the emulator's deliveries of it.
func wantJob(t *testing.T, r *relayProc, id string, state gmailrelay.State, attempts, forwarding, effects, deliveries int) e2e.Job {
	t.Helper()
	j := r.Job(t, id)
	if j.State != state {
		t.Errorf("job state = %s, want %s (lines %s)", j.State, state, kindList(j.Lines))
	}
	if j.Attempts != attempts {
		t.Errorf("job attempts = %d, want %d", j.Attempts, attempts)
	}
	if got := len(linesOf(j.Lines, gmailrelay.KindForwarding)); got != forwarding {
		t.Errorf("forwarding lines = %d, want %d (lines %s)", got, forwarding, kindList(j.Lines))
	}
	if got := len(linesOf(j.Lines, gmailrelay.KindEffect)); got != effects {
		t.Errorf("effect lines = %d, want %d (lines %s)", got, effects, kindList(j.Lines))
	}
	if got := r.Emu.Deliveries(id); got != deliveries {
		t.Errorf("emulator deliveries of %s = %d, want %d", id, got, deliveries)
	}
	return j
}

// kindList renders lines as "kind(reason) kind ..." for failure messages.
func kindList(lines []gmailrelay.Line) string {
	s := ""
	for _, l := range lines {
		s += string(l.Kind)
		if l.Reason != "" {
			s += "(" + string(l.Reason) + ")"
		}
		s += " "
	}
	return s
}

// wantClean runs the checker over everything the relay and the emulator
// hold, with the callers' history.
func wantClean(t *testing.T, r *relayProc, history []e2e.Op) {
	t.Helper()
	rep := e2e.Check(r.Observe(t, history))
	for _, v := range rep.Violations {
		t.Errorf("checker: %s", v)
	}
}

// startWithRule starts a relay with one relay fault rule of mode on key,
// firing once when once is set, and returns it with the key's Message-ID.
func startWithRule(t *testing.T, mode, key string, once bool) (*relayProc, string) {
	t.Helper()
	r := startRelay(t, relayOptions{})
	rule := fmt.Sprintf(`{"mode":%q,"key":%q}`, mode, key)
	if once {
		rule = fmt.Sprintf(`{"mode":%q,"key":%q,"count":1}`, mode, key)
	}
	r.AddFault(t, rule)
	return r, msgID(key)
}

// wantOneLine checks that lines hold exactly one line of kind k, with
// reason why.
func wantOneLine(t *testing.T, lines []gmailrelay.Line, k gmailrelay.Kind, why gmailrelay.Reason) {
	t.Helper()
	if got := linesOf(lines, k); len(got) != 1 || got[0].Reason != why {
		t.Errorf("%s lines = %s, want one with reason %s", k, kindList(got), why)
	}
}

// wantOneSendCall checks that the emulator was asked to send once in all
// (why, when not empty, says what a second call would have been).
func wantOneSendCall(t *testing.T, r *relayProc, why string) {
	t.Helper()
	if got := r.Emu.Stats().Calls[gmailfake.MethodSend]; got != 1 {
		if why != "" {
			why = " (" + why + ")"
		}
		t.Errorf("emulator send calls = %d, want 1%s", got, why)
	}
}

// wantSentFrom sweeps r to quiescence and checks that the job ends sent
// after attempts attempts, with one forwarding line, one effect line found
// by source and one emulator message; then runs the checker over history.
func wantSentFrom(t *testing.T, r *relayProc, id string, attempts int, source string, history ...e2e.Op) {
	t.Helper()
	r.SweepUntilQuiet(t)
	j := wantJob(t, r, id, gmailrelay.StateSent, attempts, 1, 1, 1)
	if got := linesOf(j.Lines, gmailrelay.KindEffect)[0].Source; got != source {
		t.Errorf("effect source = %q, want %q", got, source)
	}
	wantClean(t, r, history)
}

func TestEmulatorFailBeforeForwardRetrySendsOnce(t *testing.T) {
	t.Parallel()
	key := "cus_1:order.shipped:fail-before-forward"
	r, id := startWithRule(t, "fail-before-forward", key, true)

	first := r.Send(request(key, ""), 1, 1)
	if first.Status != http.StatusServiceUnavailable {
		t.Fatalf("first try: %s, want 503", opString(first))
	}
	j := wantJob(t, r, id, gmailrelay.StateFailed, 1, 0, 0, 0)
	if !j.Retryable {
		t.Errorf("failed job retryable = false, want true")
	}
	second := r.Send(request(key, ""), 1, 2)
	if second.Outcome != e2e.OK {
		t.Fatalf("retry: %s, want 200 sent", opString(second))
	}
	wantSentFrom(t, r, id, 2, gmailrelay.SourceResponse, first, second)
}

func TestEmulatorDropResponseFoundByMessageIDNoResend(t *testing.T) {
	t.Parallel()
	key := "cus_1:order.shipped:drop-response"
	r, id := startWithRule(t, "forward-then-drop-response", key, true)

	first := r.Send(request(key, ""), 1, 1)
	if first.Outcome != e2e.Info || first.Status != 0 {
		t.Fatalf("first try: %s, want no answer (connection cut)", opString(first))
	}
	wantJob(t, r, id, gmailrelay.StateUnknown, 1, 1, 0, 1)
	retry := r.Send(request(key, ""), 1, 2)
	if retry.Status != http.StatusAccepted || retry.State != string(gmailrelay.StateUnknown) {
		t.Fatalf("caller retry: %s, want 202 unknown", opString(retry))
	}
	r.SweepUntilQuiet(t)
	j := wantJob(t, r, id, gmailrelay.StateSent, 1, 1, 1, 1)
	eff := linesOf(j.Lines, gmailrelay.KindEffect)[0]
	if eff.Source != gmailrelay.SourceSearch {
		t.Errorf("effect source = %q, want %q (found by Message-ID)", eff.Source, gmailrelay.SourceSearch)
	}
	if want := r.Emu.Messages(id)[0].ID; eff.GmailID != want {
		t.Errorf("effect gmail id = %q, want the emulator's %q", eff.GmailID, want)
	}
	wantOneSendCall(t, r, "no resend")
	wantClean(t, r, []e2e.Op{first, retry})
}

func TestEmulatorForwardAndRespondSweeperOnlyVerifies(t *testing.T) {
	t.Parallel()
	key := "cus_1:order.shipped:forward-and-respond"
	r, id := startWithRule(t, "forward-and-respond", key, false)

	op := r.Send(request(key, ""), 1, 1)
	if op.Outcome != e2e.OK {
		t.Fatalf("send: %s, want 200 sent", opString(op))
	}
	before := wantJob(t, r, id, gmailrelay.StateSent, 1, 1, 1, 1)
	listsBefore := r.Emu.Stats().Calls[gmailfake.MethodList]
	r.SweepUntilQuiet(t)
	after := wantJob(t, r, id, gmailrelay.StateSent, 1, 1, 1, 1)
	if len(after.Lines) < len(before.Lines) {
		t.Fatalf("lines shrank from %d to %d", len(before.Lines), len(after.Lines))
	}
	for i, l := range before.Lines {
		if after.Lines[i].Seq != l.Seq || after.Lines[i].Kind != l.Kind {
			t.Errorf("line %d changed: %v -> %v", i, l, after.Lines[i])
		}
	}
	added := after.Lines[len(before.Lines):]
	// The verify search and its late look (a second copy Gmail indexed
	// late would show there), each with one hit; nothing else.
	if len(added) != 2 || added[0].Kind != gmailrelay.KindSearch || added[0].Reason != "verified" || added[0].SentHits != 1 ||
		added[1].Kind != gmailrelay.KindSearch || added[1].Reason != "verified" || added[1].SentHits != 1 {
		t.Errorf("lines the sweeper added = %s, want exactly the verify search and its late look, one hit each", kindList(added))
	}
	if got := r.Emu.Stats().Calls[gmailfake.MethodList] - listsBefore; got != 2 {
		t.Errorf("searches by the sweeper = %d, want 2 (the verify pass and its late look)", got)
	}
	wantOneSendCall(t, r, "")
	wantClean(t, r, []e2e.Op{op})
}

func TestEmulatorReviewChannelNeverAutoRetries(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		fault      func(t *testing.T, r *relayProc, key string)
		wantReason gmailrelay.Reason
		deliveries int
	}{
		{
			name: "dropped response, message stored",
			fault: func(t *testing.T, r *relayProc, key string) {
				r.AddFault(t, fmt.Sprintf(`{"mode":"forward-then-drop-response","key":%q,"count":1}`, key))
			},
			wantReason: "review_channel", deliveries: 1,
		},
		{
			name: "gmail 500, nothing stored",
			fault: func(t *testing.T, r *relayProc, key string) {
				if _, err := r.Emu.AddFault(gmailfake.Fault{Method: gmailfake.MethodSend, Action: gmailfake.ActionError, Status: 500}); err != nil {
					t.Fatal(err)
				}
			},
			wantReason: "missing_after_checks", deliveries: 0,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := startRelay(t, relayOptions{})
			key := "cus_1:invoice.paid:review"
			id := msgID(key)
			tc.fault(t, r, key)
			first := r.Send(request(key, "billing"), 1, 1)
			if first.Outcome != e2e.Info {
				t.Fatalf("first try: %s, want an unknown outcome", opString(first))
			}
			wantJob(t, r, id, gmailrelay.StateUnknown, 1, 1, 0, tc.deliveries)
			retry := r.Send(request(key, "billing"), 1, 2)
			if retry.Status != http.StatusAccepted {
				t.Fatalf("caller retry: %s, want 202", opString(retry))
			}
			r.SweepUntilQuiet(t)
			// More sweeps must not change anything: review waits for a human.
			for range 3 {
				r.Advance(t, 10*grace)
				r.Sweep(t)
			}
			// A copy found in the mailbox is Gmail's acceptance: its effect
			// line (source search) is written with the review.
			j := wantJob(t, r, id, gmailrelay.StateReview, 1, 1, tc.deliveries, tc.deliveries)
			wantOneLine(t, j.Lines, gmailrelay.KindReview, tc.wantReason)
			wantOneSendCall(t, r, "never auto-retried")
			wantClean(t, r, []e2e.Op{first, retry})
		})
	}
}

// TestEmulatorCrashAfterForwardRecoversOnRestart is the real crash of
// crash-after-forward (docs/design.md#fault-modes): the process really dies after Gmail accepted and before anything was
// logged; the restarted relay finds the job forwarding, makes it unknown,
// and the sweeper finds the message instead of sending it again.
func TestEmulatorCrashAfterForwardRecoversOnRestart(t *testing.T) {
	t.Parallel()
	key := "cus_1:order.shipped:crash-after-forward"
	r, id := startWithRule(t, "crash-after-forward", key, true)

	first := r.Send(request(key, ""), 1, 1)
	if first.Outcome != e2e.Info || first.Status != 0 {
		t.Fatalf("first try: %s, want no answer (the relay died)", opString(first))
	}
	r.WaitExit(t)
	if got := r.Emu.Deliveries(id); got != 1 {
		t.Fatalf("emulator deliveries before restart = %d, want 1 (Gmail accepted)", got)
	}
	r.Restart(t)
	j := wantJob(t, r, id, gmailrelay.StateUnknown, 1, 1, 0, 1)
	wantOneLine(t, j.Lines, gmailrelay.KindAmbiguous, "recovered_after_restart")
	retry := r.Send(request(key, ""), 1, 2)
	if retry.Status != http.StatusAccepted {
		t.Fatalf("caller retry after restart: %s, want 202 (no resend)", opString(retry))
	}
	wantSentFrom(t, r, id, 1, gmailrelay.SourceSearch, first, retry)
}

// TestEmulatorCrashPoints SIGKILLs the relay at each point of the send
// path, on a retry channel and on a review channel, restarts it on the same
// data file and sweeps to quiescence. Every job must end sent with exactly
// one emulator delivery, or in review — never two deliveries.
func TestEmulatorCrashPoints(t *testing.T) {
	t.Parallel()
	const rule = "crash-after-forward rule"
	type want struct {
		restart      gmailrelay.State // right after the restart
		final        gmailrelay.State
		deliveries   int // at the emulator, from the crash on
		finalAttempt int
	}
	tests := []struct {
		point   string
		channel string
		want    want
	}{
		{relay.CrashAfterForwardingLogged, "default", want{gmailrelay.StateUnknown, gmailrelay.StateSent, 0, 2}},
		{relay.CrashAfterForwardingLogged, "billing", want{gmailrelay.StateUnknown, gmailrelay.StateReview, 0, 1}},
		{relay.CrashAfterGmailAnswer, "default", want{gmailrelay.StateUnknown, gmailrelay.StateSent, 1, 1}},
		{relay.CrashAfterGmailAnswer, "billing", want{gmailrelay.StateUnknown, gmailrelay.StateReview, 1, 1}},
		{relay.CrashAfterOutcomeLogged, "default", want{gmailrelay.StateSent, gmailrelay.StateSent, 1, 1}},
		{relay.CrashAfterOutcomeLogged, "billing", want{gmailrelay.StateSent, gmailrelay.StateSent, 1, 1}},
		{rule, "default", want{gmailrelay.StateUnknown, gmailrelay.StateSent, 1, 1}},
		{rule, "billing", want{gmailrelay.StateUnknown, gmailrelay.StateReview, 1, 1}},
	}
	for _, tc := range tests {
		t.Run(tc.point+"/"+tc.channel, func(t *testing.T) {
			t.Parallel()
			crashAt := tc.point
			if tc.point == rule {
				crashAt = ""
			}
			r := startRelay(t, relayOptions{crashAt: crashAt})
			key := "cus_2:crash:" + tc.point + ":" + tc.channel
			id := msgID(key)
			if tc.point == rule {
				r.AddFault(t, fmt.Sprintf(`{"mode":"crash-after-forward","key":%q,"count":1}`, key))
			}
			first := r.Send(request(key, tc.channel), 1, 1)
			r.WaitExit(t)
			if first.Outcome != e2e.Info || first.Status != 0 {
				t.Errorf("first try: %s, want no answer", opString(first))
			}
			if got := r.Emu.Deliveries(id); got != tc.want.deliveries {
				t.Errorf("emulator deliveries at the crash = %d, want %d", got, tc.want.deliveries)
			}
			r.Restart(t)
			j := r.Job(t, id)
			if j.State != tc.want.restart {
				t.Errorf("state after restart = %s, want %s (lines %s)", j.State, tc.want.restart, kindList(j.Lines))
			}
			if j.State == gmailrelay.StateUnknown {
				wantOneLine(t, j.Lines, gmailrelay.KindAmbiguous, "recovered_after_restart")
			}
			retry := r.Send(request(key, tc.channel), 1, 2)
			switch tc.want.restart {
			case gmailrelay.StateSent:
				// The log has it sent although the caller saw no answer:
				// the retry gets the stored result.
				if retry.Outcome != e2e.OK {
					t.Errorf("caller retry: %s, want 200 sent (replayed)", opString(retry))
				}
			default:
				if retry.Status != http.StatusAccepted {
					t.Errorf("caller retry: %s, want 202 (the relay owns the ambiguous job)", opString(retry))
				}
			}
			r.SweepUntilQuiet(t)
			effects := 0
			if tc.want.final == gmailrelay.StateSent || tc.want.final == gmailrelay.StateReview && tc.want.deliveries > 0 {
				effects = 1 // a review channel's copy found once: its effect line comes with the review
			}
			j = wantJob(t, r, id, tc.want.final, tc.want.finalAttempt, tc.want.finalAttempt, effects, max(tc.want.deliveries, effects))
			t.Logf("emulator result: crash %s on %s: caller saw [%s] then [%s]; log after restart %s; final %s after %d attempt(s); emulator deliveries %d",
				tc.point, tc.channel, opString(first), opString(retry), tc.want.restart, j.State, j.Attempts, r.Emu.Deliveries(id))
			wantClean(t, r, []e2e.Op{first, retry})
		})
	}
}
