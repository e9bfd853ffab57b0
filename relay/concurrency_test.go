package relay_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay/acceptlog"
	"github.com/gmailrelay/gmailrelay/faultmodes"
	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/relay"
)

// Concurrent read-backs, some kept and some rewritten, must never lose a
// rewrite: the mailbox ends untrusted and counts every rewrite. Before the
// read-modify-write moved inside one Mutate, a kept read-back that read the
// mailbox before a rewritten one wrote it put HandleUntrusted back to false.
func TestConcurrentRecordHandleNeverForgetsARewrite(t *testing.T) {
	e := newEnv(t, gmailfake.Options{})
	ctx := context.Background()
	const n = 16
	ids := make([]string, 2*n)
	for i := range ids {
		p := e.prepare(fmt.Sprint("handle-", i), "x")
		p.Channel = "billing"
		if _, err := e.svc.Send(ctx, p, relay.SendOptions{}); err != nil {
			t.Fatal(err)
		}
		ids[i] = p.MessageID
	}
	before, err := e.log.Mailbox(ctx, "default")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stored := id // kept
			if i%2 == 0 {
				stored = "<rewritten-" + fmt.Sprint(i) + "@mail.gmail.com>"
			}
			if err := e.svc.RecordHandle(ctx, id, stored); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	mb, err := e.log.Mailbox(ctx, "default")
	if err != nil {
		t.Fatal(err)
	}
	if !mb.HandleUntrusted || !mb.HandleChecked {
		t.Errorf("mailbox = %+v, want checked and untrusted after %d rewritten read-backs", mb, n)
	}
	if got, want := mb.Rewrites, before.Rewrites+n; got != want {
		t.Errorf("rewrites = %d, want %d", got, want)
	}
	rewritten := 0
	for _, id := range ids {
		for _, l := range e.lines(id) {
			if l.Kind == acceptlog.KindHandle && l.HandleKept != nil && !*l.HandleKept {
				rewritten++
			}
		}
	}
	if rewritten != n {
		t.Errorf("rewritten handle lines = %d, want %d", rewritten, n)
	}
}

// Concurrent identical requests, of which one attempts and the others get
// 409 or a replay, spend the quota of one send and the fault rule's count
// once, on the attempt that was made. Before the fix each of them took a
// send's units (and a count: 1 rule could fire for a request that then
// attempted nothing).
func TestConcurrentDuplicatesSpendQuotaAndFaultCountOnce(t *testing.T) {
	e := newEnv(t, gmailfake.Options{})
	ctx := context.Background()
	e.policy.VerifyHandle = "never"
	one := 1
	if _, err := e.faults.Add(faultmodes.Spec{Mode: faultmodes.ForwardThenDropResponse, Count: &one}); err != nil {
		t.Fatal(err)
	}
	p := e.prepare("dup-quota", "x")
	q := e.svc.Quota()
	before := q.Spent()
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, _ = e.svc.Send(ctx, p, relay.SendOptions{})
		}()
	}
	close(start)
	wg.Wait()
	lines := e.lines(p.MessageID)
	fwd, faults := count(lines, acceptlog.KindForwarding), count(lines, acceptlog.KindFault)
	if fwd != 1 || faults != 1 {
		t.Errorf("forwarding lines = %d, fault lines = %d, want 1 and 1", fwd, faults)
	}
	if got, want := q.Spent()-before, int64(relay.UnitsSend*fwd); got != want {
		t.Errorf("quota spent = %d, want %d (one send per attempt made)", got, want)
	}
}

// A resolve retry refused for quota writes nothing: before the fix the
// resolved line was committed first, so the log said a retry happened
// that did not.
func TestResolveRetryRefusedForQuotaWritesNoResolvedLine(t *testing.T) {
	e := newEnv(t, gmailfake.Options{})
	ctx := context.Background()
	p := e.inReview(ctx, "resolve-quota")
	before := len(e.lines(p.MessageID))
	e.svc.Quota().Pause(time.Hour)
	_, err := e.svc.Resolve(ctx, p.MessageID, relay.ActionRetry, "try again", "op")
	if relay.ErrorCode(err) != relay.CodeRateLimited {
		t.Fatalf("resolve retry with no quota: %v, want rate_limited", err)
	}
	lines := e.lines(p.MessageID)
	if got := count(lines, acceptlog.KindResolved); got != 0 || len(lines) != before {
		t.Errorf("resolved lines = %d, lines %d → %d; want nothing written", got, before, len(lines))
	}
	if got := e.emu.Count(p.MessageID); got != 1 {
		t.Errorf("emulator holds %d, want 1", got)
	}
}

// verify_handle: first checks the first send of each mailbox after the
// relay starts (policy's doc), so a restart checks again. Before, the
// mailbox's stored HandleChecked suppressed every later check forever.
func TestVerifyHandleFirstChecksAgainAfterARestart(t *testing.T) {
	e := newEnv(t, gmailfake.Options{})
	ctx := context.Background()
	if _, err := e.svc.Send(ctx, e.prepare("first-a", "x"), relay.SendOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := e.log.Close(); err != nil {
		t.Fatal(err)
	}
	e.open(e.emuURL)
	for _, k := range []string{"first-b", "first-c"} {
		if _, err := e.svc.Send(ctx, e.prepare(k, "x"), relay.SendOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if got := e.emu.Stats().Calls["get"]; got != 2 {
		t.Errorf("messages.get calls = %d, want 2 (one per start)", got)
	}
}
