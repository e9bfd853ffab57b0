package pglog

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gmailrelay/gmailrelay/acceptlog"
)

// Prune implements acceptlog.Store in one transaction: the oldest prunable
// jobs last changed before cutoff, locked with FOR UPDATE SKIP LOCKED (a job
// another replica is writing or pruning is left to a later pass), keep their
// record and the lines acceptlog.KeptWhenPruned names.
func (l *Log) Prune(ctx context.Context, cutoff time.Time, limit int) (acceptlog.PruneResult, error) {
	if limit <= 0 {
		limit = 500
	}
	if err := l.ready(ctx, "prune"); err != nil {
		return acceptlog.PruneResult{}, err
	}
	var res acceptlog.PruneResult
	err := pgx.BeginFunc(context.WithoutCancel(ctx), l.pool, func(tx pgx.Tx) error {
		res = acceptlog.PruneResult{}
		rows, err := tx.Query(ctx, `SELECT data FROM jobs WHERE prunable_ns IS NOT NULL AND prunable_ns < $1
			ORDER BY prunable_ns, message_id LIMIT $2 FOR UPDATE SKIP LOCKED`, *nanos(cutoff), limit+1)
		if err != nil {
			return err
		}
		jobs, err := collectJobs(rows)
		if err != nil {
			return err
		}
		if len(jobs) > limit {
			jobs, res.More = jobs[:limit], true
		}
		now := l.now()
		for i := range jobs {
			if err := pruneJob(ctx, tx, &jobs[i], now, &res); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return acceptlog.PruneResult{}, l.wrapErr("prune", err)
	}
	return res, nil
}

func pruneJob(ctx context.Context, tx pgx.Tx, j *acceptlog.Job, now time.Time, res *acceptlog.PruneResult) error {
	id := j.MessageID
	lines, err := jobLines(ctx, tx, id)
	if err != nil {
		return fmt.Errorf("prune %s: %w", id, err)
	}
	_, drop := acceptlog.KeptWhenPruned(lines)
	seqs := make([]int64, len(drop))
	for i := range drop {
		seqs[i] = int64(drop[i].Seq)
	}
	if _, err := tx.Exec(ctx, "DELETE FROM lines WHERE seq = ANY($1)", seqs); err != nil {
		return fmt.Errorf("prune %s: delete lines: %w", id, err)
	}
	if err := insertLineDelta(ctx, tx, drop, -1); err != nil {
		return fmt.Errorf("prune %s: %w", id, err)
	}
	res.Lines += len(drop)
	var rawLen int64
	err = tx.QueryRow(ctx, "WITH d AS (DELETE FROM bodies WHERE message_id = $1 RETURNING raw) SELECT coalesce(sum(length(raw)), 0)::bigint FROM d", id).Scan(&rawLen)
	if err != nil {
		return fmt.Errorf("prune %s: delete raw: %w", id, err)
	}
	res.RawBytes += rawLen
	j.PrunedAt = now
	c, err := columnsOf(j)
	if err != nil {
		return err
	}
	if err := updateJob(ctx, tx, id, c); err != nil {
		return err
	}
	res.Jobs++
	return nil
}

// Check implements acceptlog.Store: every job against its lines (the checks
// acceptlog.CheckJob shares with the bbolt log), its indexed columns against
// its record, and no line or raw message without its job (the foreign keys
// hold that, it is re-checked all the same). It reads one snapshot.
func (l *Log) Check(ctx context.Context) error {
	if err := l.ready(ctx, "check"); err != nil {
		return err
	}
	var found []string
	err := l.snapshot(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, "SELECT state, channel, next_check_ns, unknown_ns, prunable_ns, data FROM jobs ORDER BY message_id")
		if err != nil {
			return err
		}
		type stored struct {
			c columns
			j acceptlog.Job
		}
		var jobs []stored
		var c columns
		_, err = pgx.ForEachRow(rows, []any{&c.state, &c.channel, &c.nextCheck, &c.unknown, &c.prunable, &c.data}, func() error {
			s := stored{c: c}
			s.c.channel = append([]byte(nil), c.channel...)
			if err := json.Unmarshal(c.data, &s.j); err != nil {
				return err
			}
			jobs = append(jobs, s)
			return nil
		})
		if err != nil {
			return err
		}
		for _, s := range jobs {
			lines, err := jobLines(ctx, tx, s.j.MessageID)
			if err != nil {
				return err
			}
			found = append(found, acceptlog.CheckJob(&s.j, lines)...)
			want, err := columnsOf(&s.j)
			if err != nil {
				return err
			}
			if want.state != s.c.state || string(want.channel) != string(s.c.channel) ||
				!sameInt(want.nextCheck, s.c.nextCheck) || !sameInt(want.unknown, s.c.unknown) || !sameInt(want.prunable, s.c.prunable) {
				found = append(found, fmt.Sprintf("job %s: indexed columns differ from its record", s.j.MessageID))
			}
		}
		var orphans int
		err = tx.QueryRow(ctx, `SELECT (SELECT count(*) FROM lines l WHERE NOT EXISTS (SELECT 1 FROM jobs j WHERE j.message_id = l.message_id))
			+ (SELECT count(*) FROM bodies b WHERE NOT EXISTS (SELECT 1 FROM jobs j WHERE j.message_id = b.message_id))`).Scan(&orphans)
		if err != nil {
			return err
		}
		if orphans > 0 {
			found = append(found, fmt.Sprintf("%d lines or raw messages without their job", orphans))
		}
		var off int
		err = tx.QueryRow(ctx, `SELECT (SELECT count(*) FROM (
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
		if err != nil {
			return err
		}
		if off > 0 {
			found = append(found, fmt.Sprintf("the Stats counters differ from a count of the jobs and lines (%d keys)", off))
		}
		var maxSeq, last int64
		if err := tx.QueryRow(ctx, "SELECT coalesce(max(seq), 0), (SELECT last_value FROM line_ids) FROM lines").Scan(&maxSeq, &last); err != nil {
			return err
		}
		if maxSeq > last {
			found = append(found, fmt.Sprintf("line %d beyond the sequence's last %d", maxSeq, last))
		}
		return nil
	})
	if err != nil {
		return l.wrapErr("check", err)
	}
	return acceptlog.Violations(found)
}

func sameInt(a, b *int64) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}
