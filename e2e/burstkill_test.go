package e2e_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
)

// TestEmulatorSIGKILLDuringBurstKeepsEveryAnsweredKey: 16 callers send
// at once to the real binary, which is SIGKILLed in the middle of the
// burst. Every key answered 200 or 202 before the kill is in the log
// after the restart (an answer is given only once its job is durable),
// and the data file is alone in its directory, after the kill and after
// the restart: the log writes nothing beside it.
func TestEmulatorSIGKILLDuringBurstKeepsEveryAnsweredKey(t *testing.T) {
	const (
		callers  = 16
		killFrom = 120 // answers before the kill
	)
	r := startRelay(t, relayOptions{})
	base := r.URL()
	var (
		mu       sync.Mutex
		answered []string
		failed   int
	)
	enough := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	for c := range callers {
		wg.Go(func() {
			for i := 0; ; i++ {
				key := fmt.Sprintf("burst:%d:%d", c, i)
				body, _ := json.Marshal(request(key, ""))
				status, _, err := r.do(base, http.MethodPost, "/v1/send", apiToken, string(body))
				mu.Lock()
				if err == nil && (status == http.StatusOK || status == http.StatusAccepted) {
					answered = append(answered, key)
					if len(answered) >= killFrom {
						once.Do(func() { close(enough) })
					}
				} else {
					failed++
				}
				mu.Unlock()
				if err != nil {
					return // the relay is gone
				}
				if status != http.StatusOK && status != http.StatusAccepted {
					t.Errorf("send %s: status %d, want 200 or 202", key, status)
					return
				}
			}
		})
	}
	<-enough
	if !r.Kill() {
		t.Fatal("the relay had exited before the kill")
	}
	wg.Wait()
	r.wantDataFileAlone(t)

	r.Restart(t) // runs gmailrelay check on the killed file first
	r.wantDataFileAlone(t)
	inLog := map[string]bool{}
	for _, j := range r.AllJobs(t) {
		inLog[j.MessageID] = true
	}
	mu.Lock()
	defer mu.Unlock()
	for _, key := range answered {
		if !inLog[msgID(key)] {
			t.Errorf("key %s was answered before the kill but is not in the log after the restart", key)
		}
	}
	t.Logf("%d callers, %d sends answered 200/202 before the SIGKILL, %d cut off by it; %d jobs in the log after the restart",
		callers, len(answered), failed, len(inLog))
}
