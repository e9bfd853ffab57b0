// Package pglog keeps the acceptance log in PostgreSQL, so several relays
// can share it: one row per job (the Message-ID unique), every change and
// its lines in one transaction with the job's row locked, lines under one
// global sequence. It implements gmailrelay.Store; the domain rules of a
// change are gmailrelay.Prepare's, not copied here.
package pglog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gmailrelay/gmailrelay"
)

// Options configure Open.
type Options struct {
	// Now stamps lines whose Time is zero. Defaults to time.Now.
	Now func() time.Time
	// Schema, when set, is the PostgreSQL schema the log lives in (created
	// when missing); the default is the connection's search_path.
	Schema string
	// MaxConns bounds the pool (default: pgxpool's, at least 4).
	MaxConns int32
	// NoMigrate makes Open leave the database as it is, for a tool that
	// reads a log other relays may be using (gmailrelay check): it neither
	// creates Schema nor applies migrations, and refuses a database
	// without this version's schema (see checkSchema).
	NoMigrate bool
	// Identity is the replica's (gmailrelay.Identity), compared with the
	// log's at Open: the first replica with one records it, a replica
	// with another one is refused (an error wrapping
	// gmailrelay.ErrIdentityMismatch). Zero compares nothing.
	Identity gmailrelay.Identity
}

// Log is the acceptance log in a PostgreSQL database. It is safe for
// concurrent use, by several processes too. Every method but Close and
// Commits returns gmailrelay.ErrClosed (wrapped) after Close.
type Log struct {
	pool    *pgxpool.Pool
	now     func() time.Time
	commits atomic.Uint64
	closed  atomic.Bool
	// owner names this Log among the replicas: its budget holds and its
	// sweeper's claims on due jobs.
	owner string
	// watermark: every line with a Seq up to it has committed or never
	// will (see Lines); it only grows.
	watermark atomic.Uint64
	// sweepHolds counts held sends, to drop stale holds now and then.
	sweepHolds atomic.Uint64
	// refused is why the database was last found lost (refusal.go); nil
	// once a probe write commits.
	refused atomic.Pointer[refusal]
}

var _ gmailrelay.Store = (*Log)(nil)

// Open connects to the database at url (postgres://…), applies the
// migrations it has not had yet (safe when several relays start at once)
// and returns the log.
func Open(ctx context.Context, url string, opts Options) (*Log, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("open log: database url: %w", err)
	}
	if opts.MaxConns > 0 {
		cfg.MaxConns = opts.MaxConns
	}
	if opts.Schema != "" {
		// Quoted as CREATE SCHEMA quotes it: unquoted, a name with
		// capitals would be folded to lower case and not found.
		cfg.ConnConfig.RuntimeParams["search_path"] = pgx.Identifier{opts.Schema}.Sanitize()
	}
	// The replicas see which of them are alive by their sessions'
	// application_name (a dead replica's claims on due jobs lapse, see Due).
	owner := newOwner()
	cfg.ConnConfig.RuntimeParams["application_name"] = appPrefix + owner
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open log: %w", err)
	}
	if opts.Schema != "" && !opts.NoMigrate {
		if _, err := pool.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{opts.Schema}.Sanitize()); err != nil {
			var pe *pgconn.PgError
			// Two replicas creating it at once: one wins, the other sees
			// a unique violation, and the schema is there.
			if !errors.As(err, &pe) || pe.Code != "23505" {
				pool.Close()
				return nil, fmt.Errorf("open log: create schema: %w", err)
			}
		}
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	if opts.NoMigrate {
		err = checkSchema(ctx, pool)
	} else if _, err = Migrate(ctx, pool); err == nil {
		err = checkIdentity(ctx, pool, opts.Identity, now()) // identity.go
	}
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("open log: %w", err)
	}
	return &Log{pool: pool, now: now, owner: owner}, nil
}

// checkSchema refuses a database whose schema (the first of the
// search_path that has a schema_migrations table) is not this
// gmailrelay's: without the table it is not a gmailrelay log; with other
// migrations applied than this version's, it says which, since checking
// it would need the writer's version (older: a relay of this version
// migrates it when it starts; newer: check with that version).
func checkSchema(ctx context.Context, pool *pgxpool.Pool) error {
	ms, err := loadMigrations()
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	want := make([]int, len(ms))
	for i, m := range ms {
		want[i] = m.version
	}
	var schema string
	var present bool
	err = pool.QueryRow(ctx, "SELECT coalesce(current_schema(), '(none)'), to_regclass('schema_migrations') IS NOT NULL").Scan(&schema, &present)
	if err != nil {
		return err
	}
	if !present {
		return fmt.Errorf("not a gmailrelay log: no schema_migrations table in schema %s (or anywhere on the search_path)", schema)
	}
	rows, err := pool.Query(ctx, "SELECT version FROM schema_migrations ORDER BY version")
	if err != nil {
		return err
	}
	have, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return err
	}
	if slices.Equal(have, want) {
		return nil
	}
	last := 0
	if len(have) > 0 {
		last = have[len(have)-1]
	}
	why := "start a relay of this version on it first (it migrates the schema; upgrade every replica together)"
	if last > want[len(want)-1] {
		why = "a newer gmailrelay wrote it: use that version"
	}
	return fmt.Errorf("the log's schema has migrations %v, this gmailrelay's are %v: %s", have, want, why)
}

// appPrefix starts the application_name of a Log's sessions; the rest is
// its owner.
const appPrefix = "gmailrelay-"

// Close gives up this Log's claims on due jobs and its place among the
// replicas (LiveReplicas) and closes the pool, waiting for connections in
// use. Calling it again does nothing and returns nil.
func (l *Log) Close() error {
	if l.closed.CompareAndSwap(false, true) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, _ = l.pool.Exec(ctx, "UPDATE jobs SET claimed_by = NULL, claimed_until_ns = NULL WHERE claimed_by = $1", l.owner)
		_, _ = l.pool.Exec(ctx, "DELETE FROM replicas WHERE owner = $1", l.owner)
		cancel()
		l.pool.Close()
	}
	return nil
}

// Shared reports true: several relays may use the log at once (see
// gmailrelay.Shared).
func (l *Log) Shared() bool { return true }

// Commits returns how many transactions Mutate has committed since Open.
func (l *Log) Commits() uint64 { return l.commits.Load() }

func (l *Log) ready(ctx context.Context, what string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if l.closed.Load() {
		return fmt.Errorf("%s: %w", what, gmailrelay.ErrClosed)
	}
	return nil
}

// errRetry: the transaction lost a race it can win by running again (a new
// job inserted meanwhile by another writer, a deadlock, a serialization
// failure).
var errRetry = errors.New("pglog: retry")

const maxRetries = 8

// Mutate implements gmailrelay.Store: it locks the job's row (SELECT … FOR
// UPDATE), calls fn through gmailrelay.Prepare and writes the plan in the
// same transaction. A new job is inserted with ON CONFLICT DO NOTHING: when
// another writer (another replica) created it first, the transaction is run
// again and fn sees that job, so two writers of one key end in one job. fn
// may so be called more than once and must depend only on its argument. ctx
// is only checked before the first transaction: a commit is never abandoned
// half-way.
func (l *Log) Mutate(ctx context.Context, messageID string, fn func(cur *gmailrelay.Job) (gmailrelay.Change, error)) (gmailrelay.Job, []gmailrelay.Line, error) {
	if err := ctx.Err(); err != nil {
		return gmailrelay.Job{}, nil, fmt.Errorf("mutate %s: %w", messageID, err)
	}
	if err := gmailrelay.CheckMessageID(messageID); err != nil {
		return gmailrelay.Job{}, nil, fmt.Errorf("mutate: %w: %w", gmailrelay.ErrInvalidChange, err)
	}
	if l.closed.Load() {
		return gmailrelay.Job{}, nil, fmt.Errorf("mutate %s: %w", messageID, gmailrelay.ErrClosed)
	}
	ctx = context.WithoutCancel(ctx)
	for try := 0; ; try++ {
		var (
			p     gmailrelay.Plan
			fnErr error
		)
		err := pgx.BeginFunc(ctx, l.pool, func(tx pgx.Tx) error {
			var err error
			p, fnErr, err = l.mutateTx(ctx, tx, messageID, fn)
			if err == nil && fnErr != nil {
				return errRollback
			}
			return err
		})
		if errors.Is(err, errRollback) {
			return gmailrelay.Job{}, nil, fnErr
		}
		if err != nil && retryable(err) && try < maxRetries {
			continue
		}
		if err != nil {
			return gmailrelay.Job{}, nil, l.wrapErr("mutate "+messageID, err)
		}
		l.commits.Add(1)
		return p.Result, p.Lines, nil
	}
}

var errRollback = errors.New("pglog: rollback")

func retryable(err error) bool {
	if errors.Is(err, errRetry) {
		return true
	}
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40001" || pe.Code == "40P01")
}

// wrapErr adds what to err, marks it closed after Close, and otherwise
// records a lost database (refuse: err then wraps
// gmailrelay.ErrWritesRefused).
func (l *Log) wrapErr(what string, err error) error {
	if err == nil {
		return nil
	}
	if l.closed.Load() {
		err = fmt.Errorf("%w: %w", gmailrelay.ErrClosed, err)
	} else {
		err = l.refuse(err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// mutateTx is one run of a Mutate in tx: fnErr is fn's or a validation
// error (the transaction is rolled back, nothing written), err a storage
// error or errRetry.
func (l *Log) mutateTx(ctx context.Context, tx pgx.Tx, id string, fn func(*gmailrelay.Job) (gmailrelay.Change, error)) (p gmailrelay.Plan, fnErr, err error) {
	cur, err := getJob(ctx, tx, id, true)
	if err != nil && !errors.Is(err, gmailrelay.ErrNotFound) {
		return p, nil, err
	}
	p, fnErr = gmailrelay.Prepare(id, cur, l.now, fn)
	if fnErr != nil {
		return p, fnErr, nil
	}
	if p.Job != nil {
		c, err := columnsOf(p.Job)
		if err != nil {
			return p, nil, err
		}
		if cur == nil {
			// ON CONFLICT without a target: the Message-ID's key and the
			// unique fold (jobs_id_fold) both leave the insert undone.
			tag, err := tx.Exec(ctx, `INSERT INTO jobs (message_id, state, channel, next_check_ns, unknown_ns, prunable_ns, data, job_key)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT DO NOTHING`,
				id, c.state, c.channel, c.nextCheck, c.unknown, c.prunable, c.data, jobKey(p.Job))
			if err != nil {
				return p, nil, fmt.Errorf("insert job: %w", err)
			}
			if tag.RowsAffected() == 0 {
				twin, err := caseTwin(ctx, tx, id)
				if err != nil {
					return p, nil, err
				}
				if twin != nil {
					return p, twin, nil
				}
				return p, nil, errRetry // another writer created it first
			}
		} else if err := updateJob(ctx, tx, id, c); err != nil {
			return p, nil, err
		}
		if err := insertJobDelta(ctx, tx, cur, p.Job); err != nil {
			return p, nil, err
		}
	}
	if p.Raw != nil {
		if _, err := tx.Exec(ctx, `INSERT INTO bodies (message_id, raw) VALUES ($1, $2)
			ON CONFLICT (message_id) DO UPDATE SET raw = EXCLUDED.raw`, id, p.Raw); err != nil {
			return p, nil, fmt.Errorf("put raw: %w", err)
		}
	}
	if len(p.Lines) > 0 {
		if err := l.insertSends(ctx, tx, p.Result.Mailbox, p.Lines); err != nil {
			return p, nil, err
		}
		if err := insertLines(ctx, tx, p.Lines); err != nil {
			return p, nil, err
		}
		if err := insertLineDelta(ctx, tx, p.Lines, 1); err != nil {
			return p, nil, err
		}
	}
	mb, err := p.MailboxRecord(func(name string) (gmailrelay.Mailbox, error) { return lockMailbox(ctx, tx, name) })
	if err != nil {
		return p, nil, err
	}
	if mb != nil {
		v, err := json.Marshal(mb)
		if err != nil {
			return p, nil, fmt.Errorf("encode mailbox: %w", err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO mailboxes (name, data) VALUES ($1, $2)
			ON CONFLICT (name) DO UPDATE SET data = EXCLUDED.data`, mb.Name, v); err != nil {
			return p, nil, fmt.Errorf("put mailbox %s: %w", mb.Name, err)
		}
	}
	return p, nil, nil
}

// insertSends indexes the forwarding lines among lines for the daily
// sending budget (gmailrelay.Store.SendTimes); each takes over one of this
// Log's budget holds of the mailbox, in the same transaction, so the
// budget never counts an attempt twice nor misses it (see SendBudget).
func (l *Log) insertSends(ctx context.Context, tx pgx.Tx, mailbox string, lines []gmailrelay.Line) error {
	for _, ln := range lines {
		if ln.Kind != gmailrelay.KindForwarding {
			continue
		}
		if _, err := tx.Exec(ctx, `INSERT INTO sends (mailbox, at_ns, message_id, attempt) VALUES ($1, $2, $3, $4)
			ON CONFLICT DO NOTHING`, mailbox, ln.Time.UnixNano(), ln.MessageID, ln.Attempt); err != nil {
			return fmt.Errorf("index send: %w", err)
		}
		if err := l.dropHold(ctx, tx, mailbox); err != nil {
			return err
		}
	}
	return nil
}

// linesLock is the advisory lock writers of lines hold shared from before
// they take Seqs to their commit, and Lines' watermark takes exclusive.
const linesLock = 0x676c696e // "glin"

// insertLines gives lines the next Seqs of the line_ids sequence (holding
// the lines lock shared to commit, see Lines) and inserts them. Writers do
// not wait for each other: Seqs are taken in one round trip with the lock.
func insertLines(ctx context.Context, tx pgx.Tx, lines []gmailrelay.Line) error {
	n := len(lines)
	b := &pgx.Batch{}
	b.Queue("SELECT pg_advisory_xact_lock_shared($1)", int64(linesLock))
	b.Queue("SELECT nextval('line_ids') FROM generate_series(1, $1)", n)
	br := tx.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		return fmt.Errorf("lines lock: %w", err)
	}
	rows, err := br.Query()
	if err != nil {
		_ = br.Close()
		return fmt.Errorf("next line seqs: %w", err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil || len(got) != n {
		return fmt.Errorf("next line seqs: %d of %d: %w", len(got), n, err)
	}
	slices.Sort(got)
	seqs, ids, kinds := make([]int64, n), make([]string, n), make([]string, n)
	reasons, data := make([][]byte, n), make([][]byte, n)
	for i := range lines {
		lines[i].Seq = uint64(got[i])
		v, err := json.Marshal(&lines[i])
		if err != nil {
			return fmt.Errorf("encode line: %w", err)
		}
		seqs[i], ids[i], kinds[i] = int64(lines[i].Seq), lines[i].MessageID, string(lines[i].Kind)
		reasons[i], data[i] = []byte(lines[i].Reason), v
	}
	_, err = tx.Exec(ctx, `INSERT INTO lines (seq, message_id, kind, reason, data)
		SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::bytea[], $5::bytea[])`,
		seqs, ids, kinds, reasons, data)
	if err != nil {
		return fmt.Errorf("insert lines: %w", err)
	}
	return nil
}

// lockMailbox reads a mailbox's record with its row locked (creating an
// empty one first, so two writers of a new mailbox queue on one row).
func lockMailbox(ctx context.Context, tx pgx.Tx, name string) (gmailrelay.Mailbox, error) {
	empty, _ := json.Marshal(gmailrelay.Mailbox{Name: name})
	if _, err := tx.Exec(ctx, "INSERT INTO mailboxes (name, data) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING", name, empty); err != nil {
		return gmailrelay.Mailbox{}, fmt.Errorf("mailbox %s: %w", name, err)
	}
	var v []byte
	if err := tx.QueryRow(ctx, "SELECT data FROM mailboxes WHERE name = $1 FOR UPDATE", name).Scan(&v); err != nil {
		return gmailrelay.Mailbox{}, fmt.Errorf("mailbox %s: %w", name, err)
	}
	mb := gmailrelay.Mailbox{Name: name}
	if err := json.Unmarshal(v, &mb); err != nil {
		return gmailrelay.Mailbox{}, fmt.Errorf("decode mailbox %s: %w", name, err)
	}
	return mb, nil
}

// columns are a job's indexed columns and its JSON.
type columns struct {
	state                        string
	channel                      []byte
	nextCheck, unknown, prunable *int64
	data                         []byte
}

func columnsOf(j *gmailrelay.Job) (columns, error) {
	c := columns{state: string(j.State), channel: []byte(j.Channel)}
	if !j.NextCheckAt.IsZero() {
		c.nextCheck = nanos(j.NextCheckAt)
	}
	if j.State == gmailrelay.StateUnknown && !j.AmbiguousAt.IsZero() {
		c.unknown = nanos(j.AmbiguousAt)
	}
	if j.Prunable() {
		c.prunable = nanos(j.UpdatedAt)
	}
	v, err := json.Marshal(j)
	if err != nil {
		return c, fmt.Errorf("encode job %s: %w", j.MessageID, err)
	}
	c.data = v
	return c, nil
}

func updateJob(ctx context.Context, tx pgx.Tx, id string, c columns) error {
	// Any write ends a sweeper's claim on the job (see Due).
	_, err := tx.Exec(ctx, `UPDATE jobs SET state = $2, channel = $3, next_check_ns = $4, unknown_ns = $5, prunable_ns = $6, data = $7,
		claimed_by = NULL, claimed_until_ns = NULL
		WHERE message_id = $1`, id, c.state, c.channel, c.nextCheck, c.unknown, c.prunable, c.data)
	if err != nil {
		return fmt.Errorf("update job %s: %w", id, err)
	}
	return nil
}

// nanos is t as UnixNano, clamped to the range where that is defined so the
// order stays the time order.
func nanos(t time.Time) *int64 {
	var n int64
	switch {
	case t.Before(time.Unix(0, math.MinInt64)):
		n = math.MinInt64
	case t.After(time.Unix(0, math.MaxInt64)):
		n = math.MaxInt64
	default:
		n = t.UnixNano()
	}
	return &n
}

// querier is what reads need of a pool or a transaction.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// getJob reads a job (locking its row when forUpdate); ErrNotFound and a nil
// job when absent.
func getJob(ctx context.Context, q querier, id string, forUpdate bool) (*gmailrelay.Job, error) {
	sql := "SELECT data FROM jobs WHERE message_id = $1"
	if forUpdate {
		sql += " FOR UPDATE"
	}
	var v []byte
	err := q.QueryRow(ctx, sql, id).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, gmailrelay.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("read job %s: %w", id, err)
	}
	var j gmailrelay.Job
	if err := json.Unmarshal(v, &j); err != nil {
		return nil, fmt.Errorf("decode job %s: %w", id, err)
	}
	return &j, nil
}
