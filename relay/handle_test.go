package relay_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/internal/testenv"
	"github.com/gmailrelay/gmailrelay/relay"
)

// A log written before mailboxes had names keeps the default mailbox's
// record under its Gmail userId ("me"): after the upgrade the default
// mailbox carries it on, so a mailbox found to rewrite Message-IDs stays
// untrusted.
func TestUpgradeKeepsTheDefaultMailboxsTrust(t *testing.T) {
	e := testenv.New(t, testenv.Options{})
	ctx := context.Background()
	old := gmailrelay.Mailbox{Name: "me", HandleChecked: true, HandleUntrusted: true, Rewrites: 3}
	if _, _, err := e.Log.Mutate(ctx, "<old@x.test>", func(*gmailrelay.Job) (gmailrelay.Change, error) {
		return gmailrelay.Change{Mailbox: &old}, nil
	}); err != nil {
		t.Fatal(err)
	}
	e.Restart()
	got, err := e.Log.Mailbox(ctx, "default")
	if err != nil {
		t.Fatal(err)
	}
	if want := (gmailrelay.Mailbox{Name: "default", HandleChecked: true, HandleUntrusted: true, Rewrites: 3}); got != want {
		t.Errorf("default mailbox after the upgrade = %+v, want %+v", got, want)
	}
	if st, _ := e.Log.Stats(ctx); st.Jobs != 0 {
		t.Errorf("the record move left %d jobs in the log", st.Jobs)
	}
}

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
	together(len(ids), func(i int) {
		id, stored := ids[i], ids[i] // kept
		if i%2 == 0 {
			stored = "<rewritten-" + fmt.Sprint(i) + "@mail.gmail.com>"
		}
		if err := e.svc.RecordHandle(ctx, id, stored); err != nil {
			t.Error(err)
		}
	})
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
			if l.Kind == gmailrelay.KindHandle && l.HandleKept != nil && !*l.HandleKept {
				rewritten++
			}
		}
	}
	if rewritten != n {
		t.Errorf("rewritten handle lines = %d, want %d", rewritten, n)
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

func TestEmulatorRewrittenMessageIDMarksHandleUntrusted(t *testing.T) {
	e := newEnv(t, gmailfake.Options{RewriteMessageID: true})
	ctx := context.Background()
	p := e.prepare("rewrite", "x")
	if _, err := e.svc.Send(ctx, p, relay.SendOptions{}); err != nil {
		t.Fatal(err)
	}
	lines := e.lines(p.MessageID)
	var handle *gmailrelay.Line
	for i := range lines {
		if lines[i].Kind == gmailrelay.KindHandle {
			handle = &lines[i]
		}
	}
	if handle == nil || handle.HandleKept == nil || *handle.HandleKept || handle.StoredMessageID == p.MessageID {
		t.Fatalf("handle line = %+v, want one saying the id was not kept", handle)
	}
	mb, err := e.log.Mailbox(ctx, "default")
	if err != nil || !mb.HandleUntrusted || mb.Rewrites != 1 {
		t.Errorf("mailbox = %+v (%v), want untrusted with 1 rewrite", mb, err)
	}
	st, err := e.log.Stats(ctx)
	if err != nil || st.ByReason[gmailrelay.KindHandle]["rewritten"] != 1 {
		t.Errorf("stats handle reasons = %v (%v), want rewritten: 1", st.ByReason[gmailrelay.KindHandle], err)
	}
}

func TestEmulatorHandleKeptIsCheckedOncePerMailbox(t *testing.T) {
	e := newEnv(t, gmailfake.Options{})
	ctx := context.Background()
	for i := range 3 {
		if _, err := e.svc.Send(ctx, e.prepare(fmt.Sprint("kept-", i), "x"), relay.SendOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if got := e.emu.Stats().Calls["get"]; got != 1 {
		t.Errorf("messages.get calls = %d, want 1 (verify_handle: first)", got)
	}
	mb, _ := e.log.Mailbox(ctx, "default")
	if !mb.HandleChecked || mb.HandleUntrusted {
		t.Errorf("mailbox = %+v, want checked and trusted", mb)
	}
}
