package pglog_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/pglog"
)

// Options.Schema is a name as CREATE SCHEMA takes it quoted: one with
// capitals works (before, the search_path was set unquoted, folded to
// lower case, and Open failed with "no schema has been selected").
func TestOpenSchemaWithCapitals(t *testing.T) {
	ctx := context.Background()
	url := databaseURL(t)
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	schema := "GmailRelay_Test_" + hex.EncodeToString(b)
	t.Cleanup(func() {
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	l := open(t, url, schema, nil)
	if _, _, err := l.Mutate(ctx, "<caps@x>", func(*gmailrelay.Job) (gmailrelay.Change, error) {
		return gmailrelay.Change{
			Job:   &gmailrelay.Job{MessageID: "<caps@x>", Channel: "default", State: gmailrelay.StateQueued},
			Lines: []gmailrelay.Line{{Kind: gmailrelay.KindReceived, State: gmailrelay.StateQueued, Channel: "default"}},
		}, nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	again, err := pglog.Open(ctx, url, pglog.Options{Schema: schema, NoMigrate: true})
	if err != nil {
		t.Fatalf("open the schema again: %v", err)
	}
	defer again.Close()
	if j, err := again.Get(ctx, "<caps@x>"); err != nil || j.State != gmailrelay.StateQueued {
		t.Errorf("the job written in schema %s: %s, %v; want queued", schema, j.State, err)
	}
}
