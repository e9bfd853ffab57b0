package pglog

import (
	"context"
	"testing"

	"github.com/gmailrelay/gmailrelay/acceptlog"
	"github.com/gmailrelay/gmailrelay/pglog/pgtest"
)

// A replica that dies mid-pass frees its mailboxes at once: the claims
// are its session's advisory locks, which end with the session (here its
// sessions are terminated, as when the process is killed).
func TestClaimQueuedDeadReplicaFreesItsMailboxes(t *testing.T) {
	ctx := context.Background()
	url := pgtest.URL(t)
	schema := pgtest.Schema(t, url, false)
	var logs [2]*Log
	for i := range logs {
		l, err := Open(ctx, url, Options{Schema: schema})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		logs[i] = l
	}
	a, b := logs[0], logs[1]
	if _, _, err := a.Mutate(ctx, "<q@x>", func(*acceptlog.Job) (acceptlog.Change, error) {
		return acceptlog.Change{
			Job:   &acceptlog.Job{MessageID: "<q@x>", Channel: "default", Mailbox: "default", State: acceptlog.StateQueued},
			Lines: []acceptlog.Line{{Kind: acceptlog.KindReceived, State: acceptlog.StateQueued, Channel: "default"}},
		}, nil
	}); err != nil {
		t.Fatal(err)
	}
	all := func(name string) (string, bool) { return name, true }
	ca, err := a.ClaimQueued(ctx, all)
	if err != nil || len(ca.Jobs) != 1 {
		t.Fatalf("A claims %d jobs, %v; want 1", len(ca.Jobs), err)
	}
	if cb, err := b.ClaimQueued(ctx, all); err != nil || len(cb.Jobs) != 0 || cb.Busy != 1 {
		t.Fatalf("B while A holds the mailbox: %d jobs, %d busy, %v; want 0, 1", len(cb.Jobs), cb.Busy, err)
	}
	if _, err := b.pool.Exec(ctx, "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity WHERE application_name = $1", appPrefix+a.owner); err != nil {
		t.Fatal(err)
	}
	cb, err := b.ClaimQueued(ctx, all)
	if err != nil || len(cb.Jobs) != 1 {
		t.Fatalf("B after A's sessions ended: %d jobs, %v; want 1", len(cb.Jobs), err)
	}
	cb.Release()
	ca.Release() // on a dead session: dropped, not pooled
}
