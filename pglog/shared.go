package pglog

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/faultmodes"
)

var (
	_ gmailrelay.SendBudget    = (*Log)(nil)
	_ gmailrelay.MailboxPauses = (*Log)(nil)
	_ faultmodes.Store         = (*Log)(nil)
)

// holdTTL is how long a budget hold counts without its forwarding line: a
// replica that died between admission and logging leaves holds that stop
// counting after it (admission to log takes milliseconds).
const holdTTL = 5 * time.Minute

// budgetLock is the advisory lock class of a mailbox's budget: holds of
// one mailbox are taken one at a time across replicas.
const budgetLock = 0x67627564 // "gbud"

func newOwner() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Owner names this Log among the replicas sharing the database (its budget
// holds, its sweeper's claims).
func (l *Log) Owner() string { return l.owner }

// dropHold takes over (deletes) the oldest of this Log's budget holds of
// mailbox, if any, in tx.
func (l *Log) dropHold(ctx context.Context, tx pgx.Tx, mailbox string) error {
	// SKIP LOCKED: two forwarding lines committing at once take two
	// different holds (without it the second would find the first's hold
	// gone and take none, leaving a hold that counts twice).
	_, err := tx.Exec(ctx, `DELETE FROM send_holds WHERE id = (SELECT id FROM send_holds
		WHERE owner = $1 AND mailbox = $2 ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)`, l.owner, mailbox)
	if err != nil {
		return fmt.Errorf("take over budget hold: %w", err)
	}
	return nil
}

// SendBudget implements gmailrelay.SendBudget: under a transaction-scoped
// advisory lock per mailbox, it counts the mailbox's sends since since and
// its holds younger than holdTTL in one statement (so a forwarding line
// that takes a hold over is seen once, either as the hold or as the send),
// and adds a hold when asked and there is room.
func (l *Log) SendBudget(ctx context.Context, mailbox string, limit int, since, now time.Time, hold bool) (gmailrelay.BudgetAnswer, error) {
	const what = "send budget"
	if err := l.ready(ctx, what); err != nil {
		return gmailrelay.BudgetAnswer{}, err
	}
	var ans gmailrelay.BudgetAnswer
	if !hold {
		// A look without a hold is one statement (one snapshot), no lock.
		var err error
		ans, err = budgetCount(ctx, l.pool, mailbox, limit, since, now)
		return ans, l.wrapErr(what, err)
	}
	err := pgx.BeginFunc(ctx, l.pool, func(tx pgx.Tx) error {
		ans = gmailrelay.BudgetAnswer{}
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1, hashtext($2))", int32(budgetLock), mailbox); err != nil {
			return err
		}
		if l.sweepHolds.Add(1)%64 == 1 {
			// Holds of dead replicas stopped counting; drop them now and then.
			if _, err := tx.Exec(ctx, "DELETE FROM send_holds WHERE mailbox = $1 AND at_ns < $2", mailbox, now.Add(-holdTTL).UnixNano()); err != nil {
				return err
			}
		}
		var err error
		if ans, err = budgetCount(ctx, tx, mailbox, limit, since, now); err != nil || !ans.OK {
			return err
		}
		ans.Used++
		_, err = tx.Exec(ctx, "INSERT INTO send_holds (mailbox, owner, at_ns) VALUES ($1, $2, $3)", mailbox, l.owner, now.UnixNano())
		return err
	})
	if err != nil {
		return gmailrelay.BudgetAnswer{}, l.wrapErr(what, err)
	}
	return ans, nil
}

// budgetCount counts a mailbox's sends since since and its live holds in
// one statement (so a hold taken over by its forwarding line in between is
// seen once), and when the limit is reached finds when the oldest entry
// that must leave the window does.
func budgetCount(ctx context.Context, q querier, mailbox string, limit int, since, now time.Time) (gmailrelay.BudgetAnswer, error) {
	var ans gmailrelay.BudgetAnswer
	sinceNs, liveNs := sinceNanos(since), now.Add(-holdTTL).UnixNano()
	if err := q.QueryRow(ctx, `SELECT (SELECT count(*) FROM sends WHERE mailbox = $1 AND at_ns >= $2)
		+ (SELECT count(*) FROM send_holds WHERE mailbox = $1 AND at_ns >= $3)`, mailbox, sinceNs, liveNs).Scan(&ans.Used); err != nil {
		return ans, err
	}
	if ans.Used < limit {
		ans.OK = true
		return ans, nil
	}
	var ns int64
	err := q.QueryRow(ctx, `SELECT at_ns FROM (SELECT at_ns FROM sends WHERE mailbox = $1 AND at_ns >= $2
		UNION ALL SELECT at_ns FROM send_holds WHERE mailbox = $1 AND at_ns >= $3) x ORDER BY at_ns OFFSET $4 LIMIT 1`,
		mailbox, sinceNs, liveNs, ans.Used-limit).Scan(&ns)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		ans.Frees = now
	case err != nil:
		return ans, err
	default:
		ans.Frees = time.Unix(0, ns).UTC()
	}
	return ans, nil
}

// ReleaseSend implements gmailrelay.SendBudget.
func (l *Log) ReleaseSend(ctx context.Context, mailbox string) error {
	const what = "release send"
	if err := l.ready(ctx, what); err != nil {
		return err
	}
	_, err := l.pool.Exec(ctx, `DELETE FROM send_holds WHERE id = (SELECT id FROM send_holds
		WHERE owner = $1 AND mailbox = $2 ORDER BY id DESC LIMIT 1 FOR UPDATE SKIP LOCKED)`, l.owner, mailbox)
	return l.wrapErr(what, err)
}

// PausedUntil implements gmailrelay.MailboxPauses.
func (l *Log) PausedUntil(ctx context.Context, mailbox string) (time.Time, error) {
	const what = "paused until"
	if err := l.ready(ctx, what); err != nil {
		return time.Time{}, err
	}
	var ns *int64
	err := l.pool.QueryRow(ctx, "SELECT paused_until_ns FROM mailboxes WHERE name = $1", mailbox).Scan(&ns)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && ns == nil) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, l.wrapErr(what, err)
	}
	return time.Unix(0, *ns).UTC(), nil
}

// PauseUntil implements gmailrelay.MailboxPauses (creating the mailbox's
// record when there is none).
func (l *Log) PauseUntil(ctx context.Context, mailbox string, until time.Time) error {
	const what = "pause until"
	if err := l.ready(ctx, what); err != nil {
		return err
	}
	_, err := l.pool.Exec(ctx, `INSERT INTO mailboxes AS m (name, data, paused_until_ns) VALUES ($1, $2, $3)
		ON CONFLICT (name) DO UPDATE SET paused_until_ns = GREATEST(coalesce(m.paused_until_ns, EXCLUDED.paused_until_ns), EXCLUDED.paused_until_ns)`,
		mailbox, emptyMailbox(mailbox), *nanos(until))
	return l.wrapErr(what, err)
}

func emptyMailbox(name string) []byte {
	return []byte(fmt.Sprintf(`{"name":%q}`, name))
}

// AddFaultRule implements faultmodes.Store.
func (l *Log) AddFaultRule(ctx context.Context, data []byte, remaining *int) (uint64, error) {
	const what = "add fault rule"
	if err := l.ready(ctx, what); err != nil {
		return 0, err
	}
	var seq int64
	err := l.pool.QueryRow(ctx, "INSERT INTO fault_rules (data, remaining) VALUES ($1, $2) RETURNING seq", data, remaining).Scan(&seq)
	return uint64(seq), l.wrapErr(what, err)
}

// FaultRules implements faultmodes.Store.
func (l *Log) FaultRules(ctx context.Context) ([]faultmodes.StoredRule, error) {
	const what = "fault rules"
	if err := l.ready(ctx, what); err != nil {
		return nil, err
	}
	rows, err := l.pool.Query(ctx, "SELECT seq, data, remaining, hits FROM fault_rules ORDER BY seq")
	if err != nil {
		return nil, l.wrapErr(what, err)
	}
	var out []faultmodes.StoredRule
	var (
		seq       int64
		data      []byte
		remaining *int
		hits      int
	)
	_, err = pgx.ForEachRow(rows, []any{&seq, &data, &remaining, &hits}, func() error {
		r := faultmodes.StoredRule{Seq: uint64(seq), Data: append([]byte(nil), data...), Hits: hits}
		if remaining != nil {
			v := *remaining
			r.Remaining = &v
		}
		out = append(out, r)
		return nil
	})
	return out, l.wrapErr(what, err)
}

// DeleteFaultRule implements faultmodes.Store.
func (l *Log) DeleteFaultRule(ctx context.Context, seq uint64) (bool, error) {
	const what = "delete fault rule"
	if err := l.ready(ctx, what); err != nil {
		return false, err
	}
	tag, err := l.pool.Exec(ctx, "DELETE FROM fault_rules WHERE seq = $1", int64(seq))
	return err == nil && tag.RowsAffected() > 0, l.wrapErr(what, err)
}

// ClearFaultRules implements faultmodes.Store.
func (l *Log) ClearFaultRules(ctx context.Context) (int, error) {
	const what = "clear fault rules"
	if err := l.ready(ctx, what); err != nil {
		return 0, err
	}
	tag, err := l.pool.Exec(ctx, "DELETE FROM fault_rules")
	if err != nil {
		return 0, l.wrapErr(what, err)
	}
	return int(tag.RowsAffected()), nil
}

// UseFaultRule implements faultmodes.Store: one UPDATE, so a counted rule
// fires at most its count across every replica.
func (l *Log) UseFaultRule(ctx context.Context, seq uint64) (bool, error) {
	const what = "use fault rule"
	if err := l.ready(ctx, what); err != nil {
		return false, err
	}
	tag, err := l.pool.Exec(ctx, `UPDATE fault_rules SET hits = hits + 1, remaining = remaining - 1
		WHERE seq = $1 AND (remaining IS NULL OR remaining > 0)`, int64(seq))
	if err != nil {
		return false, l.wrapErr(what, err)
	}
	return tag.RowsAffected() == 1, nil
}

// RefundFaultRule implements faultmodes.Store.
func (l *Log) RefundFaultRule(ctx context.Context, seq uint64) error {
	const what = "refund fault rule"
	if err := l.ready(ctx, what); err != nil {
		return err
	}
	_, err := l.pool.Exec(ctx, `UPDATE fault_rules SET hits = greatest(hits - 1, 0), remaining = remaining + 1 WHERE seq = $1`, int64(seq))
	return l.wrapErr(what, err)
}
