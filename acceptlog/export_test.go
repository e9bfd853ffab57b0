package acceptlog

import (
	"testing"
	"time"
)

// SetBatching makes every Mutate of l go through db.Batch (alwaysBatch) and
// sets bbolt's MaxBatchDelay, so benchmarks can compare commit strategies.
// Call it before the first Mutate.
func SetBatching(l *Log, alwaysBatch bool, delay time.Duration) {
	if alwaysBatch {
		// db.Batch commits with bbolt's syncs, outside the journal.
		if err := l.useSynced(); err != nil {
			panic(err)
		}
	}
	l.alwaysBatch = alwaysBatch
	l.db.MaxBatchDelay = delay
}

// useSynced stops the journal (for benchmarks of bbolt's own commits, see
// SetBatching).
func (l *Log) useSynced() error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if l.j == nil {
		return nil
	}
	return l.stopJournal()
}

// EditJobRecord decodes a stored job record (binary or, from an older log,
// JSON), lets edit change the job and the seqs of its lines the record
// lists, and returns the record encoded again (binary), for tests that
// plant violations behind the log's back.
func EditJobRecord(v []byte, edit func(j *Job, seqs []uint64) []uint64) ([]byte, error) {
	var j Job
	list, err := decodeJobRecord(v, &j)
	if err != nil {
		return nil, err
	}
	seqs, err := list.seqs()
	if err != nil {
		return nil, err
	}
	seqs = edit(&j, seqs)
	return encodeJob(&j, encodeSeqs(seqs)), nil
}

// SetNoFreelistSync sets whether logs opened from now on skip writing
// bbolt's freelist at each commit (see noFreelistSync), and returns the
// previous setting.
func SetNoFreelistSync(v bool) bool {
	old := noFreelistSync
	noFreelistSync = v
	return old
}

// VerifyJournal fails t unless l's checkpoint plus its journal replayed
// equals l's live content (every committed write was journaled).
func VerifyJournal(t testing.TB, l *Log) { verifyJournal(t, l) }

// SetCheckpointGroups sets after how many journaled commits the log
// checkpoints, for the test.
func SetCheckpointGroups(t testing.TB, n int) { setVar(t, &checkpointGroups, n) }
