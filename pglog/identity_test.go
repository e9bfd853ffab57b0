package pglog_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/pglog"
	"github.com/gmailrelay/gmailrelay/pglog/pgtest"
)

var (
	idA = gmailrelay.Identity{MsgIDDomain: "a.example"}
	idB = gmailrelay.Identity{MsgIDDomain: "b.example"}
)

func openWith(url string, id gmailrelay.Identity) (*pglog.Log, error) {
	return pglog.Open(context.Background(), url, pglog.Options{Identity: id})
}

func stored(t *testing.T, url string) *gmailrelay.IdentityRecord {
	t.Helper()
	l, err := pglog.Open(context.Background(), url, pglog.Options{NoMigrate: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	rec, err := l.StoredIdentity(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// The first replica with an identity records it; one with the same opens,
// one without compares nothing; one with another is refused naming both,
// and the stored identity stays.
func TestReplicasCompareTheirIdentityAtOpen(t *testing.T) {
	url, _ := pgtest.SchemaURL(t)
	a, err := openWith(url, idA)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	for _, id := range []gmailrelay.Identity{idA, {}} {
		l, err := openWith(url, id)
		if err != nil {
			t.Fatalf("open with %v: %v", id, err)
		}
		l.Close()
	}
	_, err = openWith(url, idB)
	if !errors.Is(err, gmailrelay.ErrIdentityMismatch) || !strings.Contains(err.Error(), "a.example") || !strings.Contains(err.Error(), "b.example") {
		t.Fatalf("replica with b.example: %v; want a mismatch naming both", err)
	}
	if rec := stored(t, url); rec == nil || rec.Identity != idA {
		t.Errorf("stored %+v after the refusal, want %v", rec, idA)
	}
}

// Replicas with different identities starting at once on a new log: one
// records its identity, every other is refused.
func TestReplicasStartingAtOnceAgreeOnOneIdentity(t *testing.T) {
	url, _ := pgtest.SchemaURL(t)
	if l, err := openWith(url, gmailrelay.Identity{}); err != nil { // migrated, no identity yet
		t.Fatal(err)
	} else {
		l.Close()
	}
	ids := []gmailrelay.Identity{idA, idB, idA, idB}
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() {
			l, err := openWith(url, id)
			if err == nil {
				l.Close()
			}
			errs[i] = err
		})
	}
	wg.Wait()
	rec := stored(t, url)
	if rec == nil {
		t.Fatal("no identity stored")
	}
	for i, err := range errs {
		if want := ids[i] != rec.Identity; errors.Is(err, gmailrelay.ErrIdentityMismatch) != want || !want && err != nil {
			t.Errorf("replica %d with %v (stored %v): %v", i, ids[i], rec.Identity, err)
		}
	}
}

// A log migrated before the identity table existed adopts the first
// identity it is opened with, and migration 0009 fills the key index from
// the jobs already stored.
func TestOlderLogAdoptsTheIdentityAndIndexesItsKeys(t *testing.T) {
	url, _ := pgtest.SchemaURL(t)
	l, err := openWith(url, gmailrelay.Identity{})
	if err != nil {
		t.Fatal(err)
	}
	createQueued(t, l, "<job-1@old.example>", "k1")
	l.Close()
	// Back to the schema of migration 0008.
	execSQL(t, url, `DROP TABLE identity; DROP INDEX jobs_key; ALTER TABLE jobs DROP COLUMN job_key;
		DELETE FROM schema_migrations WHERE version = 9`)

	l, err = openWith(url, idA)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if j, err := l.JobByKey(context.Background(), "k1"); err != nil || j.MessageID != "<job-1@old.example>" {
		t.Errorf("JobByKey(k1) after migration 0009: %s, %v", j.MessageID, err)
	}
	if rec := stored(t, url); rec == nil || rec.Identity != idA {
		t.Errorf("stored %+v, want adopted %v", rec, idA)
	}
	if _, err := openWith(url, idB); !errors.Is(err, gmailrelay.ErrIdentityMismatch) {
		t.Errorf("open with b.example after adopting a.example: %v", err)
	}
}

func createQueued(t *testing.T, l gmailrelay.Store, id, key string) {
	t.Helper()
	_, _, err := l.Mutate(context.Background(), id, func(*gmailrelay.Job) (gmailrelay.Change, error) {
		return gmailrelay.Change{
			Job:   &gmailrelay.Job{MessageID: id, Key: key, Channel: "default", State: gmailrelay.StateQueued, CreatedAt: time.Now()},
			Lines: []gmailrelay.Line{{Kind: gmailrelay.KindReceived, State: gmailrelay.StateQueued, Channel: "default"}},
		}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Rekey refuses while a relay is connected, then records the new identity
// with the old one in Previous; the old identity no longer opens the log.
func TestRekeyDatabase(t *testing.T) {
	ctx := context.Background()
	url, _ := pgtest.SchemaURL(t)
	a, err := openWith(url, idA)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.LiveReplicas(ctx); err != nil { // as a relay does at start
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	if _, _, _, err := pglog.Rekey(ctx, url, idB, now); !errors.Is(err, gmailrelay.ErrLocked) {
		t.Errorf("rekey with a relay connected: %v; want ErrLocked", err)
	}
	a.Close()
	before, after, changed, err := pglog.Rekey(ctx, url, idB, now)
	if err != nil || !changed || before == nil || before.Identity != idA || after.Identity != idB {
		t.Fatalf("rekey: %+v → %+v %t %v", before, after, changed, err)
	}
	rec := stored(t, url)
	if rec.Identity != idB || len(rec.Previous) != 1 || rec.Previous[0].Identity != idA || !rec.Previous[0].Until.Equal(now) {
		t.Errorf("stored %+v; want b.example with a.example until %v before it", rec, now)
	}
	if _, err := openWith(url, idA); !errors.Is(err, gmailrelay.ErrIdentityMismatch) {
		t.Errorf("open with the old identity: %v", err)
	}
	if _, _, changed, err := pglog.Rekey(ctx, url, idB, now); err != nil || changed {
		t.Errorf("rekey to the same identity: %t %v; want unchanged", changed, err)
	}
}

// Rekey neither creates nor migrates a log.
func TestRekeyDatabaseRefusesWhatIsNotALog(t *testing.T) {
	url, schema := pgtest.SchemaURL(t)
	if _, _, _, err := pglog.Rekey(context.Background(), url, idB, time.Now()); err == nil || !strings.Contains(err.Error(), "not a gmailrelay log") {
		t.Errorf("rekey of an empty schema: %v", err)
	}
	if n := tablesIn(t, pgtest.URL(t), schema); n != 0 {
		t.Errorf("rekey left %d tables in the empty schema", n)
	}
}
