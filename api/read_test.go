package api_test

import (
	"bytes"
	"encoding/json"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/gmailrelay/gmailrelay/acceptlog"
	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/internal/testenv"
	"github.com/gmailrelay/gmailrelay/relay"
)

func TestEmulatorReadingTheLog(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.must("POST", "/v1/send", apiToken, sendBody("read-1"))
	e.addFault(map[string]any{"mode": "forward-then-drop-response", "drop": "504"})
	e.must("POST", "/v1/send", apiToken, sendBody("read-2"))
	id := relay.MessageID("read-1", domain)

	for _, path := range []string{"/v1/jobs/" + url.PathEscape(id), "/v1/jobs/" + strings.Trim(id, "<>")} {
		r := e.must("GET", path, apiToken, nil)
		lines, _ := r.body["lines"].([]any)
		if r.status != 200 || r.body["state"] != "sent" || len(lines) < 3 {
			t.Errorf("GET %s: %d %s", path, r.status, r.raw)
		}
	}
	if r := e.must("GET", "/v1/jobs/"+url.PathEscape("<nope@x.org>"), apiToken, nil); r.status != 404 {
		t.Errorf("missing job: %d, want 404", r.status)
	}
	r := e.must("GET", "/v1/jobs?state=unknown", apiToken, nil)
	jobs, _ := r.body["jobs"].([]any)
	if r.status != 200 || len(jobs) != 1 {
		t.Errorf("unknown jobs: %d %s, want one", r.status, r.raw)
	}
	if r := e.must("GET", "/v1/jobs?state=bogus", apiToken, nil); r.status != 400 {
		t.Errorf("bad state filter: %d, want 400", r.status)
	}
	r = e.must("GET", "/v1/log?after=0&limit=3", apiToken, nil)
	lines, _ := r.body["lines"].([]any)
	if r.status != 200 || len(lines) != 3 || r.body["next"] == nil {
		t.Errorf("log page: %d %s", r.status, r.raw)
	}
	r = e.must("GET", "/v1/log", apiToken, nil, "Accept", "application/x-ndjson")
	rows := strings.Split(strings.TrimSpace(string(r.raw)), "\n")
	var first acceptlog.Line
	if err := json.Unmarshal([]byte(rows[0]), &first); err != nil || first.Seq != 1 || len(rows) < 6 {
		t.Errorf("ndjson: %d rows, first %+v (%v)", len(rows), first, err)
	}
	r = e.must("GET", "/v1/stats", apiToken, nil)
	if r.status != 200 || r.body["effect_lines"] != float64(1) {
		t.Errorf("stats: %s", r.raw)
	}
}

func TestEmulatorReviewResolveAndSweep(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.addFault(map[string]any{"mode": "forward-then-drop-response", "drop": "504", "channel": "billing"})
	b := sendBody("bill-1")
	b["channel"] = "billing"
	e.must("POST", "/v1/send", apiToken, b)
	id := relay.MessageID("bill-1", domain)
	e.Clock.Advance(2 * time.Minute)
	r := e.must("POST", "/admin/sweep", adminToken, nil)
	if r.status != 200 {
		t.Fatalf("sweep: %d %s", r.status, r.raw)
	}
	if j, _ := e.job(id); j.State != acceptlog.StateReview {
		t.Fatalf("after sweep: %s, want review", j.State)
	}
	path := "/v1/jobs/" + url.PathEscape(id) + "/resolve"
	if r := e.must("POST", path, apiToken, map[string]any{"action": "mark-sent"}); r.status != 403 {
		t.Errorf("resolve with the API token: %d, want 403", r.status)
	}
	if r := e.must("POST", path, adminToken, map[string]any{"action": "mark-sent", "note": "seen in Sent", "typo": 1}); r.status != 400 {
		t.Errorf("resolve with an unknown field: %d, want 400", r.status)
	}
	r = e.must("POST", path, adminToken, map[string]any{"action": "mark-sent", "note": "seen in Sent"})
	if r.status != 200 || r.body["state"] != "sent" {
		t.Fatalf("resolve: %d %s", r.status, r.raw)
	}
	if got := e.Emulator.Count(id); got != 1 {
		t.Errorf("emulator holds %d, want 1 (never resent)", got)
	}
}

func TestEmulatorMetricsMoveWithSends(t *testing.T) {
	e := newEnv(t, envOpts{})
	scrape := func() map[string]float64 { return e.scrape() }
	before := scrape()
	e.must("POST", "/v1/send", apiToken, sendBody("m1"))
	e.addFault(map[string]any{"mode": "fail-before-forward", "count": 1})
	e.must("POST", "/v1/send", apiToken, sendBody("m2"))
	after := scrape()
	checks := []string{
		"gmailrelay_sends_total,channel=default,outcome=sent,reason=",
		"gmailrelay_gmail_call_seconds,mailbox=default,method=send,result=ok",
		"gmailrelay_jobs,state=sent",
		"gmailrelay_jobs,state=failed",
		"gmailrelay_quota_units_spent_total",
		"gmailrelay_effect_lines_total",
		"gmailrelay_faults_injected_total,mode=fail-before-forward",
	}
	for _, k := range checks {
		if after[k] <= before[k] {
			t.Errorf("%s: %v -> %v, want it to grow", k, before[k], after[k])
		}
	}
	for _, k := range []string{"gmailrelay_review_queue_depth", "gmailrelay_oldest_unknown_age_seconds", "gmailrelay_duplicates_found_total", "gmailrelay_handle_failures_total"} {
		if _, ok := after[k]; !ok {
			t.Errorf("metric %s missing", k)
		}
	}
}

func TestEmulatorConcurrentSameKeyGets409WithRetryAfter(t *testing.T) {
	e := newEnv(t, envOpts{})
	if _, err := e.Emulator.AddFault(gmailfake.Fault{Method: "send", Action: "latency", Latency: 300 * time.Millisecond, Count: -1}); err != nil {
		t.Fatal(err)
	}
	type res struct {
		status int
		retry  string
	}
	out := make(chan res, 20)
	start := make(chan struct{})
	for range 20 {
		go func() {
			<-start
			r, err := e.do("POST", "/v1/send", apiToken, sendBody("busy"))
			if err != nil {
				out <- res{}
				return
			}
			out <- res{r.status, r.header.Get("Retry-After")}
		}()
	}
	close(start)
	counts := map[int]int{}
	for range 20 {
		r := <-out
		counts[r.status]++
		if r.status == 409 && r.retry == "" {
			t.Error("409 without Retry-After")
		}
	}
	if counts[200] < 1 || counts[200]+counts[409] != 20 {
		t.Errorf("statuses %v, want 200s (sent or replayed) and 409s only", counts)
	}
	if got := e.Emulator.Count(relay.MessageID("busy", domain)); got != 1 {
		t.Errorf("emulator holds %d, want 1", got)
	}
}

// TestLogsNeverCarryTokensBodiesOrRecipients sends through every path that
// logs (success, fault, drop, bad input, auth failure) with logging at
// debug level, and searches the logs for the secrets.
func TestLogsNeverCarryTokensBodiesOrRecipients(t *testing.T) {
	logs := &testenv.LockedBuffer{}
	e := newEnv(t, envOpts{logs: logs})
	secretBody := "the-secret-body-text"
	msg := map[string]any{"key": "log-1", "to": "secret.recipient@example.org", "cc": "cc.person@example.org",
		"subject": "the-secret-subject", "body": secretBody}
	e.must("POST", "/v1/send", apiToken, msg)
	e.addFault(map[string]any{"mode": "forward-then-drop-response", "count": 1})
	msg["key"] = "log-2"
	_, _ = e.do("POST", "/v1/send", apiToken, msg)
	msg["to"] = "bad\r\nsecret.recipient@example.org"
	e.must("POST", "/v1/send", apiToken, msg)
	e.must("GET", "/v1/jobs", "wrong-"+apiToken, nil)
	out := logs.String()
	if !strings.Contains(out, "request") {
		t.Fatalf("no access log written: %q", out)
	}
	for _, secret := range []string{apiToken, adminToken, "secret.recipient", "cc.person", secretBody, "the-secret-subject"} {
		if strings.Contains(out, secret) {
			t.Errorf("logs contain %q", secret)
		}
	}
}

// scrape reads /metrics into name,label=value… → value (histograms: their
// sample count).
func (e *env) scrape() map[string]float64 {
	t := e.t
	t.Helper()
	r := e.must("GET", "/metrics", "", nil)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(r.raw))
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	out := map[string]float64{}
	for name, f := range fams {
		for _, m := range f.Metric {
			key := name
			for _, l := range m.Label {
				key += "," + l.GetName() + "=" + l.GetValue()
			}
			switch {
			case m.Counter != nil:
				out[key] = m.Counter.GetValue()
			case m.Gauge != nil:
				out[key] = m.Gauge.GetValue()
			case m.Histogram != nil:
				out[key] = float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return out
}
