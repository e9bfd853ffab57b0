package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/acceptlog"
)

// TestServeRefusesANonLogOrADamagedFile runs the real binary: serve --data
// on an empty file, on a bbolt file without the log's buckets, or on a
// log whose jobs page is overwritten with 0xff exits 1 naming why (and,
// for the damage, the command that names each damaged record), without a
// Go panic in its output, and leaves the file byte for byte as it was
// with nothing beside it. (serve made a new empty log of the first two,
// and died with a stack trace on the third.)
func TestServeRefusesANonLogOrADamagedFile(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "gmailrelay")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	tests := []struct {
		name string
		make func(t *testing.T, path string)
		says []string
	}{
		{"empty file", func(t *testing.T, path string) {
			if err := os.WriteFile(path, nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}, []string{"not a gmailrelay log (empty file)"}},
		{"bbolt file without the log's buckets", func(t *testing.T, path string) {
			db, err := bolt.Open(path, 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			err = db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket([]byte("other")); return err })
			if cerr := db.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				t.Fatal(err)
			}
		}, []string{"not a gmailrelay log (a bbolt file without the log's buckets)"}},
		{"damaged jobs page", func(t *testing.T, path string) {
			writeJobs(t, path, 80)
			ps, leaf := jobsLeaf(t, path)
			f, err := os.OpenFile(path, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			_, err = f.WriteAt(bytes.Repeat([]byte{0xff}, int(ps)), leaf*ps)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				t.Fatal(err)
			}
		}, []string{"the log file is damaged", "bucket jobs: page", "gmailrelay check --data FILE", "the file was not changed"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "r.db")
			tc.make(t, path)
			before, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, "serve", "--addr", "127.0.0.1:0", "--data", path, "--log-level", "error")
			cmd.Env = append(os.Environ(), "GMAILRELAY_API_TOKEN=", "GMAILRELAY_ADMIN_TOKEN=")
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 1 {
				t.Errorf("serve exited with %v, want exit status 1", err)
			}
			for _, s := range append(tc.says, path) {
				if !strings.Contains(string(out), s) {
					t.Errorf("serve's output does not say %q:\n%s", s, out)
				}
			}
			for _, s := range []string{"panic", "goroutine", "listening on"} {
				if strings.Contains(string(out), s) {
					t.Errorf("serve's output says %q:\n%s", s, out)
				}
			}
			after, err := os.ReadFile(path)
			if err != nil || !bytes.Equal(before, after) {
				t.Errorf("the file changed (%d bytes, was %d; %v)", len(after), len(before), err)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 1 {
				t.Errorf("%d files in the data directory, want the data file alone", len(entries))
			}
		})
	}
}

// writeJobs writes a closed log at path holding n jobs, each with a raw
// message.
func writeJobs(t *testing.T, path string, n int) {
	t.Helper()
	l, err := acceptlog.Open(path, acceptlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for i := range n {
		id := fmt.Sprintf("<job-%03d@damage.example>", i)
		_, _, err := l.Mutate(context.Background(), id, func(*gmailrelay.Job) (gmailrelay.Change, error) {
			j := gmailrelay.Job{MessageID: id, Key: "key-" + id, Channel: "default", Mailbox: "default",
				Fingerprint: "fp-" + id, State: gmailrelay.StateForwarding, Attempts: 1, CreatedAt: at, UpdatedAt: at}
			return gmailrelay.Change{Job: &j, Raw: bytes.Repeat([]byte("m"), 500), Lines: []gmailrelay.Line{
				{Kind: gmailrelay.KindReceived, Attempt: 1, Channel: "default"},
				{Kind: gmailrelay.KindForwarding, Attempt: 1, State: gmailrelay.StateForwarding},
			}}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

// jobsLeaf returns the page size of the closed log at path and a leaf
// page of its jobs bucket: the root when it is a leaf, else the root's
// first child.
func jobsLeaf(t *testing.T, path string) (int64, int64) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	var root int64
	_ = db.View(func(tx *bolt.Tx) error {
		root = int64(tx.Bucket([]byte("jobs")).Root())
		return nil
	})
	ps := int64(db.Info().PageSize)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if root == 0 {
		t.Fatal("the jobs bucket is inline")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	p := b[root*ps:]
	if binary.LittleEndian.Uint16(p[8:]) == 0x01 { // a branch page: its first element's child
		return ps, int64(binary.LittleEndian.Uint64(p[16+8:]))
	}
	return ps, root
}
