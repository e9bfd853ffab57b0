package api_test

import (
	"encoding/base64"
	"net/http"
	"sync"
	"testing"

	"github.com/gmailrelay/gmailrelay/api"
)

// OnSendTiming hears once about every send that reached the send path, on
// both surfaces, with the phases it went through (emulator results: the
// Gmail call is the emulator's), and not about a refused request.
func TestSendTimingHook(t *testing.T) {
	var mu sync.Mutex
	var got []api.SendTiming
	e := newEnv(t, envOpts{configure: func(c *api.Config) {
		c.OnSendTiming = func(st api.SendTiming) {
			mu.Lock()
			got = append(got, st)
			mu.Unlock()
		}
	}})
	r := e.must("POST", "/v1/send", apiToken, map[string]any{"key": "timing-1", "to": "rcpt@example.com", "subject": "s", "text": "t"})
	if r.status != http.StatusOK {
		t.Fatalf("send: %d %s", r.status, r.raw)
	}
	raw := "From: shop@example.com\r\nTo: rcpt@example.com\r\nMessage-ID: <timing-2@example.com>\r\nSubject: s\r\n\r\nbody\r\n"
	r = e.must("POST", "/gmail/v1/users/me/messages/send", apiToken, map[string]any{"raw": base64.URLEncoding.EncodeToString([]byte(raw))})
	if r.status != http.StatusOK {
		t.Fatalf("gmail send: %d %s", r.status, r.raw)
	}
	if r = e.must("POST", "/v1/send", apiToken, map[string]any{"key": "timing-3"}); r.status != http.StatusBadRequest {
		t.Fatalf("send without recipient: %d, want 400", r.status)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 {
		t.Fatalf("OnSendTiming called %d times, want 2 (the refused request never reached the send path)", len(got))
	}
	for i, st := range got {
		if st.FirstCommit <= 0 || st.Gmail <= 0 || st.OutcomeCommit <= 0 || st.Decode <= 0 || st.Answer <= 0 {
			t.Errorf("send %d: a phase is missing: %+v", i, st)
		}
		if sum := st.Decode + st.Admit + st.FirstCommit + st.Gmail + st.OutcomeCommit + st.Answer; sum > st.Total {
			t.Errorf("send %d: phases add up to %v, more than the handler's %v", i, sum, st.Total)
		}
	}
}
