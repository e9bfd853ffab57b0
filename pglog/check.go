package pglog

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gmailrelay/gmailrelay"
)

// Check implements gmailrelay.Store: every job against its lines (the checks
// gmailrelay.CheckJob shares with the bbolt log), its indexed columns against
// its record, a pruned job without its raw message, no line or raw
// message without its job (the foreign keys hold that, it is re-checked all
// the same), and each Message-ID folded to lower case held by exactly one
// job that is not a case twin. It reads one snapshot.
func (l *Log) Check(ctx context.Context) error { return l.check(ctx, false) }

// CheckFull is Check plus the rule acceptlog.Log.CheckFull adds: every job
// that is not pruned and may still be sent (gmailrelay.NeedsRaw) has its raw
// message. gmailrelay check runs it; Check leaves it out for the same reason
// as the bbolt log's (test fixtures write jobs without a message).
func (l *Log) CheckFull(ctx context.Context) error { return l.check(ctx, true) }

func (l *Log) check(ctx context.Context, needRaw bool) error {
	if err := l.ready(ctx, "check"); err != nil {
		return err
	}
	var found []string
	err := l.snapshot(ctx, func(tx pgx.Tx) error {
		steps := []func(context.Context, pgx.Tx) ([]string, error){
			func(ctx context.Context, tx pgx.Tx) ([]string, error) { return checkJobs(ctx, tx, needRaw) },
			checkOrphans, checkFolds, checkCounters, checkSequence,
		}
		for _, step := range steps {
			f, err := step(ctx, tx)
			if err != nil {
				return err
			}
			found = append(found, f...)
		}
		return nil
	})
	if err != nil {
		return l.wrapErr("check", err)
	}
	return gmailrelay.Violations(found)
}

// storedJob is one job as check reads it: its indexed columns, its record,
// and whether its raw message is stored.
type storedJob struct {
	c      columns
	j      gmailrelay.Job
	hasRaw bool
}

// checkJobs checks every job against its lines, its raw message and its
// indexed columns.
func checkJobs(ctx context.Context, tx pgx.Tx, needRaw bool) ([]string, error) {
	jobs, err := readStoredJobs(ctx, tx)
	if err != nil {
		return nil, err
	}
	var found []string
	for _, s := range jobs {
		lines, err := jobLines(ctx, tx, s.j.MessageID)
		if err != nil {
			return nil, err
		}
		found = append(found, gmailrelay.CheckJob(&s.j, lines)...)
		found = append(found, checkRaw(&s.j, s.hasRaw, needRaw)...)
		want, err := columnsOf(&s.j)
		if err != nil {
			return nil, err
		}
		if want.state != s.c.state || string(want.channel) != string(s.c.channel) ||
			!sameInt(want.nextCheck, s.c.nextCheck) || !sameInt(want.unknown, s.c.unknown) || !sameInt(want.prunable, s.c.prunable) {
			found = append(found, fmt.Sprintf("job %s: indexed columns differ from its record", s.j.MessageID))
		}
	}
	return found, nil
}

// readStoredJobs reads every job, in order of Message-ID.
func readStoredJobs(ctx context.Context, tx pgx.Tx) ([]storedJob, error) {
	// Whether each job's raw message is stored comes with the job, in the
	// same scan (a semi-join, not a query per job).
	rows, err := tx.Query(ctx, `SELECT state, channel, next_check_ns, unknown_ns, prunable_ns, data,
		EXISTS (SELECT 1 FROM bodies b WHERE b.message_id = j.message_id)
		FROM jobs j ORDER BY message_id`)
	if err != nil {
		return nil, err
	}
	var jobs []storedJob
	var c columns
	var hasRaw bool
	_, err = pgx.ForEachRow(rows, []any{&c.state, &c.channel, &c.nextCheck, &c.unknown, &c.prunable, &c.data, &hasRaw}, func() error {
		s := storedJob{c: c, hasRaw: hasRaw}
		s.c.channel = append([]byte(nil), c.channel...)
		if err := json.Unmarshal(c.data, &s.j); err != nil {
			return err
		}
		jobs = append(jobs, s)
		return nil
	})
	return jobs, err
}

// checkOrphans counts lines and raw messages without their job.
func checkOrphans(ctx context.Context, tx pgx.Tx) ([]string, error) {
	var orphans int
	err := tx.QueryRow(ctx, `SELECT (SELECT count(*) FROM lines l WHERE NOT EXISTS (SELECT 1 FROM jobs j WHERE j.message_id = l.message_id))
		+ (SELECT count(*) FROM bodies b WHERE NOT EXISTS (SELECT 1 FROM jobs j WHERE j.message_id = b.message_id))`).Scan(&orphans)
	if err != nil || orphans == 0 {
		return nil, err
	}
	return []string{fmt.Sprintf("%d lines or raw messages without their job", orphans)}, nil
}

// checkFolds counts the Message-IDs folded to lower case that are not held
// by exactly one job that is not a case twin.
func checkFolds(ctx context.Context, tx pgx.Tx) ([]string, error) {
	var folds int
	err := tx.QueryRow(ctx, `SELECT count(*) FROM (SELECT id_fold FROM jobs GROUP BY id_fold
		HAVING count(*) FILTER (WHERE NOT case_twin) <> 1) f`).Scan(&folds)
	if err != nil || folds == 0 {
		return nil, err
	}
	return []string{fmt.Sprintf("%d Message-IDs folded to lower case are held by no job or by several (case_twin)", folds)}, nil
}

// checkCounters compares the Stats counters with a count of the jobs and
// lines.
func checkCounters(ctx context.Context, tx pgx.Tx) ([]string, error) {
	var off int
	err := tx.QueryRow(ctx, `SELECT (SELECT count(*) FROM (
			(SELECT state, channel, count(*)::bigint FROM jobs GROUP BY 1, 2
				EXCEPT SELECT state, channel, sum(n)::bigint FROM job_counts GROUP BY 1, 2 HAVING sum(n) <> 0)
			UNION ALL
			(SELECT state, channel, sum(n)::bigint FROM job_counts GROUP BY 1, 2 HAVING sum(n) <> 0
				EXCEPT SELECT state, channel, count(*)::bigint FROM jobs GROUP BY 1, 2)) j)
		+ (SELECT count(*) FROM (
			(SELECT kind, reason, count(*)::bigint FROM lines GROUP BY 1, 2
				EXCEPT SELECT kind, reason, sum(n)::bigint FROM line_counts GROUP BY 1, 2 HAVING sum(n) <> 0)
			UNION ALL
			(SELECT kind, reason, sum(n)::bigint FROM line_counts GROUP BY 1, 2 HAVING sum(n) <> 0
				EXCEPT SELECT kind, reason, count(*)::bigint FROM lines GROUP BY 1, 2)) l)`).Scan(&off)
	if err != nil || off == 0 {
		return nil, err
	}
	return []string{fmt.Sprintf("the Stats counters differ from a count of the jobs and lines (%d keys)", off)}, nil
}

// checkSequence checks that no line's seq is beyond the sequence that
// hands them out.
func checkSequence(ctx context.Context, tx pgx.Tx) ([]string, error) {
	var maxSeq, last int64
	if err := tx.QueryRow(ctx, "SELECT coalesce(max(seq), 0), (SELECT last_value FROM line_ids) FROM lines").Scan(&maxSeq, &last); err != nil {
		return nil, err
	}
	if maxSeq > last {
		return []string{fmt.Sprintf("line %d beyond the sequence's last %d", maxSeq, last)}, nil
	}
	return nil, nil
}

func sameInt(a, b *int64) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// checkRaw checks one job against whether its raw message is stored, as
// the bbolt log's check does (in the same words): pruning removes it, and
// (with needRaw) a job that may still be sent needs it until it is pruned.
func checkRaw(j *gmailrelay.Job, stored, needRaw bool) []string {
	switch pruned := !j.PrunedAt.IsZero(); {
	case pruned && stored:
		return []string{fmt.Sprintf("job %s: pruned at %s but its raw message is still stored", j.MessageID, j.PrunedAt.UTC().Format(time.RFC3339))}
	case needRaw && !pruned && !stored && gmailrelay.NeedsRaw(j.State):
		return []string{fmt.Sprintf("job %s: in state %s, not pruned, and no raw message stored (it could not be sent again)", j.MessageID, j.State)}
	}
	return nil
}
