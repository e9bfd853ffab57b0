package pglog

import (
	"context"
	"testing"

	"github.com/gmailrelay/gmailrelay"
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
	if _, _, err := a.Mutate(ctx, "<q@x>", func(*gmailrelay.Job) (gmailrelay.Change, error) {
		return gmailrelay.Change{
			Job:   &gmailrelay.Job{MessageID: "<q@x>", Channel: "default", Mailbox: "default", State: gmailrelay.StateQueued},
			Lines: []gmailrelay.Line{{Kind: gmailrelay.KindReceived, State: gmailrelay.StateQueued, Channel: "default"}},
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
