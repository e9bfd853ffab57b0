package acceptlog_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay/acceptlog"
	"github.com/gmailrelay/gmailrelay/acceptlog/acceptlogtest"
)

// Every pair of states outside the table is refused, with an error naming
// both; every pair in it is accepted.
func TestMutateRefusesEveryTransitionOutsideTheTable(t *testing.T) {
	ctx := context.Background()
	l := acceptlogtest.Open(t)
	n := 0
	for _, from := range acceptlog.States {
		for _, to := range acceptlog.States {
			n++
			id := fmt.Sprintf("<t%d@x>", n)
			seed := acceptlog.Job{MessageID: id, State: from, Attempts: 1, CreatedAt: time.Unix(1, 0)}
			if _, _, err := l.Mutate(ctx, id, func(*acceptlog.Job) (acceptlog.Change, error) {
				j := seed
				return acceptlog.Change{Job: &j, Lines: []acceptlog.Line{{Kind: acceptlog.KindState, State: from}}}, nil
			}); err != nil {
				t.Fatalf("seed %s: %v", from, err)
			}
			_, _, err := l.Mutate(ctx, id, func(cur *acceptlog.Job) (acceptlog.Change, error) {
				j := *cur
				line := acceptlog.Move(&j, to, acceptlog.Line{Kind: acceptlog.KindState})
				return acceptlog.Change{Job: &j, Lines: []acceptlog.Line{line}}, nil
			})
			if acceptlog.Allowed(from, to) {
				if err != nil {
					t.Errorf("%s → %s (in the table): %v", from, to, err)
				}
				continue
			}
			if !errors.Is(err, acceptlog.ErrInvalidChange) || !strings.Contains(err.Error(), string(from)+" → "+string(to)) {
				t.Errorf("%s → %s (not in the table): err = %v, want an invalid change naming both states", from, to, err)
			}
			got, gerr := l.Get(ctx, id)
			if gerr != nil || got.State != from {
				t.Errorf("%s → %s refused, but the job is %s (%v)", from, to, got.State, gerr)
			}
		}
	}
}
