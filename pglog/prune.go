package pglog

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gmailrelay/gmailrelay"
)

// Prune implements gmailrelay.Store in one transaction: the oldest prunable
// jobs last changed before cutoff, locked with FOR UPDATE SKIP LOCKED (a job
// another replica is writing or pruning is left to a later pass), keep their
// record and the lines gmailrelay.KeptWhenPruned names.
func (l *Log) Prune(ctx context.Context, cutoff time.Time, limit int) (gmailrelay.PruneResult, error) {
	if limit <= 0 {
		limit = 500
	}
	if err := l.ready(ctx, "prune"); err != nil {
		return gmailrelay.PruneResult{}, err
	}
	var res gmailrelay.PruneResult
	err := pgx.BeginFunc(context.WithoutCancel(ctx), l.pool, func(tx pgx.Tx) error {
		res = gmailrelay.PruneResult{}
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
		return gmailrelay.PruneResult{}, l.wrapErr("prune", err)
	}
	return res, nil
}

func pruneJob(ctx context.Context, tx pgx.Tx, j *gmailrelay.Job, now time.Time, res *gmailrelay.PruneResult) error {
	id := j.MessageID
	lines, err := jobLines(ctx, tx, id)
	if err != nil {
		return fmt.Errorf("prune %s: %w", id, err)
	}
	_, drop := gmailrelay.KeptWhenPruned(lines)
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
