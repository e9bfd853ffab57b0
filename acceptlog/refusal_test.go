package acceptlog_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/acceptlog"
	"github.com/gmailrelay/gmailrelay/acceptlog/acceptlogtest"
	"github.com/gmailrelay/gmailrelay/internal/tmpfs"
)

// putSent writes a new job id in state sent with a raw message of n bytes.
func putSent(l *acceptlog.Log, id string, n int) error {
	raw := []byte(strings.Repeat("x", n))
	_, _, err := l.Mutate(context.Background(), id, func(*gmailrelay.Job) (gmailrelay.Change, error) {
		return gmailrelay.Change{Job: &gmailrelay.Job{MessageID: id, State: gmailrelay.StateSent},
			Lines: []gmailrelay.Line{{Kind: gmailrelay.KindReceived, State: gmailrelay.StateSent}}, Raw: raw}, nil
	})
	return err
}

// TestDiskFullRefusesWritesUntilRoomComesBack fills a real tmpfs under the
// log: the write that finds no room is refused (ErrWritesRefused, and
// WritesRefused says so), probes are refused while the disk is full, and
// once room comes back a probe (and only a probe) ends the refusal,
// without reopening the
// Log by hand, and the next writes land. Every write acknowledged before
// is intact and the refused ones are absent, through a Close and an Open
// too.
func TestDiskFullRefusesWritesUntilRoomComesBack(t *testing.T) {
	ctx := context.Background()
	dir := tmpfs.Mount(t, 4<<20)
	path := filepath.Join(dir, "accept.db")
	l := acceptlogtest.OpenPath(t, path, acceptlog.Options{})
	var acked []string
	for i := range 20 {
		id := fmt.Sprintf("<job-before-%d@x>", i)
		if err := putSent(l, id, 2000); err != nil {
			t.Fatalf("write %s with room to spare: %v", id, err)
		}
		acked = append(acked, id)
	}
	filler := filepath.Join(dir, "filler")
	tmpfs.Fill(t, filler)
	var refused []string
	for i := 0; len(refused) < 3; i++ {
		if i == 10_000 {
			t.Fatal("10,000 writes on a full disk and none refused")
		}
		id := fmt.Sprintf("<job-full-%d@x>", i)
		err := putSent(l, id, 3000)
		switch {
		case err == nil:
			acked = append(acked, id) // it fit in the file's free pages
		case errors.Is(err, gmailrelay.ErrWritesRefused):
			refused = append(refused, id)
		default:
			t.Fatalf("write %s on a full disk: %v, want an error wrapping ErrWritesRefused", id, err)
		}
	}
	if err := l.WritesRefused(); err == nil || !strings.Contains(err.Error(), "no space left on device") {
		t.Fatalf("WritesRefused on a full disk = %v, want the refusal (no space left on device)", err)
	}
	if err := l.ProbeWrite(ctx); !errors.Is(err, gmailrelay.ErrWritesRefused) {
		t.Fatalf("ProbeWrite on a full disk = %v, want a refusal", err)
	}
	if _, err := l.Stats(ctx); err != nil {
		t.Fatalf("reads on a full disk: %v", err)
	}
	// A write that fits in room the file already holds does not end the
	// refusal: the next one may not fit.
	if err := putSent(l, "<job-small@x>", 0); err == nil {
		acked = append(acked, "<job-small@x>")
		if l.WritesRefused() == nil {
			t.Fatal("a write that fit ended the refusal on a full disk")
		}
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if err := l.ProbeWrite(ctx); err != nil {
		t.Fatalf("ProbeWrite with room again: %v", err)
	}
	if err := l.WritesRefused(); err != nil {
		t.Fatalf("WritesRefused after a probe succeeded = %v, want nil", err)
	}
	for i := range 20 {
		id := fmt.Sprintf("<job-after-%d@x>", i)
		if err := putSent(l, id, 2000); err != nil {
			t.Fatalf("write %s after room came back: %v", id, err)
		}
		acked = append(acked, id)
	}
	wantJobs := func(l *acceptlog.Log) {
		t.Helper()
		for _, id := range acked {
			if _, err := l.Get(ctx, id); err != nil {
				t.Errorf("acknowledged job %s: %v", id, err)
			}
		}
		for _, id := range refused {
			if _, err := l.Get(ctx, id); !errors.Is(err, gmailrelay.ErrNotFound) {
				t.Errorf("refused job %s: Get = %v, want not found", id, err)
			}
		}
		st, err := l.Stats(ctx)
		if err != nil || st.Jobs != len(acked) {
			t.Errorf("Stats = %d jobs (%v), want %d", st.Jobs, err, len(acked))
		}
		if err := l.Check(ctx); err != nil {
			t.Errorf("Check: %v", err)
		}
	}
	wantJobs(l)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	wantJobs(acceptlogtest.OpenPath(t, path, acceptlog.Options{}))
}
