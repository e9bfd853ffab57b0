// Package logtest is the conformance suite of the acceptance log's
// contract (gmailrelay.Store): folds, refusals, the table of transitions,
// indexes, the key index, job identity ignoring case, paging, due, by-state, mailbox records, prune, reopening. Every
// backend runs it from its own tests: acceptlog against the bbolt file,
// pglog against PostgreSQL.
package logtest

import (
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay"
)

// Backend is one implementation of the log under test.
type Backend struct {
	// Open opens a fresh, empty log whose lines with a zero Time are
	// stamped by now, and registers the cleanups that Check it (failing
	// the test on any violation) and close it. reopen opens the same log
	// again, after the test closed the first (with the same cleanups).
	Open func(t *testing.T, now func() time.Time) (log gmailrelay.Store, reopen func() gmailrelay.Store)
	// GroupCommit: concurrent Mutates share commits (the bbolt log), so
	// the suite checks there are fewer commits than Mutates.
	GroupCommit bool
}

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func (b Backend) open(t *testing.T) gmailrelay.Store {
	t.Helper()
	l, _ := b.Open(t, func() time.Time { return t0 })
	return l
}

func (b Backend) openReopen(t *testing.T) (gmailrelay.Store, func() gmailrelay.Store) {
	t.Helper()
	return b.Open(t, func() time.Time { return t0 })
}

// Run runs every test of the suite against b, each as a subtest with a
// fresh log.
func Run(t *testing.T, b Backend) {
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, Backend)
	}{
		{"MutateCreateUpdateAndLineOrder", testMutateCreateUpdateAndLineOrder},
		{"MutateCallbackErrorWritesNothing", testMutateCallbackErrorWritesNothing},
		{"MutateRejectsInvalidChanges", testMutateRejectsInvalidChanges},
		{"MutateConcurrentSameIDSerialises", testMutateConcurrentSameIDSerialises},
		{"MutateConcurrentDifferentIDsAllLand", testMutateConcurrentDifferentIDsAllLand},
		{"ReopenKeepsEverything", testReopenKeepsEverything},
		{"Due", testDue},
		{"ByStateAndListPaging", testByStateAndListPaging},
		{"ListLimitDefaultAndMax", testListLimitDefaultAndMax},
		{"LinesPaging", testLinesPaging},
		{"Stats", testStats},
		{"Raw", testRaw},
		{"Mailbox", testMailbox},
		{"GetAndJobLinesNotFound", testGetAndJobLinesNotFound},
		{"PruneKeepsTheRecordAndDropsDetail", testPruneKeepsTheRecordAndDropsDetail},
		{"PruneLimitAndOrder", testPruneLimitAndOrder},
		{"PrunableStates", testPrunableStates},
		{"PruneKeepsTheAlarmCounters", testPruneKeepsTheAlarmCounters},
		{"CheckAcceptsPrunedJobsWithGaps", testCheckAcceptsPrunedJobsWithGaps},
		{"MutateRefusesEveryTransitionOutsideTheTable", testMutateRefusesEveryTransitionOutsideTheTable},
		{"MutateChecksEachStepOfItsLines", testMutateChecksEachStepOfItsLines},
		{"SendTimesCountsEveryAttemptPerMailbox", testSendTimesCountsEveryAttemptPerMailbox},
		{"JobByKey", testJobByKey},
		{"CaseTwinRefused", testCaseTwinRefused},
		{"CaseTwinsAtOnce", testCaseTwinsAtOnce},
		{"EditMailbox", testEditMailbox},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, b) })
	}
}
