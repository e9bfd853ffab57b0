package pglog_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay/acceptlog"
	"github.com/gmailrelay/gmailrelay/acceptlog/logtest"
	"github.com/gmailrelay/gmailrelay/faultmodes"
)

// A count: 1 fault rule stored in the database fires exactly once over 100
// concurrent decisions of two replicas (their Sets on two Logs).
func TestFaultRuleCountTakenOnceAcrossReplicas(t *testing.T) {
	url := databaseURL(t)
	schema := freshSchema(t, url)
	a := faultmodes.New(faultmodes.Options{Store: open(t, url, schema, nil)})
	b := faultmodes.New(faultmodes.Options{Store: open(t, url, schema, nil)})
	one := 1
	if _, err := a.Add(faultmodes.Spec{Mode: faultmodes.FailBeforeForward, Count: &one}); err != nil {
		t.Fatal(err)
	}
	var fired atomic.Int32
	var wg sync.WaitGroup
	for i := range 100 {
		s := a
		if i%2 == 1 {
			s = b
		}
		wg.Go(func() {
			if s.Decide("default", "", "<x@y>").Mode != "" {
				fired.Add(1)
			}
		})
	}
	wg.Wait()
	if fired.Load() != 1 || a.StoreErrors()+b.StoreErrors() != 0 {
		t.Errorf("fired %d times (store errors %d, %d), want once", fired.Load(), a.StoreErrors(), b.StoreErrors())
	}
	if l := b.List(); len(l) != 1 || l[0].Hits != 1 || l[0].Active {
		t.Errorf("B lists %+v, want the rule with 1 hit, inactive", l)
	}
}

// The conformance tests of the shared state (daily budget holds, pauses),
// on two Logs of one schema.
func TestConformanceSharedPostgres(t *testing.T) {
	url := databaseURL(t)
	logtest.RunShared(t, logtest.SharedBackend{
		Open: func(t *testing.T, now func() time.Time) (acceptlog.Store, acceptlog.Store) {
			schema := freshSchema(t, url)
			return open(t, url, schema, now), open(t, url, schema, now)
		},
	})
}
