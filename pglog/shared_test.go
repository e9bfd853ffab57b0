package pglog_test

import (
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/acceptlog/logtest"
	"github.com/gmailrelay/gmailrelay/faultmodes"
	"github.com/gmailrelay/gmailrelay/faultmodes/faulttest"
)

// A count: 1 fault rule stored in the database fires exactly once over 100
// concurrent decisions of two replicas (their Sets on two Logs).
func TestFaultRuleCountTakenOnceAcrossReplicas(t *testing.T) {
	la, lb := twoReplicas(t, nil)
	a := faultmodes.New(faultmodes.Options{Store: la})
	b := faultmodes.New(faultmodes.Options{Store: lb})
	one := 1
	if _, err := a.Add(faultmodes.Spec{Mode: faultmodes.FailBeforeForward, Count: &one}); err != nil {
		t.Fatal(err)
	}
	fired := faulttest.DecideSpread(a, b, 100, faultmodes.FailBeforeForward)
	if fired != 1 || a.StoreErrors()+b.StoreErrors() != 0 {
		t.Errorf("fired %d times (store errors %d, %d), want once", fired, a.StoreErrors(), b.StoreErrors())
	}
	if l := b.List(); len(l) != 1 || l[0].Hits != 1 || l[0].Active {
		t.Errorf("B lists %+v, want the rule with 1 hit, inactive", l)
	}
}

// The conformance tests of the shared state (daily budget holds, pauses),
// on two Logs of one schema.
func TestConformanceSharedPostgres(t *testing.T) {
	databaseURL(t) // skip (or fail in CI) before any subtest when there is no server
	logtest.RunShared(t, logtest.SharedBackend{
		Open: func(t *testing.T, now func() time.Time) (gmailrelay.Store, gmailrelay.Store) {
			return twoReplicas(t, now)
		},
	})
}
