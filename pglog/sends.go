package pglog

import (
	"context"
	"time"
)

// SendTimes implements gmailrelay.Store.
func (l *Log) SendTimes(ctx context.Context, mailbox string, since time.Time) ([]time.Time, error) {
	const what = "send times"
	if err := l.ready(ctx, what); err != nil {
		return nil, err
	}
	rows, err := l.pool.Query(ctx, "SELECT at_ns FROM sends WHERE mailbox = $1 AND at_ns >= $2 ORDER BY at_ns", mailbox, sinceNanos(since))
	if err != nil {
		return nil, l.wrapErr(what, err)
	}
	defer rows.Close()
	var out []time.Time
	for rows.Next() {
		var ns int64
		if err := rows.Scan(&ns); err != nil {
			return nil, l.wrapErr(what, err)
		}
		out = append(out, time.Unix(0, ns).UTC())
	}
	if err := rows.Err(); err != nil {
		return nil, l.wrapErr(what, err)
	}
	return out, nil
}

// PruneSends implements gmailrelay.Store.
func (l *Log) PruneSends(ctx context.Context, before time.Time) (int, error) {
	const what = "prune sends"
	if err := l.ready(ctx, what); err != nil {
		return 0, err
	}
	tag, err := l.pool.Exec(ctx, "DELETE FROM sends WHERE at_ns < $1", sinceNanos(before))
	if err != nil {
		return 0, l.wrapErr(what, err)
	}
	return int(tag.RowsAffected()), nil
}

// sinceNanos is t in UnixNano, with the zero time (and anything before
// 1678, which UnixNano cannot hold) as the smallest value.
func sinceNanos(t time.Time) int64 {
	if t.Before(time.Unix(0, 0).Add(-292 * 365 * 24 * time.Hour)) {
		return -1 << 63
	}
	return t.UnixNano()
}
