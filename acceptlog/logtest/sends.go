package logtest

import (
	"context"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay"
)

// Forward writes a new attempt of id in mailbox at at (a received and a
// forwarding line; the job is created on channel default when new), as the
// relay does before calling Gmail. A zero at leaves the times to the log.
func Forward(t *testing.T, l gmailrelay.Store, id, mailbox string, at time.Time) {
	t.Helper()
	_, _, err := l.Mutate(context.Background(), id, func(cur *gmailrelay.Job) (gmailrelay.Change, error) {
		var j gmailrelay.Job
		if cur != nil {
			j = *cur
		} else {
			j = gmailrelay.Job{MessageID: id, Channel: "default", Mailbox: mailbox, Fingerprint: "f", CreatedAt: at}
		}
		j.Attempts++
		line := gmailrelay.Move(&j, gmailrelay.StateForwarding, gmailrelay.Line{Kind: gmailrelay.KindForwarding, Attempt: j.Attempts, Time: at})
		return gmailrelay.Change{Job: &j, Lines: []gmailrelay.Line{{Kind: gmailrelay.KindReceived, Attempt: j.Attempts, Time: at}, line}}, nil
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
	_, _, err := l.Mutate(ctx, "<a@x>", func(cur *gmailrelay.Job) (gmailrelay.Change, error) {
		j := *cur
		ln := gmailrelay.Move(&j, gmailrelay.StateUnknown, gmailrelay.Line{Kind: gmailrelay.KindAmbiguous, Attempt: j.Attempts})
		return gmailrelay.Change{Job: &j, Lines: []gmailrelay.Line{ln}}, nil
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
