package console_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/acceptlog"
	"github.com/gmailrelay/gmailrelay/console"
	"github.com/gmailrelay/gmailrelay/internal/testenv"
)

const benchJobs = 100_000

// lineStep is the time between two lines of the benchmark log: about 3.3
// lines a job, so about one job a second, 60 sends a minute — the rate the
// default 6000-unit Gmail quota allows. The 100,000 jobs span 27 hours and
// the last hour holds about 3,600 of them.
const lineStep = 300 * time.Millisecond

// fillLog writes benchJobs jobs with concurrent Mutates (grouped commits).
// Lines are stamped by the log's clock, which moves lineStep per line, so
// time order is Seq order as in a real log. States: 1% each review, failed,
// unknown, abandoned; the rest sent.
func fillLog(b *testing.B, path string) (*acceptlog.Log, func() time.Time) {
	b.Helper()
	start := time.Date(2026, 12, 1, 6, 0, 0, 0, time.UTC)
	var ticks atomic.Int64
	lineClock := func() time.Time { return start.Add(time.Duration(ticks.Add(1)) * lineStep) }
	lg, err := acceptlog.Open(path, acceptlog.Options{Now: lineClock})
	if err != nil {
		b.Fatal(err)
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 128)
	for range 128 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= benchJobs {
					return
				}
				id := fmt.Sprintf("<job-bench%08d@bench.example.com>", i)
				if _, _, err := lg.Mutate(context.Background(), id, benchJob(id, i)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	now := func() time.Time { return start.Add(time.Duration(ticks.Load())*lineStep + time.Second) }
	return lg, now
}

func benchJob(id string, i int) func(*gmailrelay.Job) (gmailrelay.Change, error) {
	return func(cur *gmailrelay.Job) (gmailrelay.Change, error) {
		ch := "default"
		if i%10 == 0 {
			ch = "billing"
		}
		j := gmailrelay.Job{MessageID: id, Key: fmt.Sprintf("cus_%d:order.shipped:ord_%d", i%5000, i), Channel: ch,
			Mailbox: "me", Fingerprint: "bench", Attempts: 1}
		q := "rfc822msgid:" + strings.Trim(id, "<>")
		lines := []gmailrelay.Line{{Kind: gmailrelay.KindReceived, Attempt: 1, Channel: ch},
			{Kind: gmailrelay.KindForwarding, Attempt: 1, State: gmailrelay.StateForwarding}}
		switch i % 100 {
		case 0:
			j.State = gmailrelay.StateReview
			lines = append(lines, gmailrelay.Line{Kind: gmailrelay.KindAmbiguous, Attempt: 1, State: gmailrelay.StateUnknown, Reason: "timeout"},
				gmailrelay.Line{Kind: gmailrelay.KindSearch, Attempt: 1, Query: q, Hits: 2, SentHits: 2, Check: 1},
				gmailrelay.Line{Kind: gmailrelay.KindReview, Attempt: 1, State: gmailrelay.StateReview, Reason: "duplicate",
					Query: q, Hits: 2, SentHits: 2, Check: 1, Note: "the mailbox holds this message more than once"})
		case 1:
			j.State = gmailrelay.StateFailed
			lines = append(lines, gmailrelay.Line{Kind: gmailrelay.KindNotSent, Attempt: 1, State: gmailrelay.StateFailed, Status: 400, Reason: "rejected"})
		case 2:
			j.State, j.AmbiguousAt, j.NextCheckAt = gmailrelay.StateUnknown, time.Date(2026, 12, 1, 6, 0, 0, i, time.UTC), time.Date(2026, 12, 1, 7, 0, 0, i, time.UTC)
			lines = append(lines, gmailrelay.Line{Kind: gmailrelay.KindAmbiguous, Attempt: 1, State: gmailrelay.StateUnknown, Reason: "timeout"})
		case 3:
			j.State = gmailrelay.StateAbandoned
			lines = append(lines, gmailrelay.Line{Kind: gmailrelay.KindAmbiguous, Attempt: 1, State: gmailrelay.StateUnknown, Reason: "timeout"},
				gmailrelay.Line{Kind: gmailrelay.KindResolved, Attempt: 1, State: gmailrelay.StateAbandoned, Reason: "abandon", Actor: "ui", Note: "n"})
		default:
			j.State, j.Effects, j.GmailID = gmailrelay.StateSent, 1, fmt.Sprintf("18c%013x", i)
			lines = append(lines, gmailrelay.Line{Kind: gmailrelay.KindEffect, Attempt: 1, State: gmailrelay.StateSent,
				Source: gmailrelay.SourceResponse, GmailID: j.GmailID})
		}
		return gmailrelay.Change{Job: &j, Lines: lines}, nil
	}
}

// benchSession signs in through the handler and returns the session cookie.
func benchSession(b *testing.B, h http.Handler) *http.Cookie {
	b.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/ui/login", nil))
	m := csrfRE.FindStringSubmatch(rec.Body.String())
	login := rec.Result().Cookies()[0]
	req := httptest.NewRequest(http.MethodPost, "/ui/login", strings.NewReader(url.Values{"csrf": {m[1]}, "token": {adminToken}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.AddCookie(login)
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	for _, c := range rec.Result().Cookies() {
		if c.Name == "gmailrelay_session" {
			return c
		}
	}
	b.Fatalf("no session: %d %s", rec.Code, rec.Body.String())
	return nil
}

func benchGet(b *testing.B, h http.Handler, ck *http.Cookie, path string) int {
	req := httptest.NewRequest(http.MethodGet, path, nil)
	req.AddCookie(ck)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		b.Fatalf("GET %s: %d %s", path, rec.Code, rec.Body.String())
	}
	return rec.Body.Len()
}

// BenchmarkPages measures each console page's handler over a log of
// 100,000 jobs (about 330,000 lines). Figures: docs/benchmarks.md.
func BenchmarkPages(b *testing.B) {
	lg, now := fillLog(b, filepath.Join(b.TempDir(), "accept.db"))
	b.Cleanup(func() { _ = lg.Close() })
	// The relay runs on the filled log (its Gmail client is never called),
	// with the default quota a relay without a quota setting has.
	te := testenv.New(b, testenv.Options{Now: now, QuotaPerMinute: -1,
		OpenLog: func(testing.TB, func() time.Time) gmailrelay.Store { return lg }})
	svc, pol := te.Service, te.Policy
	newConsole := func() http.Handler {
		return console.New(console.Config{Relay: console.Adapt(console.Backend{Log: lg, Policy: pol, SendPath: svc, Now: now, Mode: "sandbox"}), APIToken: apiToken, AdminToken: adminToken})
	}
	st, _ := lg.Stats(context.Background())
	if st.Jobs != benchJobs {
		b.Fatalf("log holds %d jobs, want %d", st.Jobs, benchJobs)
	}
	b.Logf("log: %d jobs, %d lines, review %d", st.Jobs, st.Lines, st.ByState[gmailrelay.StateReview])
	h := newConsole()
	ck := benchSession(b, h)
	reviewID := "<job-bench00050000@bench.example.com>"
	pages := []struct{ name, path string }{
		{"overview", "/ui/"},
		{"review", "/ui/review"},
		{"review-page-10", "/ui/review?after=" + url.QueryEscape("<job-bench00045000@bench.example.com>")},
		{"job", "/ui/jobs/" + url.PathEscape(reviewID)},
		{"jobs-sent", "/ui/jobs?state=sent"},
		{"log-newest", "/ui/log"},
		{"log-middle", fmt.Sprintf("/ui/log?before=%d", st.Lines/2)},
		{"faults", "/ui/faults"},
	}
	for _, p := range pages {
		b.Run(p.name, func(b *testing.B) {
			size := 0
			for b.Loop() {
				size = benchGet(b, h, ck, p.path)
			}
			b.ReportMetric(float64(size), "bytes/page")
		})
	}
	// The first overview of a process reads the last hour of lines to
	// build the chart; later ones read only lines written since.
	b.Run("overview-cold", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			h := newConsole()
			ck := benchSession(b, h)
			b.StartTimer()
			benchGet(b, h, ck, "/ui/")
		}
	})
}
