package sweeper

import (
	"testing"
	"time"
)

// A mailbox paused for hours must not push the next pass of the others
// past the loop's interval; a pass where every mailbox waits sleeps until
// the first can go.
func TestNextDelayWaitsForOneMailboxOnlyWhenAllWait(t *testing.T) {
	s := &Sweeper{interval: 5 * time.Second, limit: 500}
	if got := s.nextDelay(Result{Deferred: 3, Wait: 2 * time.Hour, partial: true}); got != 5*time.Second {
		t.Errorf("one of several mailboxes waits 2h: next pass in %s, want the interval 5s", got)
	}
	if got := s.nextDelay(Result{Deferred: 3, Wait: 2 * time.Hour}); got != 2*time.Hour {
		t.Errorf("every mailbox waits 2h: next pass in %s, want 2h", got)
	}
	p := &pass{res: Result{}, boxes: map[string]*boxPass{
		"a": {stopped: true, wait: time.Hour}, "b": {stopped: true, wait: time.Minute}, "c": {}}}
	p.finish()
	if !p.res.partial || p.res.Wait != time.Minute {
		t.Errorf("finish: wait %s partial %v, want the shortest wait (1m) and partial", p.res.Wait, p.res.partial)
	}
}
