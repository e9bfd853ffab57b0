package acceptlog

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"sort"
	"time"

	"github.com/gmailrelay/gmailrelay"
	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// Check verifies the log's invariants over the whole file (it reads every
// job and line: a test and admin tool, not a hot path):
//   - every job's State is the fold of its lines, its Attempts is at least
//     every line's Attempt and its Effects is its number of effect lines;
//   - a job has at most one effect line, unless it is in StateReview or a
//     resolved line follows its second effect line;
//   - the state, due and unknown indexes hold exactly the entries the jobs
//     imply;
//   - every job's record lists exactly the seqs of its lines, in order;
//   - every change of state its lines make (after the first) is in
//     Transitions, except between two lines of a pruned job written
//     before it was pruned (the steps between them are gone);
//   - a pruned job has no raw message, and every raw message belongs to a
//     job;
//   - the fold index holds, for every Message-ID folded to lower case
//     (FoldMessageID), the first job (bytewise) with that fold, and
//     nothing else;
//   - the counters equal a recount.
//
// It returns nil when all hold, otherwise an error saying how many
// violations it found and naming each. A page bbolt cannot read (a panic
// inside bbolt, or a memory fault on a page past the end of a truncated
// file) is an error naming the file.
func (l *Log) Check(ctx context.Context) error { return l.check(ctx, false) }

// CheckFull is Check plus one rule: every job that is not pruned and may
// still be sent (see NeedsRaw) has its raw message. gmailrelay check runs
// it. Check leaves it out because test fixtures create jobs without a
// message; the relay never does (it stores the message with the job's
// first line, and only pruning removes it).
func (l *Log) CheckFull(ctx context.Context) error { return l.check(ctx, true) }

func (l *Log) check(ctx context.Context, needRaw bool) error {
	var v violations
	err := guard("check "+l.path, func() error {
		return l.view(ctx, "check", func(tx *bolt.Tx) error {
			return check(tx, &v, needRaw)
		})
	})
	if err != nil {
		return err
	}
	return v.err()
}

// OpenReadOnly opens the log at path for a tool that must not change it
// (gmailrelay check): it creates, converts and replays nothing, and writes
// through the Log it returns fail. It refuses, with an error starting with
// path, a path that does not exist or is not a log (ErrNotALog), a log an
// older gmailrelay wrote, which Open would convert, and a damaged file
// (ErrDamaged, naming every damaged record). A journal an older gmailrelay
// left beside the file is replayed into a temporary copy, which the Log
// then reads (the file alone lacks the journal's commits); Notes says so.
// When a relay holds the file it fails after about a second.
func OpenReadOnly(path string) (*Log, error) {
	o, err := openOffline(path)
	if err != nil {
		return nil, err
	}
	return &Log{db: o.db, path: path, now: time.Now, logf: func(string, ...any) {}, notes: o.notes, cleanup: o.cleanup}, nil
}

// offline is a log file opened read-only by a tool (see openOffline).
type offline struct {
	db      *bolt.DB
	notes   []string
	cleanup func()
}

func (o *offline) close() error {
	err := o.db.Close()
	o.cleanup()
	return err
}

// openOffline opens the log file at path read-only for a tool (check,
// backup, compact), verified as Open verifies it, after taking a shared
// lock: it fails after about a second when a relay holds the file. A
// journal an older gmailrelay left is replayed into a temporary copy
// (removed by cleanup), which is opened instead: the file alone lacks its
// commits. The file itself is never written.
func openOffline(path string) (_ *offline, err error) {
	const locked = "file is locked by a running gmailrelay; back it up through its GET /admin/backup (gmailrelay backup --url) instead"
	fail := func(err error) (*offline, error) {
		if errors.Is(err, berrors.ErrTimeout) {
			return nil, fmt.Errorf("%s: %s: %w", path, locked, err)
		}
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return fail(fmt.Errorf("%w (no such file)", ErrNotALog))
	}
	f, err := os.Open(path)
	if err != nil {
		return fail(err)
	}
	if err := lockShared(f, lockTimeout); err != nil {
		_ = f.Close()
		return fail(err)
	}
	o := &offline{cleanup: func() {}}
	j, err := readLegacyJournal(path)
	if err != nil {
		_ = f.Close()
		return fail(err)
	}
	if j != nil {
		dir, err := os.MkdirTemp("", "gmailrelay-check-")
		if err != nil {
			_ = f.Close()
			return fail(err)
		}
		o.cleanup = func() { _ = os.RemoveAll(dir) }
		fi, err := f.Stat()
		if err == nil {
			var notes []string
			copyPath := dir + "/replayed.db"
			notes, err = j.replayTo(f, fi.Size(), copyPath, time.Now())
			o.notes = append([]string{fmt.Sprintf("journal %s would be replayed when the relay starts (an older gmailrelay did not stop cleanly); this reads the file as the replay leaves it, without changing either", j.path)}, notes...)
			_ = f.Close()
			if err == nil {
				f, err = os.Open(copyPath)
			}
		}
		if err != nil {
			_ = f.Close()
			o.cleanup()
			return fail(err)
		}
	}
	handed := false
	defer func() {
		if !handed {
			_ = f.Close()
		}
		if err != nil {
			o.cleanup()
		}
	}()
	rep, err := verifyLogFile(f)
	if err != nil {
		return fail(err)
	}
	if !rep.sealed {
		return fail(errors.New("written by an older gmailrelay, which this version converts when it opens the file to write: run it once (gmailrelay serve), or check a converted copy (gmailrelay backup --data FILE --to COPY)"))
	}
	o.db, err = openBolt(path, &bolt.Options{Timeout: lockTimeout, ReadOnly: true,
		OpenFile: func(string, int, os.FileMode) (*os.File, error) { handed = true; return f, nil }})
	if err != nil {
		return fail(err)
	}
	return o, nil
}

// guard runs fn and turns a panic, or a memory fault (SIGBUS on a mapped
// page the file does not have), into an error: bbolt trusts its file and
// panics on a damaged page. The fault is recovered only in this goroutine,
// where bbolt reads for fn. A process that recovered should only report
// and exit: bbolt may still hold a lock or a mapping of the file.
func guard(what string, fn func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%s: the file is damaged: bbolt could not read it (%v)", what, r)
		}
	}()
	return fn()
}

// violations collects what Check finds. found holds every one of them, in
// the order found (check names each violation:
// docs/operations.md#checking-a-log-file-offline).
type violations struct {
	found []string
}

func (v *violations) add(format string, args ...any) {
	v.found = append(v.found, fmt.Sprintf(format, args...))
}

func (v *violations) err() error { return gmailrelay.Violations(v.found) }

type keySet map[string]struct{}

func (s keySet) add(k []byte) { s[string(k)] = struct{}{} }

// check runs every rule Check documents over tx, adding what it finds to v.
// It returns an error only when tx cannot be read.
func check(tx *bolt.Tx, v *violations, needRaw bool) error {
	c := checker{tx: tx, v: v, needRaw: needRaw, counts: map[string]int64{}, byJob: map[string][]gmailrelay.Line{},
		wantState: keySet{}, wantDue: keySet{}, wantUnknown: keySet{}, wantPrunable: keySet{}}
	for _, step := range []func() error{c.readLines, c.checkJobs, c.checkBodies} {
		if err := step(); err != nil {
			return err
		}
	}
	c.checkOrphanLines()
	c.compareIndexes()
	if err := checkFolds(tx, v); err != nil {
		return err
	}
	c.compareCounters()
	return nil
}

// checker is one check's pass over a transaction: what it has read so
// far, and what the jobs it has read imply the indexes and counters hold.
type checker struct {
	tx      *bolt.Tx
	v       *violations
	needRaw bool
	// counts is the recount of every counter.
	counts map[string]int64
	// byJob holds the lines by job, oldest first, from the lines bucket
	// itself (not the seqs the job records list, which are checked against
	// it); checkJobs removes each job's lines, leaving the orphans.
	byJob map[string][]gmailrelay.Line
	// the index entries the jobs imply
	wantState, wantDue, wantUnknown, wantPrunable keySet
}

// readLines reads every line into byJob and counts it.
func (c *checker) readLines() error {
	return c.tx.Bucket(bucketLines).ForEach(func(k, val []byte) error {
		var ln gmailrelay.Line
		if err := decodeLineValue(k, val, &ln); err != nil {
			c.v.add("%v", err)
			return nil
		}
		if len(k) != 8 || binary.BigEndian.Uint64(k) != ln.Seq {
			c.v.add("line %x: key does not match seq %d", k, ln.Seq)
		}
		c.byJob[ln.MessageID] = append(c.byJob[ln.MessageID], ln)
		for _, ck := range lineCounters(&ln) {
			c.counts[ck]++
		}
		return nil
	})
}

// checkJobs checks every job against its key, its lines and its raw
// message, counts it and records the index entries it implies.
func (c *checker) checkJobs() error {
	v := c.v
	return c.tx.Bucket(bucketJobs).ForEach(func(k, val []byte) error {
		id := string(k)
		var j gmailrelay.Job
		seqs, err := decodeJobValueSeqs(k, val, &j)
		if err != nil {
			v.add("%v", err)
			return nil
		}
		c.counts[counterJobs]++
		for _, ck := range jobCounters(&j) {
			c.counts[ck]++
		}
		if j.MessageID != id {
			v.add("job %s: stored under key %q", j.MessageID, id)
		}
		if !j.State.Valid() {
			v.add("job %s: unknown state %q", id, j.State)
		}
		c.wantIndexes(&j)
		lines := c.byJob[id]
		delete(c.byJob, id)
		checkLineSeqs(v, id, seqs, lines)
		for _, found := range gmailrelay.CheckJob(&j, lines) {
			v.add("%s", found)
		}
		checkRaw(v, &j, c.tx.Bucket(bucketBodies).Get(k) != nil, c.needRaw)
		return nil
	})
}

// wantIndexes records the index entries job j implies.
func (c *checker) wantIndexes(j *gmailrelay.Job) {
	ik := keysOf(j)
	c.wantState.add(ik.state)
	if ik.due != nil {
		c.wantDue.add(ik.due)
	}
	if ik.unknown != nil {
		c.wantUnknown.add(ik.unknown)
	}
	if ik.prunable != nil {
		c.wantPrunable.add(ik.prunable)
	}
}

// checkBodies reports raw messages that belong to no job.
func (c *checker) checkBodies() error {
	jobs := c.tx.Bucket(bucketJobs)
	return c.tx.Bucket(bucketBodies).ForEach(func(k, _ []byte) error {
		if jobs.Get(k) == nil {
			c.v.add("raw message %s: no job", k)
		}
		return nil
	})
}

// checkOrphanLines reports, in order of Message-ID, the lines left in
// byJob after checkJobs: lines of jobs that do not exist.
func (c *checker) checkOrphanLines() {
	orphans := make([]string, 0, len(c.byJob))
	for id := range c.byJob {
		orphans = append(orphans, id)
	}
	sort.Strings(orphans)
	for _, id := range orphans {
		c.v.add("job %s: %d lines but no job", id, len(c.byJob[id]))
	}
}

// compareIndexes compares each index with the entries the jobs imply.
func (c *checker) compareIndexes() {
	compareIndex(c.tx, c.v, bucketState, c.wantState, func(k []byte) string {
		s, id, _ := bytes.Cut(k, []byte{0})
		return fmt.Sprintf("job %s in state %s", id, s)
	})
	compareIndex(c.tx, c.v, bucketDue, c.wantDue, func(k []byte) string {
		return fmt.Sprintf("job %s due at %s", k[min(8, len(k)):], timeIDKeyTime(k))
	})
	compareIndex(c.tx, c.v, bucketUnknown, c.wantUnknown, func(k []byte) string {
		return fmt.Sprintf("job %s unknown since %s", k[min(8, len(k)):], timeIDKeyTime(k))
	})
	compareIndex(c.tx, c.v, bucketPrunable, c.wantPrunable, func(k []byte) string {
		return fmt.Sprintf("job %s prunable since %s", k[min(8, len(k)):], timeIDKeyTime(k))
	})
}

// compareCounters compares the stored counters with the recount.
func (c *checker) compareCounters() {
	got, err := readCounters(c.tx)
	if err != nil {
		c.v.add("counters: %v", err)
		return
	}
	for _, k := range unionKeys(got, c.counts) {
		if got[k] != c.counts[k] {
			c.v.add("counter %q is %d, recount says %d", k, got[k], c.counts[k])
		}
	}
}

// checkRaw checks one job against whether its raw message is stored:
// pruning removes it, and (with needRaw) a job that may still be sent
// needs it until it is pruned.
func checkRaw(v *violations, j *gmailrelay.Job, stored, needRaw bool) {
	switch pruned := !j.PrunedAt.IsZero(); {
	case pruned && stored:
		v.add("job %s: pruned at %s but its raw message is still stored", j.MessageID, j.PrunedAt.UTC().Format(time.RFC3339))
	case needRaw && !pruned && !stored && gmailrelay.NeedsRaw(j.State):
		v.add("job %s: in state %s, not pruned, and no raw message stored (it could not be sent again)", j.MessageID, j.State)
	}
}

// checkLineSeqs checks that the seqs a job's record lists are exactly the
// seqs of its lines (oldest first, from the lines bucket).
func checkLineSeqs(v *violations, id string, seqs seqList, lines []gmailrelay.Line) {
	i := 0
	_, err := seqs.each(func(seq uint64) bool {
		for i < len(lines) && lines[i].Seq < seq {
			v.add("job %s: line %d is not listed in its record", id, lines[i].Seq)
			i++
		}
		if i < len(lines) && lines[i].Seq == seq {
			i++
		} else {
			v.add("job %s: its record lists line %d, which is not one of its lines", id, seq)
		}
		return true
	})
	if err != nil {
		v.add("job %s: its record's line seqs: %v", id, err)
		return
	}
	for ; i < len(lines); i++ {
		v.add("job %s: line %d is not listed in its record", id, lines[i].Seq)
	}
}

// compareIndex reports entries missing from bucket name and entries it holds
// that no job implies.
func compareIndex(tx *bolt.Tx, v *violations, name []byte, want keySet, describe func([]byte) string) {
	have := keySet{}
	_ = tx.Bucket(name).ForEach(func(k, _ []byte) error {
		have.add(k)
		if _, ok := want[string(k)]; !ok {
			v.add("%s index: stray entry (%s)", name, describe(k))
		}
		return nil
	})
	missing := make([]string, 0)
	for k := range want {
		if _, ok := have[k]; !ok {
			missing = append(missing, k)
		}
	}
	sort.Strings(missing)
	for _, k := range missing {
		v.add("%s index: missing entry (%s)", name, describe([]byte(k)))
	}
}

func unionKeys(a, b map[string]int64) []string {
	keys := make([]string, 0, len(a)+len(b))
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys
}
