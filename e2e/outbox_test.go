package e2e_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay"
)

// outboxPass runs one delivery pass of the running relay (POST
// /admin/outbox) and returns how many jobs it left queued.
func (r *relayProc) outboxPass(t testing.TB) int {
	t.Helper()
	var res struct {
		Left int `json:"left"`
	}
	if err := r.admin(http.MethodPost, "/admin/outbox", "", http.StatusOK, &res); err != nil {
		t.Fatal(err)
	}
	return res.Left
}

// TestEmulatorSIGKILLMidBacklogLosesNoQueuedJobAndDeliversNoneTwice: the
// real binary at 600 quota units a minute (6 sends) takes 40 sends: a few
// go at once, the rest are queued (202). It is SIGKILLed three times in
// the middle of the backlog — once while a delivery pass is in flight —
// and restarted on the same data. In the end every job is sent and the
// emulator delivered each exactly once.
func TestEmulatorSIGKILLMidBacklogLosesNoQueuedJobAndDeliversNoneTwice(t *testing.T) {
	r := startRelay(t, relayOptions{quota: 600})
	const n = 40
	ids := make([]string, n)
	queued := 0
	for i := range n {
		key := fmt.Sprintf("backlog:%d", i)
		ids[i] = msgID(key)
		body, _ := json.Marshal(request(key, ""))
		status, b, err := r.do(r.URL(), http.MethodPost, "/v1/send", apiToken, string(body))
		if err != nil || (status != http.StatusOK && status != http.StatusAccepted) {
			t.Fatalf("send %d: %d %s %v, want 200 or 202", i, status, b, err)
		}
		if status == http.StatusAccepted {
			queued++
		}
	}
	if queued < n/2 {
		t.Fatalf("%d of %d sends queued, want a backlog", queued, n)
	}
	for kill := range 3 {
		r.Advance(t, time.Minute)
		if kill == 1 {
			// A kill while a pass is delivering.
			done := make(chan struct{})
			base := r.URL()
			go func() {
				defer close(done)
				_, _, _ = r.do(base, http.MethodPost, "/admin/outbox", adminToken, "")
			}()
			r.Kill()
			<-done
		} else {
			r.outboxPass(t)
			r.Kill()
		}
		r.Restart(t)
	}
	// Drain: deliver, reconcile, let time pass.
	for round := 0; ; round++ {
		if round > 60 {
			t.Fatal("backlog not drained after 60 emulated minutes")
		}
		left := r.outboxPass(t)
		r.Sweep(t)
		done := left == 0
		for _, j := range r.AllJobs(t) {
			if j.State != gmailrelay.StateSent {
				done = false
			}
		}
		if done {
			break
		}
		r.Advance(t, time.Minute)
	}
	jobs := r.AllJobs(t)
	if len(jobs) != n {
		t.Errorf("%d jobs in the log, want %d (none lost)", len(jobs), n)
	}
	twice := 0
	for _, id := range ids {
		if d := r.Emu.Deliveries(id); d != 1 {
			t.Errorf("%s: emulator deliveries %d, want 1", id, d)
			if d > 1 {
				twice++
			}
		}
	}
	t.Logf("emulator results: %d sends, %d queued, 3 SIGKILLs mid-backlog: %d jobs, %d delivered twice", n, queued, len(jobs), twice)
}
