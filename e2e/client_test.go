package e2e_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/e2e"
	"github.com/gmailrelay/gmailrelay/relay"
)

// advance moves the emulator's and the relay's clocks forward by d.
func (r *relayProc) advance(d time.Duration) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.clock.Advance(d)
	if r.url == "" {
		return nil // the next start catches up
	}
	return r.postClock(r.url, d)
}

func (r *relayProc) postClock(base string, d time.Duration) error {
	body := fmt.Sprintf(`{"advance":%q}`, d.String())
	status, b, err := r.do(base, http.MethodPost, "/admin/clock", adminToken, body)
	if err != nil {
		return fmt.Errorf("advance relay clock: %w", err)
	}
	if status != http.StatusOK {
		return fmt.Errorf("advance relay clock: status %d: %s", status, b)
	}
	return nil
}

// Advance is advance for tests that expect the relay to be up.
func (r *relayProc) Advance(t testing.TB, d time.Duration) {
	t.Helper()
	if err := r.advance(d); err != nil {
		t.Fatal(err)
	}
}

// do makes one request to base+path and returns status and body.
func (r *relayProc) do(base, method, path, token, body string) (int, []byte, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(context.Background(), method, base+path, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// admin makes an admin request to the running process and decodes a JSON
// answer with status want into out (nil: ignore the body).
func (r *relayProc) admin(method, path, body string, want int, out any) error {
	base := r.URL()
	if base == "" {
		return errors.New("the relay is not running")
	}
	status, b, err := r.do(base, method, path, adminToken, body)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	if status != want {
		return fmt.Errorf("%s %s: status %d, want %d: %s", method, path, status, want, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("%s %s: decode %s: %w", method, path, b, err)
		}
	}
	return nil
}

// AddFault adds a relay fault rule (POST /admin/faults) and returns its id.
func (r *relayProc) AddFault(t testing.TB, spec string) string {
	t.Helper()
	var rule struct {
		ID string `json:"id"`
	}
	if err := r.admin(http.MethodPost, "/admin/faults", spec, http.StatusCreated, &rule); err != nil {
		t.Fatal(err)
	}
	return rule.ID
}

// sweepResult is the part of POST /admin/sweep's answer the suite reads.
type sweepResult struct {
	Due      int `json:"due"`
	Checked  int `json:"checked"`
	Resent   int `json:"resent"`
	Retried  int `json:"retried"`
	Deferred int `json:"deferred"`
	Errors   int `json:"errors"`
}

// Sweep runs one sweeper pass.
func (r *relayProc) Sweep(t testing.TB) sweepResult {
	t.Helper()
	var res sweepResult
	if err := r.admin(http.MethodPost, "/admin/sweep", "", http.StatusOK, &res); err != nil {
		t.Fatal(err)
	}
	return res
}

// maxSweeps bounds SweepUntilQuiet: more rounds (of one grace each) than
// any job needs — checks × max_attempts × verify, plus backoffs, plus the
// sweeper's wait for the mailbox's observed p99 lag, which a soak's kills
// inflate (a lag is measured send → first hit, and a relay that was down
// looks late): a random realism soak once had jobs scheduled an hour after
// their attempt, unresolved after 60 rounds. The loop ends as soon as
// nothing is left, so the bound only costs a run that would fail.
const maxSweeps = 150

// SweepUntilQuiet repeats "advance both clocks by the grace, sweep" until
// no job is forwarding or unknown and none has a check scheduled; it
// returns the number of rounds and fails the test when the bound is hit.
func (r *relayProc) SweepUntilQuiet(t testing.TB) int {
	t.Helper()
	for round := 1; round <= maxSweeps; round++ {
		r.Advance(t, grace)
		// Queued jobs (the relay's quota was paused by a Gmail 429) are
		// delivered in the test's rounds, not by the loop's real timer.
		if err := r.admin(http.MethodPost, "/admin/outbox", "", http.StatusOK, nil); err != nil {
			t.Fatal(err)
		}
		r.Sweep(t)
		var busy []gmailrelay.Job
		for _, j := range r.AllJobs(t) {
			if j.State == gmailrelay.StateQueued || j.State == gmailrelay.StateForwarding || j.State == gmailrelay.StateUnknown || !j.NextCheckAt.IsZero() {
				busy = append(busy, j)
			}
		}
		if len(busy) == 0 {
			return round
		}
		if round == maxSweeps {
			for _, j := range busy[:min(len(busy), 3)] {
				b, _ := json.Marshal(r.Job(t, j.MessageID))
				t.Logf("unresolved: %s", b)
			}
		}
	}
	t.Fatalf("jobs still unresolved after %d sweeps", maxSweeps)
	return 0
}

// AllJobs lists every job (GET /v1/jobs, every page), without lines.
func (r *relayProc) AllJobs(t testing.TB) []gmailrelay.Job {
	t.Helper()
	var all []gmailrelay.Job
	after := ""
	for {
		var page struct {
			Jobs []gmailrelay.Job `json:"jobs"`
			Next string           `json:"next"`
		}
		path := "/v1/jobs?limit=1000"
		if after != "" {
			path += "&after=" + url.QueryEscape(after)
		}
		if err := r.admin(http.MethodGet, path, "", http.StatusOK, &page); err != nil {
			t.Fatal(err)
		}
		all = append(all, page.Jobs...)
		if page.Next == "" || len(page.Jobs) == 0 {
			return all
		}
		after = page.Next
	}
}

// Job fetches one job with its lines (GET /v1/jobs/{id}).
func (r *relayProc) Job(t testing.TB, id string) e2e.Job {
	t.Helper()
	var j e2e.Job
	if err := r.admin(http.MethodGet, "/v1/jobs/"+url.PathEscape(id), "", http.StatusOK, &j); err != nil {
		t.Fatal(err)
	}
	return j
}

// Log reads the whole acceptance log (GET /v1/log, every page).
func (r *relayProc) Log(t testing.TB) []gmailrelay.Line {
	t.Helper()
	var all []gmailrelay.Line
	var after uint64
	for {
		var page struct {
			Lines []gmailrelay.Line `json:"lines"`
			Next  uint64            `json:"next"`
		}
		if err := r.admin(http.MethodGet, fmt.Sprintf("/v1/log?after=%d&limit=1000", after), "", http.StatusOK, &page); err != nil {
			t.Fatal(err)
		}
		all = append(all, page.Lines...)
		if page.Next == after { // caught up: next never goes back
			return all
		}
		after = page.Next
	}
}

// Observe collects everything the checker needs, with history.
func (r *relayProc) Observe(t testing.TB, history []e2e.Op) e2e.Observation {
	t.Helper()
	o := e2e.Observation{Log: r.Log(t), Messages: r.Emu.Messages(""), History: history, ReviewChannels: reviewChannels(),
		Deliveries: map[string]int{}}
	for _, j := range r.AllJobs(t) {
		o.Jobs = append(o.Jobs, r.Job(t, j.MessageID))
		// Ground truth: deliveries, not copies.
		o.Deliveries[j.MessageID] = r.Emu.Deliveries(j.MessageID)
	}
	return o
}

// sendRequest is the body of POST /v1/send the suite uses.
type sendRequest struct {
	Key     string `json:"key"`
	To      string `json:"to"`
	Subject string `json:"subject"`
	Body    string `json:"body"`
	Channel string `json:"channel,omitempty"`
}

// request builds the one request content a key always has (the same key
// with other content would be 422).
func request(key, channel string) sendRequest {
	return sendRequest{Key: key, To: "customer@example.net", Subject: "Your order " + key, Body: "Hello from " + key, Channel: channel}
}

// msgID is the Message-ID a key derives to under the test policy.
func msgID(key string) string { return relay.MessageID(key, msgidDomain) }

// Send makes one POST /v1/send as a caller with the API token would, and
// records what the caller saw.
func (r *relayProc) Send(req sendRequest, caller, try int) e2e.Op {
	op := e2e.Op{Caller: caller, Key: req.Key, MessageID: msgID(req.Key), Try: try}
	base := r.URL()
	if base == "" {
		op.Outcome, op.Err = e2e.Fail, "relay not running"
		return op
	}
	body, _ := json.Marshal(req)
	status, b, err := r.do(base, http.MethodPost, "/v1/send", apiToken, string(body))
	classify(&op, status, b, err)
	return op
}

// classify turns an answer (or its absence) into what the caller knows.
func classify(op *e2e.Op, status int, body []byte, err error) {
	if err != nil {
		op.Err = err.Error()
		if errors.Is(err, syscall.ECONNREFUSED) {
			op.Outcome = e2e.Fail // the request never reached the relay
		} else {
			op.Outcome = e2e.Info
		}
		return
	}
	op.Status = status
	var a struct {
		State string `json:"state"`
	}
	_ = json.Unmarshal(body, &a)
	op.State = a.State
	switch {
	case status == http.StatusOK && a.State == string(gmailrelay.StateSent):
		op.Outcome = e2e.OK
	case status >= 200 && status < 300:
		op.Outcome = e2e.Info
	default:
		op.Outcome = e2e.Fail
	}
}

// opString is a one-line account of an operation, for logs.
func opString(op e2e.Op) string {
	s := fmt.Sprintf("caller %d try %d key %s: %s", op.Caller, op.Try, op.Key, op.Outcome)
	if op.Status != 0 {
		s += fmt.Sprintf(" (%d %s)", op.Status, op.State)
	}
	if op.Err != "" {
		s += " (" + op.Err + ")"
	}
	return s
}
