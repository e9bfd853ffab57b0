package logtest

import (
	"context"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay/acceptlog"
)

// Forward writes a new attempt of id in mailbox at at (a received and a
// forwarding line; the job is created on channel default when new), as the
// relay does before calling Gmail. A zero at leaves the times to the log.
func Forward(t *testing.T, l acceptlog.Store, id, mailbox string, at time.Time) {
	t.Helper()
	_, _, err := l.Mutate(context.Background(), id, func(cur *acceptlog.Job) (acceptlog.Change, error) {
		var j acceptlog.Job
		if cur != nil {
			j = *cur
		} else {
			j = acceptlog.Job{MessageID: id, Channel: "default", Mailbox: mailbox, Fingerprint: "f", CreatedAt: at}
		}
		j.Attempts++
		line := acceptlog.Move(&j, acceptlog.StateForwarding, acceptlog.Line{Kind: acceptlog.KindForwarding, Attempt: j.Attempts, Time: at})
		return acceptlog.Change{Job: &j, Lines: []acceptlog.Line{{Kind: acceptlog.KindReceived, Attempt: j.Attempts, Time: at}, line}}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// testSendTimesCountsEveryAttemptPerMailbox: the daily budget's index holds
// one entry per forwarding line (a resend counts), per mailbox, from since
// on; it is read back after a reopen, and PruneSends drops old entries.
func testSendTimesCountsEveryAttemptPerMailbox(t *testing.T, b Backend) {
	l, reopen := b.openReopen(t)
	ctx := context.Background()
	Forward(t, l, "<a@x>", "me", t0)
	Forward(t, l, "<b@x>", "me", t0.Add(time.Hour))
	// A resend of a: unknown → forwarding again.
	_, _, err := l.Mutate(ctx, "<a@x>", func(cur *acceptlog.Job) (acceptlog.Change, error) {
		j := *cur
		ln := acceptlog.Move(&j, acceptlog.StateUnknown, acceptlog.Line{Kind: acceptlog.KindAmbiguous, Attempt: j.Attempts})
		return acceptlog.Change{Job: &j, Lines: []acceptlog.Line{ln}}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	Forward(t, l, "<a@x>", "me", t0.Add(2*time.Hour))
	Forward(t, l, "<c@x>", "other", t0.Add(2*time.Hour))

	got, err := l.SendTimes(ctx, "me", t0.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || !got[0].Equal(t0.Add(time.Hour)) || !got[1].Equal(t0.Add(2*time.Hour)) {
		t.Fatalf("send times of me since t0+1m = %v, want [t0+1h t0+2h]", got)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = reopen()
	all, err := l.SendTimes(ctx, "me", t0.Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 3 {
		t.Fatalf("after reopen: %d send times of me, want 3 (a twice, b once)", len(all))
	}
	n, err := l.PruneSends(ctx, t0.Add(90*time.Minute))
	if err != nil || n != 2 {
		t.Fatalf("PruneSends = %d, %v; want 2 (a's first attempt, b)", n, err)
	}
	if left, _ := l.SendTimes(ctx, "me", time.Time{}); len(left) != 1 {
		t.Fatalf("after prune: %d send times of me, want 1", len(left))
	}
	if other, _ := l.SendTimes(ctx, "other", time.Time{}); len(other) != 1 {
		t.Fatalf("after prune: %d send times of other, want 1 (c, at t0+2h)", len(other))
	}
}
