package relay_test

import (
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay/internal/testclock"
	"github.com/gmailrelay/gmailrelay/relay"
)

func TestQuotaForegroundBackgroundAndPause(t *testing.T) {
	clock := testclock.New()
	q := relay.NewQuota(1200, clock.Now) // 20 units/s, burst 1200, send reserve 120
	if ok, _ := q.Available(1200, false); !ok {
		t.Fatal("a full bucket must have a minute's worth for sends")
	}
	if ok, _ := q.Available(1200, true); ok {
		t.Error("background work must leave the send reserve")
	}
	if got := q.Spent(); got != 0 {
		t.Fatalf("Available took %d units", got)
	}
	for i := 0; i < 10; i++ { // background takes 1000 of 1200, leaving the reserve
		if ok, _ := q.TakeBackground(100); !ok {
			t.Fatalf("background take %d refused", i)
		}
	}
	if ok, wait := q.TakeBackground(100); ok || wait <= 0 {
		t.Errorf("background take into the reserve: ok=%v wait=%v, want refused with a wait", ok, wait)
	}
	if ok, _ := q.TakeForeground(100); !ok {
		t.Error("a send must still get through while the sweeper is held back")
	}
	ok, wait := q.TakeForeground(200)
	if ok || wait <= 0 {
		t.Fatalf("over budget: ok=%v wait=%v", ok, wait)
	}
	if got := q.Spent(); got != 1100 {
		t.Errorf("spent %d, want 1100 (refused takes take nothing)", got)
	}
	clock.Advance(wait)
	if ok, _ := q.TakeForeground(200); !ok {
		t.Error("after the wait it must fit")
	}
	q.Pause(30 * time.Second)
	if ok, wait := q.TakeForeground(1); ok || wait != 30*time.Second {
		t.Errorf("paused: ok=%v wait=%v, want refused for 30s", ok, wait)
	}
	clock.Advance(30 * time.Second)
	if ok, _ := q.TakeForeground(1); !ok {
		t.Error("pause must end")
	}
}
