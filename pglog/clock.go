package pglog

import (
	"context"
	"time"
)

// clockRoundTrips is how many round trips ClockOffset makes; it keeps the
// shortest (the least uncertain).
const clockRoundTrips = 3

// ClockOffset implements relay.ClockChecker: PostgreSQL's clock
// (clock_timestamp(), read during the statement, not at the start of its
// transaction) minus now's reading at the midpoint of the round trip, and
// half the round trip as the uncertainty. It makes clockRoundTrips round
// trips on one session (acquiring it is not timed) and keeps the shortest.
// now is the replica's clock; nil means the Log's (Options.Now). It
// returns acceptlog.ErrClosed (wrapped) after Close, and the database's
// error when it cannot be reached.
func (l *Log) ClockOffset(ctx context.Context, now func() time.Time) (offset, uncertainty time.Duration, err error) {
	const what = "clock offset"
	if err := l.ready(ctx, what); err != nil {
		return 0, 0, err
	}
	if now == nil {
		now = l.now
	}
	conn, err := l.pool.Acquire(ctx)
	if err != nil {
		return 0, 0, l.wrapErr(what, err)
	}
	defer conn.Release()
	best := time.Duration(-1)
	for range clockRoundTrips {
		var db time.Time
		t0 := now()
		if err := conn.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&db); err != nil {
			return 0, 0, l.wrapErr(what, err)
		}
		t1 := now()
		rtt := max(t1.Sub(t0), 0)
		if best < 0 || rtt < best {
			best = rtt
			offset, uncertainty = db.Sub(t0.Add(rtt/2)), rtt/2
		}
	}
	return offset, uncertainty, nil
}
