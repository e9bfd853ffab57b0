package pglog

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	"github.com/gmailrelay/gmailrelay/acceptlog"
)

// Stats reads the count deltas, not the jobs and lines; once more than
// foldCountsAt delta rows have piled up it folds them into one row per
// key, and the counts it answers stay the same (Check recounts them).
func TestStatsFromCountDeltasAndFold(t *testing.T) {
	ctx := context.Background()
	l := openFresh(t)
	for i := range 5 {
		id := fmt.Sprintf("<c%d@x>", i)
		if _, _, err := l.Mutate(ctx, id, func(*acceptlog.Job) (acceptlog.Change, error) {
			return acceptlog.Change{
				Job:   &acceptlog.Job{MessageID: id, Channel: "default", State: acceptlog.StateForwarding, Attempts: 1},
				Lines: []acceptlog.Line{{Kind: acceptlog.KindReceived, Attempt: 1, State: acceptlog.StateForwarding}},
			}, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	before, err := l.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if before.Jobs != 5 || before.Lines != 5 || before.ByState[acceptlog.StateForwarding] != 5 {
		t.Fatalf("stats %+v; want 5 forwarding jobs, 5 lines", before)
	}
	// Pile up deltas that sum to nothing.
	if _, err := l.pool.Exec(ctx, `INSERT INTO job_counts (state, channel, n)
		SELECT 'forwarding', 'default'::bytea, CASE WHEN g % 2 = 0 THEN 1 ELSE -1 END FROM generate_series(1, $1) g`, foldCountsAt+2); err != nil {
		t.Fatal(err)
	}
	mid, err := l.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var rows int
	if err := l.pool.QueryRow(ctx, "SELECT (SELECT count(*) FROM job_counts) + (SELECT count(*) FROM line_counts)").Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 2 {
		t.Errorf("%d delta rows after Stats folded them, want 2 (one per key)", rows)
	}
	after, err := l.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(before, mid) || !reflect.DeepEqual(before, after) {
		t.Errorf("stats changed by piling up and folding deltas:\n%+v\n%+v\n%+v", before, mid, after)
	}
}
