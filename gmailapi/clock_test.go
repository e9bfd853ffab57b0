package gmailapi

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// The Date headers of Gmail's answers bound its clock offset: each answer
// narrows the interval, an answer outside it (a clock that stepped)
// starts it again, a header that is not an HTTP-date is ignored.
func TestGmailClockNarrowsAndRestarts(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)
	date := func(d time.Duration) string { return t0.Add(d).Format(http.TimeFormat) }
	var c gmailClock
	if _, _, ok := c.offset(); ok {
		t.Fatal("offset known before any answer")
	}
	c.observe("not a date", t0, t0)
	if _, _, ok := c.offset(); ok {
		t.Fatal("offset known from a malformed Date")
	}
	// Gmail 5.3 s ahead: an answer dated 09:00:05 to a call at local
	// 09:00:00.0–00.1 says [4.9 s, 6 s].
	c.observe(date(5*time.Second), t0, t0.Add(100*time.Millisecond))
	want := func(lo, hi time.Duration) {
		t.Helper()
		gl, gh, ok := c.offset()
		if !ok || gl != lo || gh != hi {
			t.Fatalf("offset = [%s, %s] (known %v), want [%s, %s]", gl, gh, ok, lo, hi)
		}
	}
	want(4900*time.Millisecond, 6*time.Second)
	// A call at local 09:00:00.8, answered at once, dated 09:00:06: [5.2 s, 6.2 s].
	c.observe(date(6*time.Second), t0.Add(800*time.Millisecond), t0.Add(800*time.Millisecond))
	want(5200*time.Millisecond, 6*time.Second)
	// The host's clock steps 1 h ahead: the next answer is far outside.
	c.observe(date(10*time.Second), t0.Add(time.Hour+5*time.Second), t0.Add(time.Hour+5*time.Second))
	want(5*time.Second-time.Hour, 6*time.Second-time.Hour)
}

// The client reads the Date of every answer, errors included.
func TestClientMeasuresGmailClock(t *testing.T) {
	now := time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)
	gmailNow := now.Add(-7 * time.Second)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Date", gmailNow.Format(http.TimeFormat))
		http.Error(w, `{"error":{"code":500,"message":"backend"}}`, http.StatusInternalServerError)
	}))
	defer srv.Close()
	g, err := New(t.Context(), Config{Endpoint: srv.URL, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.List(t.Context(), "me", "", nil, "", 1); err == nil {
		t.Fatal("List of a 500 = nil error")
	}
	lo, hi, ok := g.ClockOffset()
	if !ok || lo != -7*time.Second || hi != -6*time.Second {
		t.Fatalf("ClockOffset = [%s, %s] (known %v), want [-7s, -6s]", lo, hi, ok)
	}
}
