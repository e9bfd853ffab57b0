package pglog

import (
	"context"
	"time"

	"github.com/gmailrelay/gmailrelay"
)

var _ gmailrelay.ReplicaCounter = (*Log)(nil)

// replicaForget is how long a relay's row outlives its last session: a
// relay whose pool happens to have no session open for a moment is not
// forgotten, and counts again as soon as it has one.
const replicaForget = 10 * time.Minute

// LiveReplicas implements gmailrelay.ReplicaCounter: it records this Log
// as a replica (the replicas table of its schema, so logs in other
// schemas of the database never count) and counts the recorded ones that
// have a session open, by application_name, as Due tells a live claimer
// (this Log always counts: it is asking). Rows of replicas without a
// session not seen for replicaForget are deleted. Close removes this
// Log's row at once; a replica that died stops counting when its sessions
// are gone.
func (l *Log) LiveReplicas(ctx context.Context) (int, error) {
	if err := l.ready(ctx, "live replicas"); err != nil {
		return 0, err
	}
	now := l.now()
	var others int
	err := l.pool.QueryRow(ctx, `WITH me AS (
			INSERT INTO replicas (owner, seen_ns) VALUES ($1, $2)
			ON CONFLICT (owner) DO UPDATE SET seen_ns = EXCLUDED.seen_ns),
		gone AS (
			DELETE FROM replicas r WHERE r.owner <> $1 AND r.seen_ns < $3
				AND NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE application_name = $4 || r.owner))
		SELECT count(*) FROM replicas r WHERE r.owner <> $1
			AND EXISTS (SELECT 1 FROM pg_stat_activity WHERE application_name = $4 || r.owner)`,
		l.owner, *nanos(now), *nanos(now.Add(-replicaForget)), appPrefix).Scan(&others)
	if err != nil {
		return 0, l.wrapErr("live replicas", err)
	}
	return others + 1, nil
}
