package acceptlog_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay/acceptlog"
	"github.com/gmailrelay/gmailrelay/acceptlog/logtest"
	bolt "go.etcd.io/bbolt"
)

func TestBackupWhileOpenAndOfflineCopies(t *testing.T) {
	ctx := context.Background()
	l, path := mustOpen(t)
	for _, id := range []string{"<1@x.example>", "<2@x.example>"} {
		logtest.SentJob(t, l, id, t0)
	}
	var buf bytes.Buffer
	n, err := l.Backup(ctx, &buf, nil)
	if err != nil || n != int64(buf.Len()) || n == 0 {
		t.Fatalf("Backup = %d, %v (buffer %d bytes)", n, err, buf.Len())
	}
	dir := t.TempDir()
	copyPath := filepath.Join(dir, "copy.db")
	if err := os.WriteFile(copyPath, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	openCheck(t, copyPath, 2)

	// The open log's file is locked: offline tools say so and point at the URL.
	if _, err := acceptlog.BackupFile(path, filepath.Join(dir, "locked.db")); err == nil || !strings.Contains(err.Error(), "--url") {
		t.Fatalf("BackupFile of an open log: err %v, want a lock error pointing at backup --url", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	offline := filepath.Join(dir, "offline.db")
	if n, err := acceptlog.BackupFile(path, offline); err != nil || n == 0 {
		t.Fatalf("BackupFile = %d, %v", n, err)
	}
	if _, err := acceptlog.BackupFile(path, offline); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Fatalf("BackupFile over an existing file: err %v, want 'exists'", err)
	}
	compacted := filepath.Join(dir, "compact.db")
	if _, _, err := acceptlog.Compact(path, compacted); err != nil {
		t.Fatalf("Compact: %v", err)
	}
	openCheck(t, offline, 2)
	openCheck(t, compacted, 2)
	if _, err := acceptlog.BackupFile(filepath.Join(dir, "missing.db"), filepath.Join(dir, "x.db")); err == nil {
		t.Fatalf("BackupFile of a missing file succeeded")
	}
	if _, err := os.Stat(filepath.Join(dir, "x.db")); !os.IsNotExist(err) {
		t.Fatalf("a failed backup left a file behind: %v", err)
	}
}

// openCheck opens the log file at path, checks its invariants and that it
// holds jobs jobs, and closes it.
func openCheck(t *testing.T, path string, jobs int) {
	t.Helper()
	ctx := context.Background()
	c := mustOpenPath(t, path)
	if err := c.Check(ctx); err != nil {
		t.Fatalf("%s: %v", filepath.Base(path), err)
	}
	if st, _ := c.Stats(ctx); st.Jobs != jobs {
		t.Fatalf("%s holds %d jobs, want %d", filepath.Base(path), st.Jobs, jobs)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}

// A file written before the prunable index existed gets it on Open.
func TestOpenBackfillsThePrunableIndex(t *testing.T) {
	ctx := context.Background()
	l, path := mustOpen(t)
	logtest.SentJob(t, l, "<old@x.example>", t0.Add(-48*time.Hour))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := acceptlog.ToFormat1(path); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error { return tx.DeleteBucket([]byte("prunable")) }); err != nil {
		t.Fatal(err)
	}
	_ = db.Close()
	l = mustOpenPath(t, path)
	if err := l.Check(ctx); err != nil {
		t.Fatalf("Check after the backfill: %v", err)
	}
	if res, err := l.Prune(ctx, t0, 0); err != nil || res.Jobs != 1 {
		t.Fatalf("Prune after the backfill = %+v, %v; want the old job", res, err)
	}
}

// A pruned job whose kept lines skip states (sent, then a human's abandon
// after a duplicate review) still passes Check: the steps are gone, not
// wrong.
