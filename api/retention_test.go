package api_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/acceptlog"
	"github.com/gmailrelay/gmailrelay/relay"
)

// A year-old job keeps its key: after the retention pass removed its raw
// message and detail lines, the same send replays (nothing reaches Gmail)
// and a different message under the key is still refused.
func TestEmulatorRetentionKeepsReplaying(t *testing.T) {
	e := newEnv(t, envOpts{retention: 24 * time.Hour})
	ctx := context.Background()
	key := "cus_1:order.shipped:ord_old"
	id := relay.MessageID(key, domain)
	first := e.must("POST", "/v1/send", apiToken, sendBody(key))
	if first.status != 200 {
		t.Fatalf("send: %d %s", first.status, first.raw)
	}
	// Let the verify pass finish with the job, then age it two days.
	for range 2 {
		e.Clock.Advance(24 * time.Hour)
		if _, err := e.sw.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
	}
	e.Clock.Advance(48 * time.Hour)
	sw := e.must("POST", "/admin/sweep", adminToken, nil)
	ret, _ := sw.body["retention"].(map[string]any)
	if sw.status != 200 || ret == nil || ret["jobs"] != float64(1) {
		t.Fatalf("POST /admin/sweep: %d %s; want retention.jobs 1", sw.status, sw.raw)
	}

	j, lines := e.job(id)
	if j.PrunedAt.IsZero() || j.State != gmailrelay.StateSent || j.Key != key || j.GmailID == "" || j.Effects != 1 {
		t.Fatalf("pruned job = %+v; want its sent record kept", j)
	}
	if len(lines) != 1 || lines[0].Kind != gmailrelay.KindEffect {
		t.Fatalf("pruned job lines = %+v; want only the effect line", lines)
	}
	if _, err := e.Log.Raw(ctx, id); !errors.Is(err, gmailrelay.ErrNotFound) {
		t.Fatalf("raw of the pruned job: %v, want ErrNotFound", err)
	}

	again := e.must("POST", "/v1/send", apiToken, sendBody(key))
	if again.status != 200 || again.header.Get("Idempotent-Replayed") != "true" || again.body["gmail_id"] != first.body["gmail_id"] {
		t.Fatalf("same key after pruning: %d %v %s; want a 200 replay", again.status, again.header, again.raw)
	}
	other := sendBody(key)
	other["subject"] = "Something else"
	if r := e.must("POST", "/v1/send", apiToken, other); r.status != 422 {
		t.Fatalf("different content after pruning: %d %s; want 422", r.status, r.raw)
	}
	if got := e.Emulator.Deliveries(id); got != 1 {
		t.Fatalf("the emulator delivered %s %d times, want 1 (nothing resent)", id, got)
	}
	if st := e.must("GET", "/v1/stats", apiToken, nil); st.body["pruned"] == nil || st.body["log_bytes"] == float64(0) {
		t.Fatalf("stats lack pruned or log_bytes: %s", st.raw)
	}
}

// A backup taken while 64 callers send holds every job acknowledged before
// it began, and passes the log's check.
func TestEmulatorBackupDuringLoad(t *testing.T) {
	e := newEnv(t, envOpts{emuQuota: 1_000_000})
	const callers, each, backupAfter = 64, 6, 128
	var (
		mu       sync.Mutex
		acked    []string
		snapshot chan []string = make(chan []string, 1)
		wg       sync.WaitGroup
		errs     = make(chan error, callers)
	)
	for c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				key := fmt.Sprintf("load:%d:%d", c, i)
				r, err := e.do("POST", "/v1/send", apiToken, sendBody(key))
				if err != nil || r.status != 200 {
					errs <- fmt.Errorf("send %s: %v %d %s", key, err, r.status, r.raw)
					return
				}
				mu.Lock()
				acked = append(acked, relay.MessageID(key, domain))
				if len(acked) == backupAfter {
					snapshot <- append([]string(nil), acked...)
				}
				mu.Unlock()
			}
		}()
	}
	before := <-snapshot
	// The backup starts after every job in before was acknowledged, while
	// the other callers go on sending.
	req, _ := http.NewRequest("GET", e.url+"/admin/backup", nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "backup.db")
	f, _ := os.Create(path)
	n, err := io.Copy(f, resp.Body)
	resp.Body.Close()
	f.Close()
	if err != nil || resp.StatusCode != 200 || fmt.Sprint(n) != resp.Header.Get("Content-Length") {
		t.Fatalf("backup: %v, status %d, %d bytes of Content-Length %s", err, resp.StatusCode, n, resp.Header.Get("Content-Length"))
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	b, err := acceptlog.Open(path, acceptlog.Options{})
	if err != nil {
		t.Fatalf("open the backup: %v", err)
	}
	defer b.Close()
	if err := b.Check(context.Background()); err != nil {
		t.Fatalf("the backup fails the log's check: %v", err)
	}
	for _, id := range before {
		j, err := b.Get(context.Background(), id)
		if err != nil || j.State != gmailrelay.StateSent {
			t.Errorf("job %s, acknowledged before the backup began: %v, state %q in the backup", id, err, j.State)
		}
	}
	st, _ := b.Stats(context.Background())
	t.Logf("backup: %d bytes, %d jobs (%d acknowledged before it began, %d sent in all)", n, st.Jobs, len(before), callers*each)

	if r := e.must("GET", "/admin/backup", apiToken, nil); r.status != 403 {
		t.Errorf("backup with the API token: %d, want 403", r.status)
	}
}
