package pglog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gmailrelay/gmailrelay"
)

// The log's identity (gmailrelay.Identity) and key index in PostgreSQL:
// migration 0009's identity table and jobs.job_key column, and the fold
// index of migration 0010 (jobs.id_fold, case_twin), through which job
// identity ignores ASCII case in the Message-ID.

// checkIdentity is Open's comparison of the replica's identity with the
// log's (gmailrelay.CheckIdentity): the first replica with one records it
// (a new log, or one older than the table), every later one must have
// the same. Replicas starting at once race on the insert: one row wins
// (ON CONFLICT DO NOTHING) and every other compares with it.
func checkIdentity(ctx context.Context, pool *pgxpool.Pool, want gmailrelay.Identity, now time.Time) error {
	rec, err := gmailrelay.CheckIdentity(nil, want, now)
	if err != nil || rec == nil {
		return err
	}
	v, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("encode the log's identity: %w", err)
	}
	tag, err := pool.Exec(ctx, "INSERT INTO identity (data) VALUES ($1) ON CONFLICT (one) DO NOTHING", v)
	if err != nil {
		return fmt.Errorf("record the log's identity: %w", err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	stored, err := readIdentity(ctx, pool, false)
	if err != nil {
		return err
	}
	_, err = gmailrelay.CheckIdentity(stored, want, now)
	return err
}

// readIdentity reads the stored identity record (nil for none), locking
// its row when forUpdate.
func readIdentity(ctx context.Context, q querier, forUpdate bool) (*gmailrelay.IdentityRecord, error) {
	sql := "SELECT data FROM identity"
	if forUpdate {
		sql += " FOR UPDATE"
	}
	var v []byte
	err := q.QueryRow(ctx, sql).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the log's identity: %w", err)
	}
	var rec gmailrelay.IdentityRecord
	if err := json.Unmarshal(v, &rec); err != nil {
		return nil, fmt.Errorf("decode the log's identity: %w", err)
	}
	return &rec, nil
}

// StoredIdentity returns the log's identity record, nil when it has none.
func (l *Log) StoredIdentity(ctx context.Context) (*gmailrelay.IdentityRecord, error) {
	if err := l.ready(ctx, "identity"); err != nil {
		return nil, err
	}
	rec, err := readIdentity(ctx, l.pool, false)
	return rec, l.wrapErr("identity", err)
}

// jobKey is the job_key column of a new job: NULL when it has no key.
func jobKey(j *gmailrelay.Job) *string {
	if j.Key == "" {
		return nil
	}
	return &j.Key
}

// JobByKey implements gmailrelay.Store through the job_key index; of
// several jobs of one key it returns the one created first.
func (l *Log) JobByKey(ctx context.Context, key string) (gmailrelay.Job, error) {
	if err := l.ready(ctx, "job by key"); err != nil {
		return gmailrelay.Job{}, err
	}
	rows, err := l.pool.Query(ctx, "SELECT data FROM jobs WHERE job_key = $1", key)
	if err != nil {
		return gmailrelay.Job{}, l.wrapErr("job by key", err)
	}
	datas, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
	if err != nil {
		return gmailrelay.Job{}, l.wrapErr("job by key", err)
	}
	var first *gmailrelay.Job
	for _, v := range datas {
		var j gmailrelay.Job
		if err := json.Unmarshal(v, &j); err != nil {
			return gmailrelay.Job{}, fmt.Errorf("job by key: decode job: %w", err)
		}
		if first == nil || j.CreatedAt.Before(first.CreatedAt) ||
			j.CreatedAt.Equal(first.CreatedAt) && j.MessageID < first.MessageID {
			first = &j
		}
	}
	if first == nil {
		return gmailrelay.Job{}, fmt.Errorf("job by key: %w", gmailrelay.ErrNotFound)
	}
	return *first, nil
}

// Rekey records next as the identity of the log in the database at url
// (gmailrelay.Rekeyed: the replaced identity joins Previous). Jobs keep
// their Message-IDs; the front door finds them by key. It returns the
// record before (nil when the log had none) and after, and whether
// anything changed. It neither creates nor migrates a log (a database
// without this version's schema is refused, as gmailrelay check refuses
// it), and refuses, with an error wrapping gmailrelay.ErrLocked, while a
// relay is connected to the log: a replica still deriving the old
// identity's Message-IDs next to one deriving the new one's could each
// create a job for one key.
func Rekey(ctx context.Context, url string, next gmailrelay.Identity, now time.Time) (before *gmailrelay.IdentityRecord, after gmailrelay.IdentityRecord, changed bool, err error) {
	if err := next.Validate(); err != nil {
		return nil, gmailrelay.IdentityRecord{}, false, err
	}
	l, err := Open(ctx, url, Options{NoMigrate: true})
	if err != nil {
		return nil, gmailrelay.IdentityRecord{}, false, err
	}
	defer l.Close()
	err = pgx.BeginFunc(ctx, l.pool, func(tx pgx.Tx) error {
		var err error
		if before, err = readIdentity(ctx, tx, true); err != nil {
			return err
		}
		var live int
		err = tx.QueryRow(ctx, `SELECT count(*) FROM replicas r
			WHERE EXISTS (SELECT 1 FROM pg_stat_activity WHERE application_name = $1 || r.owner)`, appPrefix).Scan(&live)
		if err != nil {
			return fmt.Errorf("count the relays on the log: %w", err)
		}
		if live > 0 {
			return fmt.Errorf("%w: %d relays are connected to this log (stop every replica first)", gmailrelay.ErrLocked, live)
		}
		if after, changed, err = gmailrelay.Rekeyed(before, next, now); err != nil || !changed {
			return err
		}
		v, err := json.Marshal(&after)
		if err != nil {
			return fmt.Errorf("encode the log's identity: %w", err)
		}
		_, err = tx.Exec(ctx, `INSERT INTO identity (data) VALUES ($1)
			ON CONFLICT (one) DO UPDATE SET data = EXCLUDED.data`, v)
		return err
	})
	if err != nil {
		return nil, gmailrelay.IdentityRecord{}, false, fmt.Errorf("rekey: %w", err)
	}
	return before, after, changed, nil
}

// caseTwin returns the refusal of a new job id (an *gmailrelay.CaseTwinError)
// when a stored job's Message-ID differs from id only in ASCII case, nil
// when none does. Of case twins stored before the fold index existed it
// names the one that sorts first, which holds the fold.
func caseTwin(ctx context.Context, tx pgx.Tx, id string) (*gmailrelay.CaseTwinError, error) {
	var other string
	err := tx.QueryRow(ctx, `SELECT message_id FROM jobs WHERE id_fold = $1 AND message_id <> $2
		ORDER BY message_id LIMIT 1`, gmailrelay.FoldMessageID(id), id).Scan(&other)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("look for a case twin: %w", err)
	}
	return &gmailrelay.CaseTwinError{MessageID: id, Existing: other}, nil
}
