package pglog_test

import (
	"context"
	"errors"
	"testing"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/pglog/pgtest"
)

// A log migrated before job identity ignored case may hold case twins:
// migration 0010 keeps every job as it is, gives the fold to the twin that
// sorts first and marks the other; both still read, a third twin is
// refused naming the holder, and the log checks clean.
func TestMigrationKeepsCaseTwinsAndRefusesANewOne(t *testing.T) {
	ctx := context.Background()
	url, _ := pgtest.SchemaURL(t)
	l, err := openWith(url, gmailrelay.Identity{})
	if err != nil {
		t.Fatal(err)
	}
	// Back to the schema of migration 0009, where twins went in.
	execSQL(t, url, `DROP INDEX jobs_id_fold; ALTER TABLE jobs DROP COLUMN id_fold, DROP COLUMN case_twin;
		DELETE FROM schema_migrations WHERE version = 10`)
	const lower, upper, third = "<job-abc@x>", "<JOB-ABC@x>", "<Job-Abc@x>"
	createQueued(t, l, lower, "k-lower")
	createQueued(t, l, upper, "k-upper")
	l.Close()

	l, err = openWith(url, gmailrelay.Identity{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, id := range []string{lower, upper} {
		if j, err := l.Get(ctx, id); err != nil || j.MessageID != id {
			t.Errorf("Get(%s) after migration 0010: %+v, %v", id, j, err)
		}
	}
	_, _, err = l.Mutate(ctx, third, func(*gmailrelay.Job) (gmailrelay.Change, error) {
		return gmailrelay.Change{Job: &gmailrelay.Job{MessageID: third, Channel: "default", State: gmailrelay.StateQueued},
			Lines: []gmailrelay.Line{{Kind: gmailrelay.KindReceived, State: gmailrelay.StateQueued, Channel: "default"}}}, nil
	})
	var ce *gmailrelay.CaseTwinError
	if !errors.As(err, &ce) || ce.Existing != upper {
		t.Fatalf("a third twin: %v; want a CaseTwinError naming %s (sorts first)", err, upper)
	}
	if err := l.Check(ctx); err != nil {
		t.Errorf("check after migration 0010: %v", err)
	}
}
