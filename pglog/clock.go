package pglog

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gmailrelay/gmailrelay/relay"
)

// clockRoundTrips is how many round trips a clock measurement makes; it
// keeps the shortest (the least uncertain).
const clockRoundTrips = 3

// clockVoteTTL is how long a replica's published offset votes
// (MeasureClock): an older one, on the database's clock, does not.
const clockVoteTTL = 2 * time.Minute

var _ relay.ClockChecker = (*Log)(nil)

// clockOffset measures PostgreSQL's clock (clock_timestamp(), read during
// the statement, not at the start of its transaction) minus now's reading
// at the midpoint of the round trip, and half the round trip as the
// uncertainty, on conn: clockRoundTrips round trips, the shortest kept; it
// also returns the database's reading of that round trip. now is the
// replica's clock; nil means the Log's (Options.Now).
func (l *Log) clockOffset(ctx context.Context, conn *pgx.Conn, now func() time.Time) (offset, uncertainty time.Duration, at time.Time, err error) {
	if now == nil {
		now = l.now
	}
	best := time.Duration(-1)
	for range clockRoundTrips {
		var db time.Time
		t0 := now()
		if err := conn.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&db); err != nil {
			return 0, 0, time.Time{}, l.wrapErr("clock offset", err)
		}
		t1 := now()
		rtt := max(t1.Sub(t0), 0)
		if best < 0 || rtt < best {
			best = rtt
			offset, uncertainty, at = db.Sub(t0.Add(rtt/2)), rtt/2, db
		}
	}
	return offset, uncertainty, at, nil
}

// MeasureClock implements relay.ClockChecker: it measures now against
// PostgreSQL's clock (see clockOffset; the session is acquired untimed), publishes the offset in this
// Log's row of the replicas table (with the database's reading, so its age
// is judged on one clock), and returns the offsets the other replicas
// published: those with a session open (as LiveReplicas counts them) whose
// offset is younger than clockVoteTTL on the database's clock.
func (l *Log) MeasureClock(ctx context.Context, now func() time.Time) (relay.ClockReading, error) {
	const what = "measure clock"
	if err := l.ready(ctx, what); err != nil {
		return relay.ClockReading{}, err
	}
	conn, err := l.pool.Acquire(ctx)
	if err != nil {
		return relay.ClockReading{}, l.wrapErr(what, err)
	}
	defer conn.Release()
	off, unc, at, err := l.clockOffset(ctx, conn.Conn(), now)
	if err != nil {
		return relay.ClockReading{}, err
	}
	r := relay.ClockReading{Offset: off, Uncertainty: unc}
	rows, err := conn.Query(ctx, `WITH me AS (
			INSERT INTO replicas (owner, seen_ns, clock_offset_ns, clock_at_ns) VALUES ($1, $2, $3, $4)
			ON CONFLICT (owner) DO UPDATE SET seen_ns = EXCLUDED.seen_ns,
				clock_offset_ns = EXCLUDED.clock_offset_ns, clock_at_ns = EXCLUDED.clock_at_ns)
		SELECT r.clock_offset_ns FROM replicas r
		WHERE r.owner <> $1 AND r.clock_offset_ns IS NOT NULL AND r.clock_at_ns >= $5
			AND EXISTS (SELECT 1 FROM pg_stat_activity WHERE application_name = $6 || r.owner)`,
		l.owner, *nanos(l.now()), int64(off), at.UnixNano(), at.Add(-clockVoteTTL).UnixNano(), appPrefix)
	if err != nil {
		return relay.ClockReading{}, l.wrapErr(what, err)
	}
	peers, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return relay.ClockReading{}, l.wrapErr(what, err)
	}
	for _, p := range peers {
		r.Peers = append(r.Peers, time.Duration(p))
	}
	return r, nil
}
