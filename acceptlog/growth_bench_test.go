package acceptlog_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/acceptlog"
	bolt "go.etcd.io/bbolt"
)

// growthRaw is a typical transactional notification as the relay stores it:
// headers and a short text and HTML body, about 1.6 KB.
var growthRaw = []byte("From: shop@example.com\r\nTo: customer@example.org\r\nSubject: Your order has shipped\r\n" +
	"Message-ID: <job-00000000000000000000000000000000@inbound.example.com>\r\nDate: Wed, 02 Dec 2026 09:00:00 +0000\r\n" +
	"MIME-Version: 1.0\r\nContent-Type: multipart/alternative; boundary=\"b1\"\r\n\r\n--b1\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n" +
	strings.Repeat("Your order is on its way. ", 20) + "\r\n--b1\r\nContent-Type: text/html; charset=utf-8\r\n\r\n<p>" +
	strings.Repeat("Your order is on its way. ", 20) + "</p>\r\n--b1--\r\n")

// growthJob writes one job the way a plain send and its verify pass do:
// received + forwarding, then effect + sent and the verify search line.
func growthJob(l *acceptlog.Log, n int, at time.Time) error {
	sum := sha256.Sum256([]byte(strconv.Itoa(n)))
	id := fmt.Sprintf("<job-%x@inbound.example.com>", sum[:16])
	ctx := context.Background()
	_, _, err := l.Mutate(ctx, id, func(*gmailrelay.Job) (gmailrelay.Change, error) {
		j := gmailrelay.Job{MessageID: id, Key: fmt.Sprintf("cus_%d:order.shipped:ord_%d", n%5000, n), Channel: "default",
			Mailbox: "default", Fingerprint: fmt.Sprintf("%x", sum), State: gmailrelay.StateForwarding, Attempts: 1,
			CreatedAt: at, UpdatedAt: at}
		return gmailrelay.Change{Job: &j, Raw: growthRaw, Lines: []gmailrelay.Line{
			{Kind: gmailrelay.KindReceived, Attempt: 1, Channel: "default", Time: at},
			{Kind: gmailrelay.KindForwarding, Attempt: 1, State: gmailrelay.StateForwarding, Time: at},
		}}, nil
	})
	if err != nil {
		return err
	}
	_, _, err = l.Mutate(ctx, id, func(cur *gmailrelay.Job) (gmailrelay.Change, error) {
		cur.State, cur.Effects, cur.Verified = gmailrelay.StateSent, 1, true
		cur.GmailID, cur.ThreadID, cur.LabelIDs = "19"+id[5:19], "19"+id[5:19], []string{"SENT"}
		return gmailrelay.Change{Job: cur, Lines: []gmailrelay.Line{
			{Kind: gmailrelay.KindEffect, Attempt: 1, State: gmailrelay.StateSent, Source: gmailrelay.SourceResponse,
				GmailID: cur.GmailID, ThreadID: cur.ThreadID, LabelIDs: cur.LabelIDs, Time: at},
			{Kind: gmailrelay.KindSearch, Attempt: 1, Query: "rfc822msgid:" + id[1:len(id)-1], Hits: 1, SentHits: 1, Reason: "verify", Time: at},
		}}, nil
	})
	return err
}

// writeDay writes one emulated day of 2,000 sends from 64 writers.
func writeDay(b *testing.B, l *acceptlog.Log, d int, day time.Time) {
	const writers = 64
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < growthPerDay; i += writers {
				if err := growthJob(l, d*growthPerDay+i, day.Add(time.Duration(i)*40*time.Second)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

const growthPerDay = 2000

var growthStart = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// pruneAll prunes every prunable job older than cutoff.
func pruneAll(b *testing.B, l *acceptlog.Log, cutoff time.Time) int {
	n := 0
	for {
		res, err := l.Prune(context.Background(), cutoff, 1000)
		if err != nil {
			b.Fatal(err)
		}
		n += res.Jobs
		if !res.More {
			return n
		}
	}
}

// compactedSize closes l, compacts its file and returns the compacted
// copy's file size and the bytes its pages hold (the file itself is grown
// by bbolt in doubling steps up to 1 GiB, so it says little about a job).
func compactedSize(b *testing.B, l *acceptlog.Log, path string) (file, used int64) {
	if err := l.Check(context.Background()); err != nil {
		b.Fatal(err)
	}
	if err := l.Close(); err != nil {
		b.Fatal(err)
	}
	_, file, err := acceptlog.Compact(path, path+".compact")
	if err != nil {
		b.Fatal(err)
	}
	db, err := bolt.Open(path+".compact", 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	err = db.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(_ []byte, bk *bolt.Bucket) error {
			st := bk.Stats()
			used += int64(st.LeafAlloc + st.BranchAlloc + st.InlineBucketInuse)
			return nil
		})
	})
	if err != nil {
		b.Fatal(err)
	}
	return file, used
}

// BenchmarkGrowthPerJob measures the bytes one plain sent job takes in the
// pages of a compacted log file, before and after pruning (one day of 2,000
// sends).
func BenchmarkGrowthPerJob(b *testing.B) {
	for b.Loop() {
		var used [2]int64
		for i, prune := range []bool{false, true} {
			path := filepath.Join(b.TempDir(), "accept.db")
			l, err := acceptlog.Open(path, acceptlog.Options{})
			if err != nil {
				b.Fatal(err)
			}
			writeDay(b, l, 0, growthStart)
			if prune {
				if n := pruneAll(b, l, growthStart.Add(48*time.Hour)); n != growthPerDay {
					b.Fatalf("pruned %d jobs, want %d", n, growthPerDay)
				}
			}
			_, used[i] = compactedSize(b, l, path)
		}
		b.ReportMetric(float64(used[0])/growthPerDay, "bytes/job-kept")
		b.ReportMetric(float64(used[1])/growthPerDay, "bytes/job-pruned")
	}
}

// BenchmarkGrowthYear writes GMAILRELAY_GROWTH_DAYS (default 30; the
// figures in docs/benchmarks.md are for 365) emulated days of 2,000 sends
// each, pruning once a day with a retention of GMAILRELAY_GROWTH_RETENTION
// days (default 90), and reports the file's size (as the relay leaves it:
// freed pages are reused, never given back) and a compacted copy's. Run it
// with -benchtime=1x.
func BenchmarkGrowthYear(b *testing.B) {
	days := envInt(b, "GMAILRELAY_GROWTH_DAYS", 30)
	keep := envInt(b, "GMAILRELAY_GROWTH_RETENTION", 90)
	for b.Loop() {
		path := filepath.Join(b.TempDir(), "accept.db")
		l, err := acceptlog.Open(path, acceptlog.Options{})
		if err != nil {
			b.Fatal(err)
		}
		pruned := 0
		var sizeAtRetention int64
		for d := range days {
			day := growthStart.Add(time.Duration(d) * 24 * time.Hour)
			writeDay(b, l, d, day)
			pruned += pruneAll(b, l, day.Add(24*time.Hour).Add(-time.Duration(keep)*24*time.Hour))
			if d+1 == keep {
				sizeAtRetention, _ = l.Size(context.Background())
			}
		}
		size, _ := l.Size(context.Background())
		compacted, used := compactedSize(b, l, path)
		b.ReportMetric(float64(days*growthPerDay), "jobs")
		b.ReportMetric(float64(pruned), "pruned-jobs")
		b.ReportMetric(float64(sizeAtRetention)/(1<<20), "file-MiB-at-retention")
		b.ReportMetric(float64(size)/(1<<20), "file-MiB")
		b.ReportMetric(float64(compacted)/(1<<20), "compacted-file-MiB")
		b.ReportMetric(float64(used)/(1<<20), "compacted-used-MiB")
	}
}

func envInt(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		b.Fatalf("%s=%q: want a positive whole number", name, v)
	}
	return n
}
