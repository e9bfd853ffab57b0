package pglog

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/gmailrelay/gmailrelay"
)

// foldCountsAt is how many delta rows Stats lets pile up before folding
// them into one row per key.
const foldCountsAt = 2000

// countsLock is the advisory lock of a fold (one at a time).
const countsLock = 0x67636e74 // "gcnt"

// insertJobDelta counts a job's move from (cur's state, channel) to j's:
// a new job is +1, a change of state or channel -1 and +1.
func insertJobDelta(ctx context.Context, tx pgx.Tx, cur, j *gmailrelay.Job) error {
	if cur != nil && cur.State == j.State && cur.Channel == j.Channel {
		return nil
	}
	states, channels, ns := []string{string(j.State)}, [][]byte{[]byte(j.Channel)}, []int64{1}
	if cur != nil {
		states, channels, ns = append(states, string(cur.State)), append(channels, []byte(cur.Channel)), append(ns, -1)
	}
	_, err := tx.Exec(ctx, "INSERT INTO job_counts (state, channel, n) SELECT * FROM unnest($1::text[], $2::bytea[], $3::bigint[])", states, channels, ns)
	if err != nil {
		return fmt.Errorf("count job: %w", err)
	}
	return nil
}

// insertLineDelta counts lines written (sign 1) or pruned (sign -1).
func insertLineDelta(ctx context.Context, tx pgx.Tx, lines []gmailrelay.Line, sign int64) error {
	if len(lines) == 0 {
		return nil
	}
	type key struct{ kind, reason string }
	sum := map[key]int64{}
	for _, ln := range lines {
		sum[key{string(ln.Kind), string(ln.Reason)}] += sign
	}
	var kinds []string
	var reasons [][]byte
	var ns []int64
	for k, n := range sum {
		kinds, reasons, ns = append(kinds, k.kind), append(reasons, []byte(k.reason)), append(ns, n)
	}
	_, err := tx.Exec(ctx, "INSERT INTO line_counts (kind, reason, n) SELECT * FROM unnest($1::text[], $2::bytea[], $3::bigint[])", kinds, reasons, ns)
	if err != nil {
		return fmt.Errorf("count lines: %w", err)
	}
	return nil
}

// foldCounts replaces the delta rows of both tables by one row per key,
// when no other fold runs. Writers inserting meanwhile are not in the
// DELETE's snapshot, so their rows stay as they are.
func (l *Log) foldCounts(ctx context.Context) error {
	return pgx.BeginFunc(ctx, l.pool, func(tx pgx.Tx) error {
		var got bool
		if err := tx.QueryRow(ctx, "SELECT pg_try_advisory_xact_lock($1)", int64(countsLock)).Scan(&got); err != nil || !got {
			return err
		}
		if _, err := tx.Exec(ctx, `WITH d AS (DELETE FROM job_counts RETURNING state, channel, n)
			INSERT INTO job_counts (state, channel, n) SELECT state, channel, sum(n) FROM d GROUP BY state, channel HAVING sum(n) <> 0`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `WITH d AS (DELETE FROM line_counts RETURNING kind, reason, n)
			INSERT INTO line_counts (kind, reason, n) SELECT kind, reason, sum(n) FROM d GROUP BY kind, reason HAVING sum(n) <> 0`)
		return err
	})
}
