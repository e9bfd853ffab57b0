package pglog

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	"github.com/gmailrelay/gmailrelay"
)

// Stats reads the count deltas, not the jobs and lines; once more than
// foldCountsAt delta rows have piled up it folds them into one row per
// key, and the counts it answers stay the same (Check recounts them).
func TestStatsFromCountDeltasAndFold(t *testing.T) {
	ctx := context.Background()
	l := openFresh(t)
	for i := range 5 {
		id := fmt.Sprintf("<c%d@x>", i)
		if _, _, err := l.Mutate(ctx, id, func(*gmailrelay.Job) (gmailrelay.Change, error) {
			return gmailrelay.Change{
				Job:   &gmailrelay.Job{MessageID: id, Channel: "default", State: gmailrelay.StateForwarding, Attempts: 1},
				Lines: []gmailrelay.Line{{Kind: gmailrelay.KindReceived, Attempt: 1, State: gmailrelay.StateForwarding}},
			}, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	before, err := l.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if before.Jobs != 5 || before.Lines != 5 || before.ByState[gmailrelay.StateForwarding] != 5 {
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
