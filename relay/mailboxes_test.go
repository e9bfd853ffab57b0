package relay_test

import (
	"context"
	"testing"

	"github.com/gmailrelay/gmailrelay/acceptlog"
	"github.com/gmailrelay/gmailrelay/internal/testenv"
)

// A log written before mailboxes had names keeps the default mailbox's
// record under its Gmail userId ("me"): after the upgrade the default
// mailbox carries it on, so a mailbox found to rewrite Message-IDs stays
// untrusted.
func TestUpgradeKeepsTheDefaultMailboxsTrust(t *testing.T) {
	e := testenv.New(t, testenv.Options{})
	ctx := context.Background()
	old := acceptlog.Mailbox{Name: "me", HandleChecked: true, HandleUntrusted: true, Rewrites: 3}
	if _, _, err := e.Log.Mutate(ctx, "<old@x.test>", func(*acceptlog.Job) (acceptlog.Change, error) {
		return acceptlog.Change{Mailbox: &old}, nil
	}); err != nil {
		t.Fatal(err)
	}
	e.Restart()
	got, err := e.Log.Mailbox(ctx, "default")
	if err != nil {
		t.Fatal(err)
	}
	if want := (acceptlog.Mailbox{Name: "default", HandleChecked: true, HandleUntrusted: true, Rewrites: 3}); got != want {
		t.Errorf("default mailbox after the upgrade = %+v, want %+v", got, want)
	}
	if st, _ := e.Log.Stats(ctx); st.Jobs != 0 {
		t.Errorf("the record move left %d jobs in the log", st.Jobs)
	}
}
