package relay_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/gmailrelay/gmailrelay/acceptlog"
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
	before, err := e.log.Mailbox(ctx, "me")
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
	mb, err := e.log.Mailbox(ctx, "me")
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
