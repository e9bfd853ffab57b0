package bench

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/acceptlog"
	"github.com/gmailrelay/gmailrelay/retention"
)

// PlainRaw is a typical transactional notification as the relay stores it
// (1,600 bytes): headers, and a short text and HTML alternative.
var PlainRaw = plainRaw(1600)

// plainRaw builds the notification, its text padded to exactly n bytes.
func plainRaw(n int) []byte {
	head := "From: shop@example.com\r\nTo: customer@example.org\r\nSubject: Your order has shipped\r\n" +
		"Message-ID: <job-00000000000000000000000000000000@" + MsgIDDomain + ">\r\nDate: Wed, 02 Dec 2026 09:00:00 +0000\r\n" +
		"MIME-Version: 1.0\r\nContent-Type: multipart/alternative; boundary=\"b1\"\r\n\r\n--b1\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n"
	mid := "\r\n--b1\r\nContent-Type: text/html; charset=utf-8\r\n\r\n<p>"
	tail := "</p>\r\n--b1--\r\n"
	text := n - len(head) - len(mid) - len(tail)
	body := strings.Repeat("Your order is on its way. ", text/26+1)
	return []byte(head + body[:text/2] + mid + body[:text-text/2] + tail)
}

// plainSend is one plain send as the relay writes it: the job's three
// writes, in order.
type plainSend struct {
	id     string
	writes [3]func(*gmailrelay.Job) (gmailrelay.Change, error)
}

// newPlainSend returns send n, accepted at at: (1) the raw message (when
// raw is not nil) with the received and forwarding lines; (2) Gmail's
// answer, the effect line taking the job to sent, a verify check
// scheduled; (3) the verify pass's search line, one SENT hit.
func newPlainSend(n int, at time.Time, raw []byte) plainSend {
	sum := sha256.Sum256(fmt.Appendf(nil, "%d", n))
	id := fmt.Sprintf("<job-%x@%s>", sum[:16], MsgIDDomain)
	gmailID := fmt.Sprintf("19%x", sum[16:23])
	p := plainSend{id: id}
	p.writes[0] = func(cur *gmailrelay.Job) (gmailrelay.Change, error) {
		if cur != nil {
			return gmailrelay.Change{}, fmt.Errorf("job %s exists already", id)
		}
		j := gmailrelay.Job{MessageID: id, Key: fmt.Sprintf("cus_%d:order.shipped:ord_%d", n%5000, n), Channel: "default",
			Mailbox: "default", Fingerprint: fmt.Sprintf("%x", sum), State: gmailrelay.StateForwarding, Attempts: 1,
			CreatedAt: at, UpdatedAt: at}
		return gmailrelay.Change{Job: &j, Raw: raw, Lines: []gmailrelay.Line{
			{Kind: gmailrelay.KindReceived, Attempt: 1, Channel: "default", Time: at},
			{Kind: gmailrelay.KindForwarding, Attempt: 1, State: gmailrelay.StateForwarding, Time: at},
		}}, nil
	}
	p.writes[1] = func(cur *gmailrelay.Job) (gmailrelay.Change, error) {
		cur.State, cur.Effects, cur.UpdatedAt = gmailrelay.StateSent, 1, at
		cur.GmailID, cur.ThreadID, cur.LabelIDs = gmailID, gmailID, []string{"SENT"}
		cur.NextCheckAt = at.Add(time.Minute)
		return gmailrelay.Change{Job: cur, Lines: []gmailrelay.Line{
			{Kind: gmailrelay.KindEffect, Attempt: 1, State: gmailrelay.StateSent, Source: gmailrelay.SourceResponse,
				GmailID: gmailID, ThreadID: gmailID, LabelIDs: cur.LabelIDs, Time: at},
		}}, nil
	}
	p.writes[2] = func(cur *gmailrelay.Job) (gmailrelay.Change, error) {
		check := at.Add(time.Minute)
		cur.NextCheckAt, cur.Verified, cur.VerifyLooks, cur.UpdatedAt = time.Time{}, true, 1, check
		return gmailrelay.Change{Job: cur, Lines: []gmailrelay.Line{
			{Kind: gmailrelay.KindSearch, Attempt: 1, Query: "rfc822msgid:" + id[1:len(id)-1], Hits: 1, SentHits: 1,
				Reason: gmailrelay.ReasonVerified, Time: check},
		}}, nil
	}
	return p
}

// growthStart is when the first job of Growth and BuildLog is accepted.
var growthStart = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// growthSpacing spreads jobs 2,000 a day.
const growthSpacing = 24 * time.Hour / 2000

// growthRetention is the retention Growth prunes with (a common setting).
const growthRetention = 90 * 24 * time.Hour

// Growth measures what one plain send (newPlainSend, PlainRaw) costs in
// the log file: jobs sends written by 64 concurrent writers, each job's
// three writes in order, into a fresh log in dir; once kept as written,
// once after the retention pass (retention.Pass, 90 days, run 91 days after
// the last send, so it prunes every job and the send index). Each log is
// then compacted (acceptlog.Compact, what `gmailrelay compact` does), so
// that freed pages and bbolt's growth steps do not count.
//
// Figures: jobs, raw_bytes (the raw message's size); for kept_ and pruned_:
// file_bytes/job (the compacted file's size ÷ jobs), used_bytes/job (the
// bytes of the pages its buckets use ÷ jobs: the file without bbolt's
// preallocated tail and free pages), live_file_bytes/job (the file as the
// relay leaves it, before compaction); and pruned_jobs.
func Growth(ctx context.Context, dir string, jobs int) (Metrics, error) {
	if jobs < 1 {
		return nil, fmt.Errorf("growth: jobs must be positive")
	}
	m := Metrics{"jobs": float64(jobs), "raw_bytes": float64(len(PlainRaw))}
	for _, prune := range []bool{false, true} {
		prefix := "kept_"
		if prune {
			prefix = "pruned_"
		}
		path := filepath.Join(dir, prefix+"accept.db")
		log, err := acceptlog.Open(path, acceptlog.Options{})
		if err != nil {
			return nil, err
		}
		err = parallel(jobs, 64, func(i int) error {
			p := newPlainSend(i, growthStart.Add(time.Duration(i)*growthSpacing), PlainRaw)
			for _, w := range p.writes {
				if _, _, err := log.Mutate(ctx, p.id, w); err != nil {
					return err
				}
			}
			return nil
		})
		if err == nil && prune {
			last := growthStart.Add(time.Duration(jobs-1) * growthSpacing)
			pass := retention.New(retention.Config{Log: log, Retention: growthRetention,
				Now: func() time.Time { return last.Add(growthRetention + 24*time.Hour) }})
			var res retention.Result
			if res, err = pass.RunOnce(ctx); err == nil && res.Jobs != jobs {
				err = fmt.Errorf("growth: retention pruned %d jobs, want %d", res.Jobs, jobs)
			}
			m["pruned_jobs"] = float64(res.Jobs)
		}
		if err == nil {
			err = log.Check(ctx)
		}
		if cerr := log.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, err
		}
		live, compacted, used, err := compactedSize(path)
		if err != nil {
			return nil, err
		}
		n := float64(jobs)
		m[prefix+"live_file_bytes/job"] = float64(live) / n
		m[prefix+"file_bytes/job"] = float64(compacted) / n
		m[prefix+"used_bytes/job"] = float64(used) / n
	}
	return m, nil
}

// compactedSize compacts the closed log at path into path.compact and
// returns the sizes of both files and the bytes of the pages the
// compacted copy's buckets use (bbolt's BucketStats: branch and leaf pages
// allocated, and inline buckets).
func compactedSize(path string) (live, compacted, used int64, err error) {
	dst := path + ".compact"
	if live, compacted, err = acceptlog.Compact(path, dst); err != nil {
		return 0, 0, 0, err
	}
	defer os.Remove(dst)
	db, err := bolt.Open(dst, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		return 0, 0, 0, err
	}
	defer db.Close()
	err = db.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(_ []byte, b *bolt.Bucket) error {
			st := b.Stats()
			used += int64(st.BranchAlloc + st.LeafAlloc + st.InlineBucketInuse)
			return nil
		})
	})
	return live, compacted, used, err
}
