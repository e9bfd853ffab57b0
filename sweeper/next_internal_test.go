package sweeper

import (
	"reflect"
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

// Result.add sums every counter (each int field of Result, found by
// reflection, so a counter added later cannot be left out of the sum) and
// keeps the last Wait.
func TestResultAddSumsEveryCounter(t *testing.T) {
	var o Result
	v := reflect.ValueOf(&o).Elem()
	ints := 0
	for i := range v.NumField() {
		if f := v.Field(i); f.Kind() == reflect.Int {
			ints++
			f.SetInt(int64(i + 1))
		}
	}
	if n := len(o.counters()); n != ints {
		t.Fatalf("counters names %d fields, Result has %d int fields", n, ints)
	}
	o.Wait = time.Minute
	var r Result
	r.add(o)
	r.add(o)
	rv := reflect.ValueOf(r)
	for i := range rv.NumField() {
		if f := rv.Field(i); f.Kind() == reflect.Int && f.Int() != 2*int64(i+1) {
			t.Errorf("after two adds %s = %d, want %d", rv.Type().Field(i).Name, f.Int(), 2*(i+1))
		}
	}
	if r.Wait != time.Minute {
		t.Errorf("Wait = %s, want the last pass's 1m", r.Wait)
	}
}
