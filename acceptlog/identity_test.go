package acceptlog_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/acceptlog"
)

var (
	idA = gmailrelay.Identity{MsgIDDomain: "a.example"}
	idB = gmailrelay.Identity{MsgIDDomain: "b.example"}
)

func TestCheckIdentityRules(t *testing.T) {
	now := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	withSecret := gmailrelay.Identity{MsgIDDomain: "a.example", SecretFingerprint: gmailrelay.SecretFingerprint([]byte("0123456789abcdef"))}
	storedA := &gmailrelay.IdentityRecord{Identity: idA, Since: now.Add(-time.Hour)}
	tests := []struct {
		name     string
		stored   *gmailrelay.IdentityRecord
		want     gmailrelay.Identity
		record   bool
		mismatch bool
	}{
		{"zero checks nothing", storedA, gmailrelay.Identity{}, false, false},
		{"zero on a log without one", nil, gmailrelay.Identity{}, false, false},
		{"none stored: recorded", nil, idA, true, false},
		{"same: nothing to do", storedA, idA, false, false},
		{"other domain: refused", storedA, idB, false, true},
		{"a secret where none was: refused", storedA, withSecret, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec, err := gmailrelay.CheckIdentity(tt.stored, tt.want, now)
			if got := rec != nil; got != tt.record {
				t.Errorf("record = %+v, want one: %t", rec, tt.record)
			}
			if rec != nil && (rec.Identity != tt.want || !rec.Since.Equal(now)) {
				t.Errorf("record = %+v, want %v since %v", rec, tt.want, now)
			}
			if got := errors.Is(err, gmailrelay.ErrIdentityMismatch); got != tt.mismatch {
				t.Errorf("err = %v, mismatch want %t", err, tt.mismatch)
			}
			if !tt.mismatch && err != nil {
				t.Errorf("err = %v", err)
			}
		})
	}
}

func TestMismatchNamesBothIdentitiesAndRekey(t *testing.T) {
	_, err := gmailrelay.CheckIdentity(&gmailrelay.IdentityRecord{Identity: idA}, idB, time.Now())
	for _, want := range []string{`"a.example"`, `"b.example"`, "gmailrelay rekey", "--msgid-domain b.example", "new log"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message %q does not say %q", err, want)
		}
	}
	sec := gmailrelay.Identity{MsgIDDomain: "a.example", SecretFingerprint: "00112233445566ff"}
	_, err = gmailrelay.CheckIdentity(&gmailrelay.IdentityRecord{Identity: idA}, sec, time.Now())
	if !strings.Contains(err.Error(), "00112233445566ff") || !strings.Contains(err.Error(), "--msgid-secret-file") {
		t.Errorf("message %q does not name the fingerprint and the secret flag", err)
	}
}

func TestSecretFingerprintIsSHA256Prefix(t *testing.T) {
	// sha256("abc") = ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad
	if got := gmailrelay.SecretFingerprint([]byte("abc")); got != "ba7816bf8f01cfea" {
		t.Errorf("fingerprint %q", got)
	}
}

func TestRekeyedKeepsThePreviousIdentities(t *testing.T) {
	t1 := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	rec, changed, err := gmailrelay.Rekeyed(nil, idA, t1)
	if err != nil || !changed || rec.Identity != idA || len(rec.Previous) != 0 {
		t.Fatalf("first: %+v %t %v", rec, changed, err)
	}
	t2 := t1.Add(time.Hour)
	rec2, changed, err := gmailrelay.Rekeyed(&rec, idB, t2)
	if err != nil || !changed || rec2.Identity != idB || !rec2.Since.Equal(t2) {
		t.Fatalf("second: %+v %t %v", rec2, changed, err)
	}
	if len(rec2.Previous) != 1 || rec2.Previous[0].Identity != idA || !rec2.Previous[0].Until.Equal(t2) {
		t.Errorf("previous = %+v, want a.example until %v", rec2.Previous, t2)
	}
	same, changed, err := gmailrelay.Rekeyed(&rec2, idB, t2.Add(time.Hour))
	if err != nil || changed || !same.Since.Equal(t2) {
		t.Errorf("rekey to the same: %+v %t %v; want unchanged", same, changed, err)
	}
	if _, _, err := gmailrelay.Rekeyed(&rec2, gmailrelay.Identity{MsgIDDomain: "bad domain"}, t2); err == nil {
		t.Error("a domain with a space was accepted")
	}
}

// openID opens the log at path with identity id.
func openID(path string, id gmailrelay.Identity) (*acceptlog.Log, error) {
	return acceptlog.Open(path, acceptlog.Options{Identity: id})
}

func storedIdentity(t *testing.T, path string) *gmailrelay.IdentityRecord {
	t.Helper()
	l, err := acceptlog.Open(path, acceptlog.Options{})
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

// keyedJob creates a queued job id with key in l.
func keyedJob(t *testing.T, l gmailrelay.Store, id, key string) {
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

// A new file stores the identity it was created with; the same identity
// opens it again, and so does none (tools); another is refused naming
// both, and the refusal writes nothing to the file.
func TestNewFileStoresItsIdentityAndRefusesAnother(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.db")
	l, err := openID(path, idA)
	if err != nil {
		t.Fatal(err)
	}
	keyedJob(t, l, "<job-1@a.example>", "k1")
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if rec := storedIdentity(t, path); rec == nil || rec.Identity != idA {
		t.Fatalf("stored identity %+v, want %v", rec, idA)
	}
	for _, id := range []gmailrelay.Identity{idA, {}} {
		l, err := openID(path, id)
		if err != nil {
			t.Fatalf("open with %v: %v", id, err)
		}
		l.Close()
	}
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, err = openID(path, idB)
	if !errors.Is(err, gmailrelay.ErrIdentityMismatch) || !strings.Contains(err.Error(), "a.example") || !strings.Contains(err.Error(), "b.example") {
		t.Fatalf("open with b.example: %v; want a mismatch naming both domains", err)
	}
	after, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Error("the refused open changed the file")
	}
	if _, err := os.Stat(path + "-journal"); err == nil {
		t.Error("the refused open left a journal")
	}
}

// dropBuckets makes the file at path look like one written before the
// identity and the key index existed.
func dropBuckets(t *testing.T, path string, names ...string) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bolt.Tx) error {
		for _, n := range names {
			if err := tx.DeleteBucket([]byte(n)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A file written before identities were kept adopts the configured one
// (once: another is refused after) and gets its key index filled, so its
// jobs are found by key; the operator is told.
func TestOlderFileAdoptsTheIdentityAndIndexesItsKeys(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.db")
	l, err := acceptlog.Open(path, acceptlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	keyedJob(t, l, "<job-1@old.example>", "k1")
	keyedJob(t, l, "<raw@x>", "<raw@x>")
	l.Close()
	if err := acceptlog.ToFormat1(path); err != nil {
		t.Fatal(err)
	}
	dropBuckets(t, path, "keys")

	var notes []string
	l, err = acceptlog.Open(path, acceptlog.Options{Identity: idA, Logf: func(f string, a ...any) {
		notes = append(notes, f)
		for _, v := range a {
			notes = append(notes, v.(string))
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	j, err := l.JobByKey(context.Background(), "k1")
	if err != nil || j.MessageID != "<job-1@old.example>" {
		t.Errorf("JobByKey(k1) after the backfill: %s, %v", j.MessageID, err)
	}
	if err := l.Check(context.Background()); err != nil {
		t.Error(err)
	}
	l.Close()
	if all := strings.Join(notes, " "); !strings.Contains(all, "key index") || !strings.Contains(all, "a.example") {
		t.Errorf("the operator was told %q; want the key index and the adopted identity", all)
	}
	if rec := storedIdentity(t, path); rec == nil || rec.Identity != idA {
		t.Errorf("stored identity %+v, want adopted %v", rec, idA)
	}
	if _, err := openID(path, idB); !errors.Is(err, gmailrelay.ErrIdentityMismatch) {
		t.Errorf("open with b.example after adopting a.example: %v; want a mismatch", err)
	}
}

// Rekey records the new identity and keeps the old in Previous; the new
// one opens the file and the old no longer does; jobs of either identity
// are found by key.
func TestRekeyFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.db")
	l, err := openID(path, idA)
	if err != nil {
		t.Fatal(err)
	}
	keyedJob(t, l, "<job-1@a.example>", "k1")
	l.Close()
	now := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	before, after, changed, err := acceptlog.Rekey(path, idB, now)
	if err != nil || !changed || before == nil || before.Identity != idA || after.Identity != idB {
		t.Fatalf("rekey: %+v → %+v, %t, %v", before, after, changed, err)
	}
	rec := storedIdentity(t, path)
	if rec.Identity != idB || len(rec.Previous) != 1 || rec.Previous[0].Identity != idA || !rec.Previous[0].Until.Equal(now) {
		t.Errorf("stored %+v; want b.example with a.example until %v before it", rec, now)
	}
	if _, err := openID(path, idA); !errors.Is(err, gmailrelay.ErrIdentityMismatch) {
		t.Errorf("open with the old identity: %v; want a mismatch", err)
	}
	l, err = openID(path, idB)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	keyedJob(t, l, "<job-2@b.example>", "k2")
	for key, want := range map[string]string{"k1": "<job-1@a.example>", "k2": "<job-2@b.example>"} {
		if j, err := l.JobByKey(context.Background(), key); err != nil || j.MessageID != want {
			t.Errorf("JobByKey(%s) = %s, %v; want %s", key, j.MessageID, err, want)
		}
	}
	if _, _, changed, err := acceptlog.Rekey(path, idB, now); !errors.Is(err, gmailrelay.ErrLocked) || changed {
		t.Errorf("rekey of a file a relay holds: %t, %v; want ErrLocked", changed, err)
	}
}

// Rekey never creates a file or makes one a log, and leaves what it
// refuses as it was.
func TestRekeyRefusesWhatIsNotALog(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.db")
	if _, _, _, err := acceptlog.Rekey(missing, idB, time.Now()); err == nil {
		t.Error("rekey of a missing file succeeded")
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("rekey created %s", missing)
	}
	empty := filepath.Join(dir, "empty.db")
	text := filepath.Join(dir, "text.db")
	bare := filepath.Join(dir, "bare.db")
	os.WriteFile(empty, nil, 0o600)
	os.WriteFile(text, bytes.Repeat([]byte("not a log\n"), 2000), 0o600)
	db, err := bolt.Open(bare, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket([]byte("other")); return err })
	db.Close()
	for _, path := range []string{empty, text, bare} {
		before, _ := os.ReadFile(path)
		_, _, _, err := acceptlog.Rekey(path, idB, time.Now())
		if err == nil || !strings.Contains(err.Error(), "not a") {
			t.Errorf("rekey %s: %v; want a refusal", filepath.Base(path), err)
		}
		if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
			t.Errorf("rekey %s changed the file", filepath.Base(path))
		}
	}
	path := filepath.Join(dir, "r.db")
	l, err := openID(path, idA)
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	if _, _, _, err := acceptlog.Rekey(path, gmailrelay.Identity{}, time.Now()); err == nil {
		t.Error("rekey to an empty identity succeeded")
	}
}
