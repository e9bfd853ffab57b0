package acceptlog

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// After a power loss the file holds, page by page, either what was synced
// at the last checkpoint (D0) or what the unsynced commits wrote since
// (D1), in any mix, and the journal holds every acknowledged group. In
// every mix the checkpoint's tree is intact (its meta page restored, it
// holds exactly the checkpoint's content and passes bbolt's Check), and
// recovered with the journal the mix gives exactly the live log's content:
// the pin kept the checkpoint's tree from being overwritten. Without the
// pin at least one mix fails (so the test can fail): those are checked in
// a child process, since bbolt may panic on a torn tree.
func TestJournalPowerLoss(t *testing.T) {
	setVar(t, &checkpointGroups, 1<<30) // only the checkpoints the test makes
	setVar(t, &checkpointGrowth, 1<<40)
	setVar(t, &minMapping, 8<<20) // an 8 MiB file instead of 16+ MiB
	setVar(t, &mapMargin, 0)
	for _, pinned := range []bool{true, false} {
		t.Run(fmt.Sprintf("pinned=%v", pinned), func(t *testing.T) {
			l, path, clock := newJournalLog(t)
			l.noPin = !pinned
			rng := rand.New(rand.NewPCG(21, 22))
			// A young file: few free pages, so the commits after the
			// checkpoint need the pages they free (without the pin, the
			// checkpoint's).
			workload(t, l, clock, "old", 3, rng)
			l.wmu.Lock()
			err := l.checkpoint()
			l.wmu.Unlock()
			if err != nil {
				t.Fatal(err)
			}
			d0, wantC := readFile(t, path), dumpLog(t, l)
			workload(t, l, clock, "new", 40, rng)
			if l.checkpoints.Load() != 2 {
				t.Fatalf("%d checkpoints, want the test's 2", l.checkpoints.Load())
			}
			d1, journal := readFile(t, path), readFile(t, journalPath(path))
			want := dumpLog(t, l)
			if bytes.Equal(d0, d1) {
				t.Fatal("the file did not change after the checkpoint")
			}
			ps := l.db.Info().PageSize
			d0 = append(d0, make([]byte, max(0, len(d1)-len(d0)))...) // grown: zeros before
			images := map[string][]byte{
				"D1 metas over D0": mix(d0, d1, ps, func(page int) bool { return page < 2 }),
				"all D0":           d0,
				"all D1":           d1,
			}
			for seed := range uint64(5) {
				r := rand.New(rand.NewPCG(seed, 99))
				images[fmt.Sprintf("random mix %d", seed)] = mix(d0, d1, ps, func(int) bool { return r.IntN(2) == 0 })
			}
			failed := 0
			for name, img := range images {
				p := filepath.Join(t.TempDir(), "img.db")
				writeFile(t, p, img)
				writeFile(t, journalPath(p), journal)
				if pinned {
					if err := checkImage(p, wantC, want); err != nil {
						t.Errorf("%s: %v", name, err)
					}
					continue
				}
				if err := checkInChild(t, p, wantC, want); err != nil {
					t.Logf("%s: %v", name, err)
					failed++
				}
			}
			if !pinned && failed == 0 {
				t.Errorf("no image failed without the pin: the test cannot tell the pin matters")
			}
		})
	}
}

// mix builds a crash image: each page from d1 when fromNew(page), else from
// d0.
func mix(d0, d1 []byte, ps int, fromNew func(page int) bool) []byte {
	out := bytes.Clone(d0)
	for p := 0; p*ps < len(d1); p++ {
		if fromNew(p) {
			copy(out[p*ps:], d1[p*ps:min(len(d1), (p+1)*ps)])
		}
	}
	return out
}

// checkImage checks the crash image at path (with its journal): the
// checkpoint's tree, its meta page restored in a copy, holds wantC and
// passes bbolt's Check; recovered, the image holds want.
func checkImage(path string, wantC, want dump) error {
	ckpt := path + ".ckpt"
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := os.WriteFile(ckpt, b, 0o600); err != nil {
		return err
	}
	h, _, _, err := readJournal(journalPath(path))
	if err != nil || h == nil {
		return fmt.Errorf("journal header: %v", err)
	}
	f, err := os.OpenFile(ckpt, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	err = restoreMeta(f, *h)
	_ = f.Close()
	if err != nil {
		return err
	}
	db, err := bolt.Open(ckpt, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		return fmt.Errorf("open checkpoint: %w", err)
	}
	var gotC dump
	err = db.View(func(tx *bolt.Tx) error {
		for cerr := range tx.Check() {
			return fmt.Errorf("checkpoint tree: %w", cerr)
		}
		gotC, err = dumpTx(tx)
		return err
	})
	_ = db.Close()
	if err != nil {
		return err
	}
	if d := wantC.diff(gotC); d != "" {
		return fmt.Errorf("checkpoint tree content differs: %s", d)
	}
	l, err := Open(path, Options{})
	if err != nil {
		return fmt.Errorf("recover: %w", err)
	}
	defer l.Close()
	var got dump
	err = l.db.View(func(tx *bolt.Tx) error {
		got, err = dumpTx(tx)
		return err
	})
	if err != nil {
		return err
	}
	if d := want.diff(got); d != "" {
		return fmt.Errorf("recovered content differs: %s", d)
	}
	if err := l.Check(context.Background()); err != nil {
		return fmt.Errorf("recovered log: %w", err)
	}
	return nil
}

const childEnv = "ACCEPTLOG_POWERLOSS_IMAGE"

// checkInChild runs checkImage in a child process.
func checkInChild(t *testing.T, path string, wantC, want dump) error {
	writeFile(t, path+".wantc", []byte(renderDump(wantC)))
	writeFile(t, path+".want", []byte(renderDump(want)))
	cmd := exec.Command(os.Args[0], "-test.run=^TestJournalPowerLossChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), childEnv+"="+path)
	out, err := cmd.CombinedOutput()
	if err != nil {
		line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
		return fmt.Errorf("child: %v: %s", err, line)
	}
	return nil
}

// TestJournalPowerLossChild is TestJournalPowerLoss's child process.
func TestJournalPowerLossChild(t *testing.T) {
	path := os.Getenv(childEnv)
	if path == "" {
		t.Skip("only run as TestJournalPowerLoss's child process")
	}
	if err := checkImage(path, parseDump(readFile(t, path+".wantc")), parseDump(readFile(t, path+".want"))); err != nil {
		t.Fatal(err)
	}
}

// renderDump and parseDump carry a dump to the child process.
func renderDump(d dump) string {
	b, _ := json.Marshal(d)
	return string(b)
}

func parseDump(b []byte) dump {
	var d dump
	_ = json.Unmarshal(b, &d)
	return d
}

func readFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeFile(t testing.TB, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// A commit that could grow the file past bbolt's mapping would wait for
// ever for the pin to end (a remap waits for every reader): before one,
// the log stops its journal and commits synced from then on, says so, and
// goes on writing past the first mapping with readers around.
func TestJournalStopsBeforeTheMappingEnds(t *testing.T) {
	setVar(t, &minMapping, 4<<20)
	setVar(t, &mapMargin, 0)
	path := filepath.Join(t.TempDir(), "accept.db")
	var mu sync.Mutex
	var said []string
	l, err := Open(path, Options{Logf: func(format string, args ...any) {
		mu.Lock()
		said = append(said, fmt.Sprintf(format, args...))
		mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	if l.j == nil {
		t.Fatal("no journal")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		var wg sync.WaitGroup
		errs := make(chan error, 4)
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 12 {
					id := fmt.Sprintf("<map-%d-%d@journal.example>", w, i)
					_, _, err := l.Mutate(ctx, id, func(*Job) (Change, error) {
						j := Job{MessageID: id, Channel: "default", State: StateForwarding, Attempts: 1}
						return Change{Job: &j, Raw: bytes.Repeat([]byte{'m'}, 256<<10),
							Lines: []Line{{Kind: KindForwarding, Attempt: 1, State: StateForwarding}}}, nil
					})
					if err != nil {
						errs <- err
						return
					}
					if _, err := l.Stats(ctx); err != nil { // a reader meanwhile
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		done <- <-errs
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("writes did not finish: the commit waits for the remap (deadlock)")
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() <= 4<<20 {
		t.Fatalf("file is %d bytes, want past the first 4 MiB mapping", fi.Size())
	}
	mu.Lock()
	told := strings.Join(said, "\n")
	mu.Unlock()
	if l.j != nil || !strings.Contains(told, "journal stopped") {
		t.Fatalf("journal still on (%v) or not said (%q)", l.j != nil, told)
	}
	st, err := l.Stats(ctx)
	if err != nil || st.Jobs != 48 {
		t.Fatalf("Stats = %+v, %v, want 48 jobs", st, err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if d := openDump(t, path); !strings.Contains(d["jobs"], "map-3-11") {
		t.Fatal("reopened log lacks the last job")
	}
}
