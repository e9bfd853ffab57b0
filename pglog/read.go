package pglog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gmailrelay/gmailrelay"
)

// Get implements gmailrelay.Store.
func (l *Log) Get(ctx context.Context, messageID string) (gmailrelay.Job, error) {
	what := "get " + messageID
	if err := l.ready(ctx, what); err != nil {
		return gmailrelay.Job{}, err
	}
	j, err := getJob(ctx, l.pool, messageID, false)
	if err != nil {
		return gmailrelay.Job{}, l.wrapErr(what, err)
	}
	return *j, nil
}

// JobLines implements gmailrelay.Store, from one snapshot.
func (l *Log) JobLines(ctx context.Context, messageID string) ([]gmailrelay.Line, error) {
	what := "job lines " + messageID
	if err := l.ready(ctx, what); err != nil {
		return nil, err
	}
	var lines []gmailrelay.Line
	err := l.snapshot(ctx, func(tx pgx.Tx) error {
		if _, err := getJob(ctx, tx, messageID, false); err != nil {
			return err
		}
		var err error
		lines, err = jobLines(ctx, tx, messageID)
		return err
	})
	if err != nil {
		return nil, l.wrapErr(what, err)
	}
	return lines, nil
}

// snapshot runs fn in a read-only repeatable-read transaction: every query
// of fn sees the same committed state.
func (l *Log) snapshot(ctx context.Context, fn func(pgx.Tx) error) error {
	return pgx.BeginTxFunc(ctx, l.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, fn)
}

func jobLines(ctx context.Context, q querier, id string) ([]gmailrelay.Line, error) {
	rows, err := q.Query(ctx, "SELECT data FROM lines WHERE message_id = $1 ORDER BY seq", id)
	if err != nil {
		return nil, err
	}
	return collectLines(rows)
}

// collect decodes rows of one JSON column into records (what names them
// in errors).
func collect[T any](rows pgx.Rows, what string) ([]T, error) {
	var out []T
	var v []byte
	_, err := pgx.ForEachRow(rows, []any{&v}, func() error {
		var rec T
		if err := json.Unmarshal(v, &rec); err != nil {
			return fmt.Errorf("decode %s: %w", what, err)
		}
		out = append(out, rec)
		return nil
	})
	return out, err
}

func collectLines(rows pgx.Rows) ([]gmailrelay.Line, error) {
	return collect[gmailrelay.Line](rows, "line")
}

func collectJobs(rows pgx.Rows) ([]gmailrelay.Job, error) {
	return collect[gmailrelay.Job](rows, "job")
}

// Raw implements gmailrelay.Store.
func (l *Log) Raw(ctx context.Context, messageID string) ([]byte, error) {
	what := "raw " + messageID
	if err := l.ready(ctx, what); err != nil {
		return nil, err
	}
	var raw []byte
	err := l.pool.QueryRow(ctx, "SELECT raw FROM bodies WHERE message_id = $1", messageID).Scan(&raw)
	if errors.Is(err, pgx.ErrNoRows) {
		err = gmailrelay.ErrNotFound
	}
	if err != nil {
		return nil, l.wrapErr(what, err)
	}
	return raw, nil
}

// List implements gmailrelay.Store: jobs by Message-ID (byte order) after
// o.After, filtered by state and channel in the query.
func (l *Log) List(ctx context.Context, o gmailrelay.ListOptions) ([]gmailrelay.Job, string, error) {
	if o.State != "" && !o.State.Valid() {
		return nil, "", fmt.Errorf("list: unknown state %q", o.State)
	}
	if err := l.ready(ctx, "list"); err != nil {
		return nil, "", err
	}
	limit := gmailrelay.PageLimit(o.Limit)
	rows, err := l.pool.Query(ctx, `SELECT data FROM jobs
		WHERE message_id > $1 AND ($2 = '' OR state = $2) AND ($3::bytea IS NULL OR channel = $3)
		ORDER BY message_id LIMIT $4`, o.After, string(o.State), channelArg(o.Channel), limit+1)
	if err != nil {
		return nil, "", l.wrapErr("list", err)
	}
	jobs, err := collectJobs(rows)
	if err != nil {
		return nil, "", l.wrapErr("list", err)
	}
	next := ""
	if len(jobs) > limit {
		jobs = jobs[:limit]
		next = jobs[limit-1].MessageID
	}
	return jobs, next, nil
}

func channelArg(ch string) []byte {
	if ch == "" {
		return nil
	}
	return []byte(ch)
}

// Lines implements gmailrelay.Store. Seqs come from a sequence, so a line
// may commit after one with a larger Seq; Lines only returns lines up to a
// watermark below which no writer is left: under the exclusive lines lock
// (every writer holds it shared from before its nextval to its commit) it
// reads the sequence's last value, and every line up to there has
// committed or never will. Paging by the last Seq seen so never skips a
// line. The watermark is cached and only re-established when a page is
// not full below it, so paging through old lines takes no lock.
func (l *Log) Lines(ctx context.Context, after uint64, limit int) ([]gmailrelay.Line, uint64, error) {
	limit = gmailrelay.PageLimit(limit)
	if after >= math.MaxInt64 {
		return nil, 0, nil
	}
	if err := l.ready(ctx, "lines"); err != nil {
		return nil, 0, err
	}
	lines, err := l.linesUpTo(ctx, after, l.watermark.Load(), limit)
	if err == nil && len(lines) <= limit {
		var w uint64
		if w, err = l.raiseWatermark(ctx); err == nil {
			lines, err = l.linesUpTo(ctx, after, w, limit)
		}
	}
	if err != nil {
		return nil, 0, l.wrapErr("lines", err)
	}
	var next uint64
	if len(lines) > limit {
		lines = lines[:limit]
		next = lines[limit-1].Seq
	}
	return lines, next, nil
}

func (l *Log) linesUpTo(ctx context.Context, after, w uint64, limit int) ([]gmailrelay.Line, error) {
	if w <= after {
		return nil, nil
	}
	rows, err := l.pool.Query(ctx, "SELECT data FROM lines WHERE seq > $1 AND seq <= $2 ORDER BY seq LIMIT $3", int64(after), int64(min(w, math.MaxInt64)), limit+1)
	if err != nil {
		return nil, err
	}
	return collectLines(rows)
}

// raiseWatermark waits, under the exclusive lines lock, until no writer is
// between taking a Seq and its commit, and takes the sequence's last value
// as the new watermark.
func (l *Log) raiseWatermark(ctx context.Context) (uint64, error) {
	var last int64
	var called bool
	err := pgx.BeginFunc(ctx, l.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", int64(linesLock)); err != nil {
			return err
		}
		return tx.QueryRow(ctx, "SELECT last_value, is_called FROM line_ids").Scan(&last, &called)
	})
	if err != nil {
		return 0, fmt.Errorf("lines watermark: %w", err)
	}
	w := uint64(0)
	if called {
		w = uint64(last)
	}
	for {
		cur := l.watermark.Load()
		if w <= cur {
			return cur, nil
		}
		if l.watermark.CompareAndSwap(cur, w) {
			return w, nil
		}
	}
}

// claimTTL is how long a due job Due returned stays claimed by this Log
// (on the log's clock) unless it is written first: long enough for a
// sweeper pass to search it, short enough that a replica that died
// mid-pass does not hold its jobs for long.
const claimTTL = 2 * time.Minute

// Due implements gmailrelay.Store, and claims what it returns: the due jobs
// not claimed by another replica (or whose claim ran out) are taken with
// FOR UPDATE SKIP LOCKED and marked claimed by this Log for claimTTL, so
// two replicas' sweeper passes do not search the same job at once. A job
// this Log claimed is returned to it again; any write of the job (the
// sweeper's own decision) ends the claim, so does Close, and so does the
// death of the claiming process (none of its sessions, named by their
// application_name, is left in pg_stat_activity). The jobs come earliest
// first.
func (l *Log) Due(ctx context.Context, now time.Time, limit int) ([]gmailrelay.Job, error) {
	if err := l.ready(ctx, "due"); err != nil {
		return nil, err
	}
	at := l.now()
	rows, err := l.pool.Query(ctx, `WITH c AS (
			SELECT message_id FROM jobs
			WHERE next_check_ns IS NOT NULL AND next_check_ns <= $1
				AND (claimed_by IS NULL OR claimed_by = $4 OR claimed_until_ns <= $3
					OR NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE application_name = $6 || claimed_by))
			ORDER BY next_check_ns, message_id LIMIT $2 FOR UPDATE SKIP LOCKED)
		UPDATE jobs j SET claimed_by = $4, claimed_until_ns = $5 FROM c WHERE j.message_id = c.message_id
		RETURNING j.data`, *nanos(now), sqlLimit(limit), *nanos(at), l.owner, *nanos(at.Add(claimTTL)), appPrefix)
	if err != nil {
		return nil, l.wrapErr("due", err)
	}
	jobs, err := collectJobs(rows)
	if err != nil {
		return nil, l.wrapErr("due", err)
	}
	sort.Slice(jobs, func(i, k int) bool {
		a, b := jobs[i].NextCheckAt, jobs[k].NextCheckAt
		if !a.Equal(b) {
			return a.Before(b)
		}
		return jobs[i].MessageID < jobs[k].MessageID
	})
	return jobs, nil
}

// ClaimQueued implements gmailrelay.QueueClaimer with one session-level
// advisory lock per mailbox (outboxLockKey: the schema and the mailbox's
// name), taken with pg_try_advisory_lock on one connection that is held
// until Release. Another replica's pass skips a mailbox whose lock is
// taken; the locks end with the pass (Release), with the connection, or
// with the process, so nothing holds a mailbox between passes and a dead
// replica's mailboxes are free at once. The queue is read again once the
// locks are held, so a pass sees its mailboxes' jobs as the previous
// holder left them (a job it delivered, a hold after Gmail was not
// reached).
func (l *Log) ClaimQueued(ctx context.Context, mailbox func(name string) (string, bool)) (gmailrelay.QueueClaim, error) {
	claim := gmailrelay.QueueClaim{Release: func() {}}
	queued, err := l.ByState(ctx, gmailrelay.StateQueued, 0)
	if err != nil {
		return claim, fmt.Errorf("claim queued: %w", err)
	}
	served := map[string]bool{}
	for _, j := range queued {
		if name, ok := mailbox(j.Mailbox); ok {
			served[name] = true
		}
	}
	// count puts jobs not of the locked mailboxes in Busy or Unserved.
	count := func(jobs []gmailrelay.Job, locked map[string]bool) {
		for _, j := range jobs {
			name, ok := mailbox(j.Mailbox)
			switch {
			case !ok:
				claim.Unserved++
			case locked[name]:
				claim.Jobs = append(claim.Jobs, j)
			default:
				claim.Busy++
			}
		}
	}
	if len(served) == 0 {
		count(queued, nil)
		return claim, nil
	}
	c, err := l.pool.Acquire(ctx)
	if err != nil {
		return claim, l.wrapErr("claim queued", err)
	}
	release := sync.OnceFunc(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := c.Exec(ctx, "SELECT pg_advisory_unlock_all()"); err != nil {
			// The locks end with the session: never hand it back to the
			// pool still holding them.
			_ = c.Conn().Close(ctx)
		}
		c.Release()
	})
	locked, err := lockMailboxes(ctx, c, slices.Sorted(maps.Keys(served)))
	if err != nil {
		release()
		return claim, l.wrapErr("claim queued", err)
	}
	if len(locked) == 0 {
		release()
		count(queued, nil)
		return claim, nil
	}
	rows, err := c.Query(ctx, "SELECT data FROM jobs WHERE state = $1 ORDER BY message_id", string(gmailrelay.StateQueued))
	if err == nil {
		queued, err = collectJobs(rows)
	}
	if err != nil {
		release()
		return claim, l.wrapErr("claim queued", err)
	}
	count(queued, locked)
	claim.Release = release
	return claim, nil
}

// outboxLockKey is the advisory lock key of the mailbox named $1 in the
// current schema (advisory locks are per database, and tests and
// deployments may keep several logs in one). Two names whose keys collide
// only share a lock: one replica at a time delivers both.
const outboxLockKey = "hashtextextended('gmailrelay outbox ' || coalesce(quote_ident(current_schema()), '') || '.' || $1, 0)"

// lockMailboxes takes, on c's session, the advisory locks of the mailboxes
// names no other session holds, and returns those it took.
func lockMailboxes(ctx context.Context, c *pgxpool.Conn, names []string) (map[string]bool, error) {
	locked := map[string]bool{}
	b := &pgx.Batch{}
	for _, name := range names {
		b.Queue("SELECT pg_try_advisory_lock("+outboxLockKey+")", name).QueryRow(func(row pgx.Row) error {
			var ok bool
			if err := row.Scan(&ok); err != nil {
				return fmt.Errorf("lock mailbox %s: %w", name, err)
			}
			if ok {
				locked[name] = true
			}
			return nil
		})
	}
	return locked, c.SendBatch(ctx, b).Close()
}

var _ gmailrelay.QueueClaimer = (*Log)(nil)

// sqlLimit turns "limit <= 0 means all" into a LIMIT argument (NULL: none).
func sqlLimit(limit int) *int {
	if limit <= 0 {
		return nil
	}
	return &limit
}

// ByState implements gmailrelay.Store.
func (l *Log) ByState(ctx context.Context, s gmailrelay.State, limit int) ([]gmailrelay.Job, error) {
	if !s.Valid() {
		return nil, fmt.Errorf("by state: unknown state %q", s)
	}
	what := "by state " + string(s)
	if err := l.ready(ctx, what); err != nil {
		return nil, err
	}
	rows, err := l.pool.Query(ctx, "SELECT data FROM jobs WHERE state = $1 ORDER BY message_id LIMIT $2", string(s), sqlLimit(limit))
	if err != nil {
		return nil, l.wrapErr(what, err)
	}
	jobs, err := collectJobs(rows)
	return jobs, l.wrapErr(what, err)
}

// Mailbox implements gmailrelay.Store.
func (l *Log) Mailbox(ctx context.Context, name string) (gmailrelay.Mailbox, error) {
	what := "mailbox " + name
	if err := l.ready(ctx, what); err != nil {
		return gmailrelay.Mailbox{}, err
	}
	mb := gmailrelay.Mailbox{Name: name}
	var v []byte
	err := l.pool.QueryRow(ctx, "SELECT data FROM mailboxes WHERE name = $1", name).Scan(&v)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return mb, nil
	case err != nil:
		return gmailrelay.Mailbox{}, l.wrapErr(what, err)
	}
	if err := json.Unmarshal(v, &mb); err != nil {
		return gmailrelay.Mailbox{}, fmt.Errorf("%s: decode: %w", what, err)
	}
	return mb, nil
}

// Stats implements gmailrelay.Store, from one snapshot: the sums of the
// count deltas every change wrote in its transaction (job_counts,
// line_counts), not a scan of the jobs and lines; when more than
// foldCountsAt delta rows have piled up, they are folded afterwards.
func (l *Log) Stats(ctx context.Context) (gmailrelay.Stats, error) {
	if err := l.ready(ctx, "stats"); err != nil {
		return gmailrelay.Stats{}, err
	}
	deltaRows := 0
	st := gmailrelay.Stats{
		ByState:   map[gmailrelay.State]int{},
		ByChannel: map[string]map[gmailrelay.State]int{},
		ByKind:    map[gmailrelay.Kind]int{},
		ByReason:  map[gmailrelay.Kind]map[string]int{},
	}
	err := l.snapshot(ctx, func(tx pgx.Tx) error {
		var (
			state, kind     string
			channel, reason []byte
			n, deltas       int
		)
		rows, err := tx.Query(ctx, "SELECT state, channel, sum(n)::bigint, count(*) FROM job_counts GROUP BY state, channel HAVING sum(n) <> 0")
		if err != nil {
			return err
		}
		_, err = pgx.ForEachRow(rows, []any{&state, &channel, &n, &deltas}, func() error {
			deltaRows += deltas
			s := gmailrelay.State(state)
			st.Jobs += n
			st.ByState[s] += n
			if st.ByChannel[string(channel)] == nil {
				st.ByChannel[string(channel)] = map[gmailrelay.State]int{}
			}
			st.ByChannel[string(channel)][s] = n
			return nil
		})
		if err != nil {
			return err
		}
		rows, err = tx.Query(ctx, "SELECT kind, reason, sum(n)::bigint, count(*) FROM line_counts GROUP BY kind, reason HAVING sum(n) <> 0")
		if err != nil {
			return err
		}
		_, err = pgx.ForEachRow(rows, []any{&kind, &reason, &n, &deltas}, func() error {
			deltaRows += deltas
			k := gmailrelay.Kind(kind)
			st.Lines += uint64(n)
			st.ByKind[k] += n
			if len(reason) > 0 {
				if st.ByReason[k] == nil {
					st.ByReason[k] = map[string]int{}
				}
				st.ByReason[k][string(reason)] = n
			}
			return nil
		})
		if err != nil {
			return err
		}
		var v []byte
		err = tx.QueryRow(ctx, "SELECT data FROM jobs WHERE unknown_ns IS NOT NULL ORDER BY unknown_ns, message_id LIMIT 1").Scan(&v)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		var j gmailrelay.Job
		if err := json.Unmarshal(v, &j); err != nil {
			return fmt.Errorf("decode job: %w", err)
		}
		st.OldestUnknown = j.AmbiguousAt
		return nil
	})
	if err != nil {
		return gmailrelay.Stats{}, l.wrapErr("stats", err)
	}
	if deltaRows > foldCountsAt {
		if err := l.foldCounts(ctx); err != nil {
			return gmailrelay.Stats{}, l.wrapErr("stats: fold counts", err)
		}
	}
	return st, nil
}

// Backup is not done by the relay on PostgreSQL: use pg_dump (or the
// server's own backups and replication). It returns gmailrelay.ErrUnsupported.
func (l *Log) Backup(context.Context, io.Writer, func(int64)) (int64, error) {
	return 0, fmt.Errorf("backup: %w: the log is in PostgreSQL, back it up with pg_dump", gmailrelay.ErrUnsupported)
}

// Size returns the bytes the log's tables take (with their indexes).
func (l *Log) Size(ctx context.Context) (int64, error) {
	if err := l.ready(ctx, "size"); err != nil {
		return 0, err
	}
	var n int64
	err := l.pool.QueryRow(ctx, `SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint FROM pg_class c
		WHERE c.relkind = 'r' AND c.relnamespace = current_schema()::regnamespace`).Scan(&n)
	return n, l.wrapErr("size", err)
}
