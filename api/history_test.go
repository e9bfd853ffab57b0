package api_test

import (
	"context"
	"strings"
	"testing"

	"github.com/gmailrelay/gmailrelay/sweeper"
)

// /v1/stats shows each mailbox's history tail once its cursor started:
// the cursor, how stale it is and the fallbacks; /metrics the same as
// gauges. Emulator result.
func TestEmulatorStatsShowTheHistoryTail(t *testing.T) {
	e := newEnv(t, envOpts{})
	stats := func() map[string]any {
		t.Helper()
		r := e.must("GET", "/v1/stats", apiToken, nil)
		boxes, _ := r.body["mailboxes"].(map[string]any)
		box, _ := boxes["default"].(map[string]any)
		if r.status != 200 || box == nil {
			t.Fatalf("stats: %d %s", r.status, r.raw)
		}
		return box
	}
	if h := stats()["history"]; h != nil {
		t.Fatalf("history before the tail ran: %v, want none", h)
	}
	cfg := e.SweeperConfig()
	cfg.History = true
	if _, err := sweeper.New(cfg).RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.Clock.Advance(30e9)
	h, _ := stats()["history"].(map[string]any)
	if h == nil || h["cursor"] == "" || h["cursor"] == nil || h["lag_s"] != 30.0 || h["fallbacks"] != 0.0 {
		t.Errorf("history after a pass and 30 s: %v; want a cursor, lag_s 30, fallbacks 0", h)
	}
	m := e.must("GET", "/metrics", apiToken, nil)
	for _, want := range []string{`gmailrelay_history_lag_seconds{mailbox="default"} 30`, `gmailrelay_history_fallbacks_total{mailbox="default"} 0`} {
		if !strings.Contains(string(m.raw), want) {
			t.Errorf("/metrics has no %s", want)
		}
	}
}
