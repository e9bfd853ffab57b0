package acceptlog_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/acceptlog"
)

// benchChange creates job id on first use and then appends a forwarding
// attempt: the shape of the send path's first write.
func benchChange(id string) func(cur *gmailrelay.Job) (gmailrelay.Change, error) {
	return func(cur *gmailrelay.Job) (gmailrelay.Change, error) {
		j := gmailrelay.Job{MessageID: id, Channel: "default", State: gmailrelay.StateForwarding}
		if cur != nil {
			j = *cur
		}
		j.Attempts++
		return gmailrelay.Change{Job: &j, Lines: []gmailrelay.Line{
			{Kind: gmailrelay.KindReceived, Channel: "default"},
			{Kind: gmailrelay.KindForwarding, Attempt: j.Attempts, State: gmailrelay.StateForwarding},
		}}, nil
	}
}

func openBench(b *testing.B, groupWait time.Duration) *acceptlog.Log {
	b.Helper()
	l, err := acceptlog.Open(filepath.Join(b.TempDir(), "accept.db"), acceptlog.Options{GroupWait: groupWait})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	return l
}

func reportFsyncs(b *testing.B, l *acceptlog.Log) {
	// A bbolt commit syncs twice: its pages, then its meta page.
	b.ReportMetric(2*float64(l.Commits())/float64(b.N), "fsyncs/op")
	b.ReportMetric(float64(l.WriteStats().Writes)/float64(b.N), "page_writes/op")
}

// BenchmarkMutateSerial is one writer, with bbolt's Batch waiting
// GroupWait for company that never comes.
func BenchmarkMutateSerial(b *testing.B) {
	for _, delay := range []time.Duration{time.Nanosecond, time.Millisecond, 2 * time.Millisecond} {
		b.Run(fmt.Sprintf("wait-%s", delay), func(b *testing.B) {
			ctx := context.Background()
			l := openBench(b, delay)
			i := 0
			for b.Loop() {
				id := fmt.Sprintf("<%d@bench>", i)
				i++
				if _, _, err := l.Mutate(ctx, id, benchChange(id)); err != nil {
					b.Fatal(err)
				}
			}
			reportFsyncs(b, l)
		})
	}
}

// BenchmarkMutateParallel runs writers on distinct jobs concurrently
// (b.SetParallelism(8) writers per CPU) to show group commit: fsyncs/op
// below 2 means several Mutates shared a commit.
func BenchmarkMutateParallel(b *testing.B) {
	for _, delay := range []time.Duration{time.Nanosecond, time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond} {
		b.Run(fmt.Sprintf("wait-%s", delay), func(b *testing.B) {
			ctx := context.Background()
			l := openBench(b, delay)
			var n atomic.Int64
			b.SetParallelism(8)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					id := fmt.Sprintf("<%d@bench>", n.Add(1))
					if _, _, err := l.Mutate(ctx, id, benchChange(id)); err != nil {
						b.Error(err)
						return
					}
				}
			})
			reportFsyncs(b, l)
		})
	}
}

// BenchmarkRawFsync is the floor: append 512 bytes to a file in the same
// temporary directory and fsync it.
func BenchmarkRawFsync(b *testing.B) {
	f, err := os.Create(filepath.Join(b.TempDir(), "raw"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 512)
	for b.Loop() {
		if _, err := f.Write(buf); err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(1, "fsyncs/op")
}

// sendRaw is a small message body, the size of a short relayed mail.
var sendRaw = make([]byte, 2048)

// benchSend is one relay send as the log sees it: the front door's read of
// the job (not found), the first Mutate (a new job with its received and
// forwarding lines and its raw message) and the outcome Mutate (the effect
// line, the job sent and due for its verify pass).
func benchSend(ctx context.Context, l *acceptlog.Log, id string, now time.Time) error {
	if _, err := l.Get(ctx, id); !errors.Is(err, gmailrelay.ErrNotFound) {
		return fmt.Errorf("get: %v", err)
	}
	_, _, err := l.Mutate(ctx, id, func(cur *gmailrelay.Job) (gmailrelay.Change, error) {
		j := gmailrelay.Job{MessageID: id, Key: "k", Channel: "default", Mailbox: "main",
			Fingerprint: "fp", CreatedAt: now, UpdatedAt: now}
		j.Attempts++
		lines := []gmailrelay.Line{
			{Kind: gmailrelay.KindReceived, Attempt: j.Attempts, Channel: "default"},
			gmailrelay.Move(&j, gmailrelay.StateForwarding, gmailrelay.Line{Kind: gmailrelay.KindForwarding, Attempt: j.Attempts}),
		}
		return gmailrelay.Change{Job: &j, Lines: lines, Raw: sendRaw}, nil
	})
	if err != nil {
		return err
	}
	_, _, err = l.Mutate(ctx, id, func(cur *gmailrelay.Job) (gmailrelay.Change, error) {
		j := *cur
		j.UpdatedAt = now
		j.GmailID, j.ThreadID, j.LabelIDs = "g"+id, "t"+id, []string{"SENT"}
		j.Effects++
		j.NextCheckAt = now.Add(time.Minute)
		line := gmailrelay.Move(&j, gmailrelay.StateSent, gmailrelay.Line{Kind: gmailrelay.KindEffect,
			Source: gmailrelay.SourceResponse, GmailID: j.GmailID, ThreadID: j.ThreadID, LabelIDs: j.LabelIDs, Attempt: j.Attempts})
		return gmailrelay.Change{Job: &j, Lines: []gmailrelay.Line{line}}, nil
	})
	return err
}

// BenchmarkSend is a relay send's work in the log (see benchSend): serial
// is one sender (one commit per Mutate), parallel 16 senders per CPU
// sharing group commits. allocs/op is per send.
func BenchmarkSend(b *testing.B) {
	ctx := context.Background()
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	b.Run("serial", func(b *testing.B) {
		l := openBench(b, 0)
		i := 0
		for b.Loop() {
			i++
			if err := benchSend(ctx, l, fmt.Sprintf("<%d@bench>", i), now); err != nil {
				b.Fatal(err)
			}
		}
		reportFsyncs(b, l)
	})
	b.Run("parallel", func(b *testing.B) {
		l := openBench(b, 0)
		var n atomic.Int64
		b.SetParallelism(16)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := benchSend(ctx, l, fmt.Sprintf("<%d@bench>", n.Add(1)), now); err != nil {
					b.Error(err)
					return
				}
			}
		})
		reportFsyncs(b, l)
	})
}

// BenchmarkGet is the front door's read of a job: missing (a new send) and
// present (a replay).
func BenchmarkGet(b *testing.B) {
	ctx := context.Background()
	l := openBench(b, 0)
	for i := range 1000 {
		id := fmt.Sprintf("<%d@bench>", i)
		if _, _, err := l.Mutate(ctx, id, benchChange(id)); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("missing", func(b *testing.B) {
		for b.Loop() {
			if _, err := l.Get(ctx, "<missing@bench>"); !errors.Is(err, gmailrelay.ErrNotFound) {
				b.Fatal(err)
			}
		}
	})
	b.Run("present", func(b *testing.B) {
		for b.Loop() {
			if _, err := l.Get(ctx, "<500@bench>"); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkOpen opens and closes a log of 20,000 jobs: with bbolt's
// freelist not synced, Open rebuilds it by walking the file.
func BenchmarkOpen(b *testing.B) {
	for _, noSync := range []bool{false, true} {
		b.Run(fmt.Sprintf("no_freelist_sync=%v", noSync), func(b *testing.B) {
			prev := acceptlog.SetNoFreelistSync(noSync)
			defer acceptlog.SetNoFreelistSync(prev)
			ctx := context.Background()
			path := filepath.Join(b.TempDir(), "accept.db")
			l, err := acceptlog.Open(path, acceptlog.Options{})
			if err != nil {
				b.Fatal(err)
			}
			var n atomic.Int64
			var wg sync.WaitGroup
			for range 64 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := n.Add(1); i <= 20000; i = n.Add(1) {
						id := fmt.Sprintf("<%d@open>", i)
						if err := benchSend(ctx, l, id, time.Now()); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			if err := l.Close(); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				l, err := acceptlog.Open(path, acceptlog.Options{})
				if err != nil {
					b.Fatal(err)
				}
				if err := l.Close(); err != nil {
					b.Fatal(err)
				}
			}
			fi, _ := os.Stat(path)
			b.ReportMetric(float64(fi.Size())/(1<<20), "file_MiB")
		})
	}
}
