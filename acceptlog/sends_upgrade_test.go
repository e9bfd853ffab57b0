package acceptlog_test

import (
	"bytes"
	"context"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/gmailrelay/gmailrelay/acceptlog"
	"github.com/gmailrelay/gmailrelay/acceptlog/logtest"
)

// sendKeys returns the keys of the send index of the closed log at path.
func sendKeys(t *testing.T, path string) [][]byte {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var keys [][]byte
	err = db.View(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("sends")).ForEach(func(k, _ []byte) error {
			keys = append(keys, bytes.Clone(k))
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// dropSendIndex deletes the send index of the closed log at path, as a
// file written by a gmailrelay before the index existed has none.
func dropSendIndex(t *testing.T, path string) {
	t.Helper()
	if err := acceptlog.ToFormat1(path); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error { return tx.DeleteBucket([]byte("sends")) }); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// A file written before the send index existed gets it filled on Open from
// the forwarding lines of the last 48 h, exactly as the write path would
// have: the daily budget counts the sends made before the upgrade, and the
// relay cannot send a second day's limit on top of them.
func TestOpenFillsSendIndexOfOlderFile(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "accept.db")
	l := openAtT0(t, path)
	// Lines in time order, as the relay writes them; the two oldest are
	// older than the index keeps entries for, and are not indexed again.
	logtest.Forward(t, l, "<old@x.example>", "default", t0.Add(-60*time.Hour))
	logtest.Forward(t, l, "<edge@x.example>", "default", t0.Add(-48*time.Hour-30*time.Minute))
	logtest.Forward(t, l, "<yesterday@x.example>", "default", t0.Add(-30*time.Hour))
	logtest.Forward(t, l, "<other@x.example>", "other", t0.Add(-2*time.Hour))
	for _, id := range []string{"<1@x.example>", "<2@x.example>", "<3@x.example>"} {
		logtest.SentJob(t, l, id, t0.Add(-time.Hour))
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	var want [][]byte
	for _, k := range sendKeys(t, path) {
		if !bytes.Contains(k, []byte("<old@")) && !bytes.Contains(k, []byte("<edge@")) {
			want = append(want, k)
		}
	}
	if len(want) != 5 {
		t.Fatalf("%d send-index entries in the last 48 h before the upgrade, want 5", len(want))
	}
	dropSendIndex(t, path)

	l = openAtT0(t, path)
	got, err := l.SendTimes(ctx, "default", t0.Add(-24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Errorf("sends of default in the last 24 h after the upgrade = %d, want 3", len(got))
	}
	if err := l.Check(ctx); err != nil {
		t.Errorf("check: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if got := sendKeys(t, path); !reflect.DeepEqual(got, want) {
		t.Errorf("send index after the upgrade:\n%q\nwant the write path's entries of the last 48 h:\n%q", got, want)
	}
}

// A file whose send index exists is not filled again: a reopen leaves the
// index as it is (entries PruneSends dropped stay dropped).
func TestOpenKeepsExistingSendIndex(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "accept.db")
	l := openAtT0(t, path)
	logtest.SentJob(t, l, "<1@x.example>", t0.Add(-time.Hour))
	if n, err := l.PruneSends(ctx, t0); n != 1 || err != nil {
		t.Fatalf("PruneSends = %d, %v; want 1", n, err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openAtT0(t, path)
	defer l.Close()
	if got, err := l.SendTimes(ctx, "default", time.Time{}); len(got) != 0 || err != nil {
		t.Errorf("SendTimes after reopen = %v, %v; want none", got, err)
	}
}

// openAtT0 opens the log at path on a clock stopped at t0.
func openAtT0(t *testing.T, path string) *acceptlog.Log {
	t.Helper()
	l, err := acceptlog.Open(path, acceptlog.Options{Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	return l
}
