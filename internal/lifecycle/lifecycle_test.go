package lifecycle

import (
	"context"
	"testing"
	"time"
)

// Sleep reports a whole wait, a wait cut by its context, and does not
// wait at all for a duration ≤ 0.
func TestSleep(t *testing.T) {
	if !Sleep(context.Background(), time.Millisecond) {
		t.Fatal("Sleep(1ms) = false, want true (the wait elapsed)")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if Sleep(ctx, time.Hour) {
		t.Fatal("Sleep(1h) with a done context = true, want false")
	}
	if !Sleep(ctx, 0) || !Sleep(ctx, -time.Second) {
		t.Fatal("Sleep(≤ 0) = false, want true: there is nothing to wait for")
	}
}

// Repeat runs its pass at once and again on every wake, and stops when
// its context ends.
func TestRepeatRunsAtOnceAndOnWake(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	wake := make(chan struct{}, 1)
	passes := make(chan int, 4)
	n := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		Repeat(ctx, wake, func(context.Context) time.Duration {
			n++
			passes <- n
			return time.Hour
		})
	}()
	if got := <-passes; got != 1 {
		t.Fatalf("first pass = %d, want 1", got)
	}
	Wake(wake)
	if got := <-passes; got != 2 {
		t.Fatalf("pass after Wake = %d, want 2", got)
	}
	cancel()
	<-done
}
