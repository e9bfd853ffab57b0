package logtest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay"
)

// EditMailbox: a mailbox's record is edited on its own, durable across a
// reopen; concurrent edits all land (none lost); a job change's
// EditMailbox and a record edit see each other; an empty name is refused.
func testEditMailbox(t *testing.T, be Backend) {
	ctx := context.Background()
	l, reopen := be.openReopen(t)
	ed, ok := l.(gmailrelay.MailboxEditor)
	if !ok {
		t.Fatalf("%T does not implement gmailrelay.MailboxEditor", l)
	}
	since := t0.Add(time.Minute)
	mb, err := ed.EditMailbox(ctx, "billing", func(m *gmailrelay.Mailbox) {
		m.History = gmailrelay.HistoryCursor{ID: 1000, Since: since}
	})
	if err != nil {
		t.Fatal(err)
	}
	if mb.Name != "billing" || mb.History.ID != 1000 {
		t.Fatalf("EditMailbox returned %+v", mb)
	}
	const n = 8
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := ed.EditMailbox(ctx, "billing", func(m *gmailrelay.Mailbox) { m.History.Fallbacks++ }); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	// A job change's edit of the same record keeps the cursor.
	Create(t, l, "<edit-1@example.com>", "default", gmailrelay.StateQueued)
	if _, _, err := l.Mutate(ctx, "<edit-1@example.com>", func(cur *gmailrelay.Job) (gmailrelay.Change, error) {
		n := *cur
		n.Mailbox = "billing"
		return gmailrelay.Change{Job: &n, EditMailbox: func(m *gmailrelay.Mailbox) { m.Rewrites++ }}, nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = reopen()
	got, err := l.Mailbox(ctx, "billing")
	if err != nil {
		t.Fatal(err)
	}
	if got.History.ID != 1000 || !got.History.Since.Equal(since) || got.History.Fallbacks != n || got.Rewrites != 1 {
		t.Errorf("after reopen: %+v; want cursor 1000 since %s, %d fallbacks, 1 rewrite", got, since, n)
	}
	if _, err := l.(gmailrelay.MailboxEditor).EditMailbox(ctx, "", func(*gmailrelay.Mailbox) {}); err == nil {
		t.Error("EditMailbox with no name: no error")
	}
}
