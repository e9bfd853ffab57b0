package console

import (
	"testing"
	"time"
)

// The throttle counts each client address on its own, and forgets the
// address quiet longest when it must make room.
func TestThrottleIsPerAddress(t *testing.T) {
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	th := newThrottle(func() time.Time { return now })
	for range throttleFails {
		th.failed("192.0.2.1")
	}
	th.failed("192.0.2.2")
	if th.blocked("192.0.2.1") != throttleFirstBlock || th.blocked("192.0.2.2") != 0 || th.blocked("192.0.2.3") != 0 {
		t.Fatalf("blocks: %v %v %v; want 1m for the guessing address only",
			th.blocked("192.0.2.1"), th.blocked("192.0.2.2"), th.blocked("192.0.2.3"))
	}
	now = now.Add(throttleFirstBlock + throttleMaxBlock)
	th.failed("192.0.2.4")
	th.mu.Lock()
	th.forgetLocked(now)
	_, kept1 := th.m["192.0.2.1"]
	_, kept4 := th.m["192.0.2.4"]
	th.mu.Unlock()
	if kept1 || !kept4 {
		t.Fatalf("after 15 quiet minutes: 192.0.2.1 kept %v (want forgotten), 192.0.2.4 kept %v (want kept)", kept1, kept4)
	}
}
