package logtest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay"
)

// createKeyed writes a new queued job id with key, created at.
func createKeyed(t *testing.T, l gmailrelay.Store, id, key string, at time.Time) {
	t.Helper()
	_, _, err := l.Mutate(context.Background(), id, func(cur *gmailrelay.Job) (gmailrelay.Change, error) {
		return gmailrelay.Change{
			Job:   &gmailrelay.Job{MessageID: id, Key: key, Channel: "default", State: gmailrelay.StateQueued, CreatedAt: at},
			Lines: []gmailrelay.Line{{Kind: gmailrelay.KindReceived, State: gmailrelay.StateQueued, Channel: "default"}},
		}, nil
	})
	if err != nil {
		t.Fatalf("create %s: %v", id, err)
	}
}

// JobByKey finds the job created with a key whatever its Message-ID (the
// domain of a job created before a rekey is not the relay's), the first
// of two jobs of one key, and a job keyed by its own Message-ID (a raw
// message sent without a key); after a reopen too. An unknown key, an
// empty one, and a Message-ID that is not a key answer ErrNotFound.
func testJobByKey(t *testing.T, be Backend) {
	ctx := context.Background()
	l, reopen := be.openReopen(t)
	const key = "cus_1:order.shipped:ord_1"
	const oldID, newID = "<job-1@old.example>", "<job-1@new.example>"
	createKeyed(t, l, oldID, key, t0)
	createKeyed(t, l, newID, key, t0.Add(time.Hour))
	createKeyed(t, l, "<raw-1@x>", "<raw-1@x>", t0)
	createKeyed(t, l, "<other@x>", "other-key", t0)
	check := func(l gmailrelay.Store) {
		t.Helper()
		for k, want := range map[string]string{key: oldID, "<raw-1@x>": "<raw-1@x>", "other-key": "<other@x>"} {
			j, err := l.JobByKey(ctx, k)
			if err != nil || j.MessageID != want || j.Key != k {
				t.Errorf("JobByKey(%q) = %s (key %q), %v; want %s", k, j.MessageID, j.Key, err, want)
			}
		}
		for _, k := range []string{"no-such-key", "", "<other@x>"} {
			if j, err := l.JobByKey(ctx, k); !errors.Is(err, gmailrelay.ErrNotFound) {
				t.Errorf("JobByKey(%q) = %s, %v; want ErrNotFound", k, j.MessageID, err)
			}
		}
	}
	check(l)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	check(reopen())
}
