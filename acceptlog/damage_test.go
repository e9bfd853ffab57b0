package acceptlog_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/acceptlog"
)

// The damage property: whatever bytes of a log file are flipped, or
// wherever it is cut, the log either refuses the file or reads exactly
// what it acknowledged, never panics, and never writes to a file it
// refuses or only checks.

const (
	damageWriters = 16
	damageJobs    = 6 // per writer
)

var (
	damageOnce sync.Once
	damageBase []byte            // the log file, closed
	damageWant map[string]string // what every acknowledged job reads as
	damageErr  error
)

// updateDamageFixture rewrites testdata/damage: go test ./acceptlog/ -run
// TestDamageFixture -update-damage-fixture.
var updateDamageFixture = flag.Bool("update-damage-fixture", false, "rewrite testdata/damage/base.db.gz from a new log written under load")

const damageFixture = "testdata/damage/base.db.gz"

// damagedLogBase returns the bytes of testdata/damage/base.db.gz — a log
// written by 16 concurrent writers (buildDamageBase), kept as a file so
// that a seed names the same damage on every run — and the snapshot
// (readSnapshot) of every job it acknowledged, read from the intact file.
func damagedLogBase(t testing.TB) ([]byte, map[string]string) {
	t.Helper()
	damageOnce.Do(func() {
		damageBase, damageWant, damageErr = readDamageFixture()
	})
	if damageErr != nil {
		t.Fatal(damageErr)
	}
	return damageBase, damageWant
}

func readDamageFixture() ([]byte, map[string]string, error) {
	f, err := os.Open(damageFixture)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, nil, err
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		return nil, nil, err
	}
	dir, err := os.MkdirTemp("", "damage-base-")
	if err != nil {
		return nil, nil, err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "accept.db")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return nil, nil, err
	}
	want, err := snapshotFile(path)
	if err != nil {
		return nil, nil, err
	}
	if len(want) != damageWriters*damageJobs {
		return nil, nil, fmt.Errorf("%s holds %d jobs, want the %d acknowledged", damageFixture, len(want), damageWriters*damageJobs)
	}
	return b, want, nil
}

// snapshotFile checks the closed log at path (CheckFull) and returns its
// snapshot.
func snapshotFile(path string) (map[string]string, error) {
	ctx := context.Background()
	ro, err := acceptlog.OpenReadOnly(path)
	if err != nil {
		return nil, err
	}
	defer ro.Close()
	if err := ro.CheckFull(ctx); err != nil {
		return nil, err
	}
	return readSnapshot(ctx, ro)
}

// TestDamageFixture writes a log under load as the fixture was written:
// every acknowledged job is in it and nothing else. With
// -update-damage-fixture it replaces the fixture.
func TestDamageFixture(t *testing.T) {
	path := filepath.Join(t.TempDir(), "accept.db")
	acked, err := buildDamageBase(path)
	if err != nil {
		t.Fatal(err)
	}
	got, err := snapshotFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(acked) {
		t.Errorf("the log holds %d jobs, %d were acknowledged", len(got), len(acked))
	}
	for id := range acked {
		if _, ok := got[id]; !ok {
			t.Errorf("acknowledged job %s is not in the log", id)
		}
	}
	if !*updateDamageFixture {
		return
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(readFile(t, path)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(damageFixture), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, damageFixture, buf.Bytes())
}

// buildDamageBase writes a closed log at path: 16 concurrent writers,
// each job a forward with its raw message then an outcome, and a prune of
// some of them (their raw messages and detail lines go, their pages are
// freed). It returns the ids of the jobs acknowledged.
func buildDamageBase(path string) (map[string]bool, error) {
	ctx := context.Background()
	l, err := acceptlog.Open(path, acceptlog.Options{Now: func() time.Time { return t0 }})
	if err != nil {
		return nil, err
	}
	defer l.Close()
	var mu sync.Mutex
	acked := map[string]bool{}
	errs := make(chan error, damageWriters)
	var wg sync.WaitGroup
	for w := range damageWriters {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for i := range damageJobs {
				id := fmt.Sprintf("<w%02d-%02d@damage.example>", w, i)
				at := t0.Add(time.Duration(i) * time.Minute)
				if err := damageJob(ctx, l, id, at, rng); err != nil {
					errs <- err
					return
				}
				mu.Lock()
				acked[id] = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		return nil, err
	}
	if _, err := l.Prune(ctx, t0.Add(time.Hour), 20); err != nil {
		return nil, err
	}
	return acked, l.Close()
}

// damageJob writes one job as the relay does: accepted (forwarding, with
// its raw message), then answered (sent, unknown or failed).
func damageJob(ctx context.Context, l *acceptlog.Log, id string, at time.Time, rng *rand.Rand) error {
	raw := bytes.Repeat([]byte{byte('a' + rng.IntN(26))}, 300+rng.IntN(1800))
	_, _, err := l.Mutate(ctx, id, func(*gmailrelay.Job) (gmailrelay.Change, error) {
		j := gmailrelay.Job{MessageID: id, Key: "key-" + id, Channel: "default", Mailbox: "default",
			Fingerprint: "fp-" + id, State: gmailrelay.StateForwarding, Attempts: 1, CreatedAt: at, UpdatedAt: at}
		return gmailrelay.Change{Job: &j, Raw: raw, Lines: []gmailrelay.Line{
			{Kind: gmailrelay.KindReceived, Attempt: 1, Channel: "default", Time: at},
			{Kind: gmailrelay.KindForwarding, Attempt: 1, State: gmailrelay.StateForwarding, Time: at},
		}}, nil
	})
	if err != nil {
		return err
	}
	outcome := rng.IntN(4)
	_, _, err = l.Mutate(ctx, id, func(cur *gmailrelay.Job) (gmailrelay.Change, error) {
		cur.UpdatedAt = at
		switch outcome {
		case 0:
			cur.State, cur.AmbiguousAt, cur.NextCheckAt = gmailrelay.StateUnknown, at, at.Add(time.Hour)
			return gmailrelay.Change{Job: cur, Lines: []gmailrelay.Line{{Kind: gmailrelay.KindAmbiguous, Attempt: 1, State: gmailrelay.StateUnknown, Time: at}}}, nil
		case 1:
			cur.State = gmailrelay.StateFailed
			return gmailrelay.Change{Job: cur, Lines: []gmailrelay.Line{{Kind: gmailrelay.KindNotSent, Attempt: 1, State: gmailrelay.StateFailed, Time: at}}}, nil
		default:
			cur.State, cur.Effects, cur.GmailID = gmailrelay.StateSent, 1, "g-"+id
			return gmailrelay.Change{Job: cur, Lines: []gmailrelay.Line{{Kind: gmailrelay.KindEffect, Attempt: 1, State: gmailrelay.StateSent,
				Source: gmailrelay.SourceResponse, GmailID: "g-" + id, Time: at}}}, nil
		}
	})
	return err
}

// readSnapshot reads every job of l the ways the relay does — by a walk
// of the jobs (List), by its key (Get), its lines and its raw message —
// and renders each job as one string. Reading by key goes through the
// tree's branch pages, which a walk does not compare.
func readSnapshot(ctx context.Context, l *acceptlog.Log) (map[string]string, error) {
	snap := map[string]string{}
	after := ""
	for {
		jobs, next, err := l.List(ctx, gmailrelay.ListOptions{After: after, Limit: 1000})
		if err != nil {
			return nil, err
		}
		for _, j := range jobs {
			got, err := l.Get(ctx, j.MessageID)
			if err != nil {
				return nil, fmt.Errorf("get %s: %w", j.MessageID, err)
			}
			lines, err := l.JobLines(ctx, j.MessageID)
			if err != nil {
				return nil, fmt.Errorf("lines of %s: %w", j.MessageID, err)
			}
			raw, err := l.Raw(ctx, j.MessageID)
			if err != nil && !errors.Is(err, gmailrelay.ErrNotFound) {
				return nil, fmt.Errorf("raw of %s: %w", j.MessageID, err)
			}
			snap[j.MessageID] = fmt.Sprintf("%+v\nget: %+v\n%d lines: %+v\nraw %x", j, got, len(lines), lines, sha256.Sum256(raw))
		}
		if next == "" {
			return snap, nil
		}
		after = next
	}
}

// snapshotDiff says how got differs from want ("" when equal).
func snapshotDiff(want, got map[string]string) string {
	var out []string
	for id, w := range want {
		switch g, ok := got[id]; {
		case !ok:
			out = append(out, "job "+id+" missing")
		case g != w:
			out = append(out, fmt.Sprintf("job %s reads\n%s\nwant\n%s", id, g, w))
		}
	}
	for id := range got {
		if _, ok := want[id]; !ok {
			out = append(out, "job "+id+" was never acknowledged")
		}
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}

// damage is what a case does to the file: flips (offset, xor) or a cut.
type damage struct {
	flips [][2]int
	cut   int // the file's new length; -1 for none
}

func (d damage) String() string {
	if d.cut >= 0 {
		return fmt.Sprintf("cut at %d", d.cut)
	}
	var s []string
	for _, f := range d.flips {
		s = append(s, fmt.Sprintf("%d^%#02x", f[0], f[1]))
	}
	return "flip " + strings.Join(s, ", ")
}

// damageFor derives a case from seed: one time in five a cut at a random
// offset, otherwise 1 to 4 bytes flipped anywhere, each by a single bit
// (a page id off by a power of two, a length one bit longer) or by a
// random non-zero byte.
func damageFor(seed uint64, size int) damage {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	if rng.IntN(5) == 0 {
		return damage{cut: rng.IntN(size)}
	}
	d := damage{cut: -1}
	for range 1 + rng.IntN(4) {
		x := 1 << rng.IntN(8)
		if rng.IntN(2) == 0 {
			x = 1 + rng.IntN(255)
		}
		d.flips = append(d.flips, [2]int{rng.IntN(size), x})
	}
	return d
}

func (d damage) apply(b []byte) []byte {
	b = bytes.Clone(b)
	if d.cut >= 0 {
		return b[:d.cut]
	}
	for _, f := range d.flips {
		b[f[0]] ^= byte(f[1])
	}
	return b
}

// checkDamage runs one case: the damaged file is checked (OpenReadOnly
// and CheckFull) and opened (Open); each either refuses it or reads every
// acknowledged job as it was written. A refusal and a check leave the
// file's bytes, and its directory, as they were.
func checkDamage(t *testing.T, seed uint64) {
	t.Helper()
	base, want := damagedLogBase(t)
	d := damageFor(seed, len(base))
	damaged := d.apply(base)
	dir := t.TempDir()
	path := filepath.Join(dir, "accept.db")
	if err := os.WriteFile(path, damaged, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	unchanged := func(after string) {
		t.Helper()
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("seed %d (%s): after %s: %v", seed, d, after, err)
		}
		if !bytes.Equal(got, damaged) {
			t.Errorf("seed %d (%s): %s changed the file (%d bytes, was %d)", seed, d, after, len(got), len(damaged))
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 1 {
			var names []string
			for _, e := range entries {
				names = append(names, e.Name())
			}
			t.Errorf("seed %d (%s): after %s the directory holds %v, want the file alone", seed, d, after, names)
		}
	}

	// gmailrelay check: OpenReadOnly, CheckFull, the jobs.
	if ro, err := acceptlog.OpenReadOnly(path); err == nil {
		cerr := ro.CheckFull(ctx)
		got, rerr := readSnapshot(ctx, ro)
		_ = ro.Close()
		if cerr == nil {
			if rerr != nil {
				t.Errorf("seed %d (%s): check passed, but reading the jobs fails: %v", seed, d, rerr)
			} else if diff := snapshotDiff(want, got); diff != "" {
				t.Errorf("seed %d (%s): check passed, but the jobs differ from those acknowledged:\n%s", seed, d, diff)
			}
		}
	}
	unchanged("check")

	// gmailrelay serve: Open.
	l, err := acceptlog.Open(path, acceptlog.Options{Now: func() time.Time { return t0 }})
	if err != nil {
		unchanged("a refused Open")
		return
	}
	got, rerr := readSnapshot(ctx, l)
	if cerr := l.Close(); cerr != nil {
		t.Errorf("seed %d (%s): close: %v", seed, d, cerr)
	}
	if rerr != nil {
		t.Errorf("seed %d (%s): Open accepted the file, but reading the jobs fails: %v", seed, d, rerr)
	} else if diff := snapshotDiff(want, got); diff != "" {
		t.Errorf("seed %d (%s): Open accepted the file, but the jobs differ from those acknowledged:\n%s", seed, d, diff)
	}
}

// damageSeeds are cases kept because they broke the property: a branch
// page's key flipped out of the range of its child's keys, which a walk
// of the tree (Check) does not notice but a lookup by key does (the job's
// lines were "not in the log").
var damageSeeds = []uint64{1621, 6480}

// TestDamagedLogProperty runs FuzzDamagedLog's check for 300 seeds (and
// the kept ones), so a plain go test exercises it.
func TestDamagedLogProperty(t *testing.T) {
	seeds := append([]uint64{}, damageSeeds...)
	n := uint64(300)
	if testing.Short() {
		n = 60
	}
	for s := range n {
		seeds = append(seeds, 1000+s)
	}
	for _, s := range seeds {
		checkDamage(t, s)
	}
}

// FuzzDamagedLog: go test -fuzz FuzzDamagedLog ./acceptlog/ damages the
// log in ways derived from the fuzzed seed (damageFor).
func FuzzDamagedLog(f *testing.F) {
	for _, s := range damageSeeds {
		f.Add(s)
	}
	f.Add(uint64(1))
	f.Fuzz(func(t *testing.T, seed uint64) { checkDamage(t, seed) })
}

// pageOf returns the page size of the closed log at path and the root
// page of its bucket name.
func pageOf(t *testing.T, path, name string) (int64, int64) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var root int64
	_ = db.View(func(tx *bolt.Tx) error {
		root = int64(tx.Bucket([]byte(name)).Root())
		return nil
	})
	if root == 0 {
		t.Fatalf("bucket %s is inline", name)
	}
	return int64(db.Info().PageSize), root
}

// patch writes b at off in the file at path.
func patch(t *testing.T, path string, off int64, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestDamagedPagesAreRefused: damage that bbolt's reads trust is refused
// by Open and by OpenReadOnly, naming it, with the file unchanged: a
// branch key out of order, or above the keys of its child (a lookup by
// key would miss them: a job's lines, read by key, would be missing while
// a walk of the tree finds them), and a page with two type flags (bbolt
// asserts one; its free-page scan at Open runs in a goroutine of its own,
// where the assertion killed the process).
func TestDamagedPagesAreRefused(t *testing.T) {
	base, _ := damagedLogBase(t)
	tests := []struct {
		name   string
		damage func(t *testing.T, path string)
		says   string
	}{
		{"branch key out of order", func(t *testing.T, path string) {
			ps, root := pageOf(t, path, "lines")
			key := branchKey(t, path, ps, root, 1)
			patch(t, path, key.off, make([]byte, key.size))
		}, "bucket lines: key 0000000000000000 out of order"},
		{"branch key above its child's keys", func(t *testing.T, path string) {
			ps, root := pageOf(t, path, "lines")
			key := branchKey(t, path, ps, root, 1)
			// One more than the child's first key: still below the next
			// branch key, so the branch page itself is in order.
			b := readFile(t, path)[key.off : key.off+key.size]
			b[len(b)-1]++
			patch(t, path, key.off, b)
		}, "bucket lines: key"},
		{"page with two types", func(t *testing.T, path string) {
			ps, root := pageOf(t, path, "jobs")
			leaf := branchChild(t, path, ps, root, 0)
			patch(t, path, leaf*ps+8, []byte{0x12, 0x00}) // leaf | free list
		}, "bucket jobs: a page of type 0x12"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "accept.db")
			write(t, path, base)
			tc.damage(t, path)
			before := readFile(t, path)
			for _, open := range []func() (*acceptlog.Log, error){
				func() (*acceptlog.Log, error) { return acceptlog.Open(path, acceptlog.Options{}) },
				func() (*acceptlog.Log, error) { return acceptlog.OpenReadOnly(path) },
			} {
				l, err := open()
				if err == nil {
					_ = l.Close()
					t.Fatal("the damaged file was opened")
				}
				if !errors.Is(err, acceptlog.ErrDamaged) || !strings.Contains(err.Error(), tc.says) {
					t.Errorf("error = %q, want ErrDamaged saying %q", err, tc.says)
				}
				if !bytes.Equal(readFile(t, path), before) {
					t.Error("a refused open changed the file")
				}
			}
		})
	}
}

// keyAt is where a key is in a file.
type keyAt struct{ off, size int64 }

// branchKey returns where element i's key of the branch page id is.
func branchKey(t *testing.T, path string, ps, id int64, i int) keyAt {
	t.Helper()
	at := 16 + 16*i
	e := branchElement(t, path, ps, id, i)
	pos, size := binary.LittleEndian.Uint32(e), binary.LittleEndian.Uint32(e[4:])
	return keyAt{off: id*ps + int64(at) + int64(pos), size: int64(size)}
}

// branchChild returns the page element i of the branch page id leads to.
func branchChild(t *testing.T, path string, ps, id int64, i int) int64 {
	t.Helper()
	return int64(binary.LittleEndian.Uint64(branchElement(t, path, ps, id, i)[8:]))
}

// branchElement returns element i of the branch page id: pos, key size
// (uint32) and child page (uint64).
func branchElement(t *testing.T, path string, ps, id int64, i int) []byte {
	t.Helper()
	p := readFile(t, path)[id*ps : (id+1)*ps]
	if binary.LittleEndian.Uint16(p[8:]) != 0x01 || int(binary.LittleEndian.Uint16(p[10:])) < i+2 {
		t.Fatalf("page %d is not a branch page of %d elements or more", id, i+2)
	}
	return p[16+16*i : 32+16*i]
}
