package acceptlog

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay"
)

// smallLogFile returns the bytes of a closed log holding a few dozen jobs
// and its page size.
func smallLogFile(t testing.TB) ([]byte, int64) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "accept.db")
	l, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 30 {
		id := fmt.Sprintf("<%02d@x>", i)
		_, _, err := l.Mutate(context.Background(), id, func(*gmailrelay.Job) (gmailrelay.Change, error) {
			j := gmailrelay.Job{MessageID: id, State: gmailrelay.StateForwarding, Attempts: 1}
			return gmailrelay.Change{Job: &j, Raw: bytes.Repeat([]byte("m"), 400), Lines: []gmailrelay.Line{{Kind: gmailrelay.KindReceived, Attempt: 1, State: gmailrelay.StateForwarding}}}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	ps := int64(l.db.Info().PageSize)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b, ps
}

// resum rewrites the checksum of the meta page at off after an edit.
func resum(b []byte, off int64) {
	h := fnv.New64a()
	_, _ = h.Write(b[off+metaOffset : off+metaSumOff])
	binary.LittleEndian.PutUint64(b[off+metaSumOff:], h.Sum64())
}

func TestCheckBoltFile(t *testing.T) {
	whole, ps := smallLogFile(t)
	m, err := newestMeta(bytes.NewReader(whole), int64(len(whole)))
	if err != nil {
		t.Fatal(err)
	}
	used := int64(m.pgid) * ps
	if used <= 3*ps {
		t.Fatalf("the log uses %d pages, the test needs more than 3", m.pgid)
	}
	edited := func(edit func(b []byte)) []byte {
		b := bytes.Clone(whole)
		edit(b)
		return b
	}
	tests := []struct {
		name string
		file []byte
		want string // "" accepted
	}{
		{"whole", whole, ""},
		{"cut to its used pages", whole[:used], ""},
		{"empty", nil, ""},
		{"one page short", whole[:used-ps], "the meta page counts"},
		{"one byte short", whole[:used-1], "the meta page counts"},
		{"one page", whole[:ps], "less than two pages"},
		{"a few bytes", whole[:50], "no valid meta page"},
		// bbolt would open the other meta and lose the last commit.
		{"first meta torn", edited(func(b []byte) { b[metaOffset+20] ^= 1 }), "meta page 0: meta page: checksum mismatch"},
		{"both metas torn", edited(func(b []byte) { b[metaOffset+20] ^= 1; b[ps+metaOffset+20] ^= 1 }), "no valid meta page"},
		{"other bbolt version", edited(func(b []byte) {
			for _, off := range []int64{0, ps} {
				binary.LittleEndian.PutUint32(b[off+metaVersionOff:], 3)
				resum(b, off)
			}
		}), "version 3"},
		{"root past the pages", edited(func(b []byte) {
			for _, off := range []int64{0, ps} {
				binary.LittleEndian.PutUint64(b[off+metaRootOff:], m.pgid+5)
				resum(b, off)
			}
		}), "points past"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := checkBoltFile(bytes.NewReader(tc.file), int64(len(tc.file)))
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("checkBoltFile = %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("checkBoltFile = %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

// FuzzCheckBoltFile: whatever the file holds, checkBoltFile does not panic
// and accepts only a file holding every page its chosen meta counts.
func FuzzCheckBoltFile(f *testing.F) {
	whole, ps := smallLogFile(f)
	f.Add(whole[:4*ps])
	f.Add(whole[:2*ps])
	f.Add(whole[:ps+100])
	f.Add(whole[ps : 3*ps]) // the second meta first
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		size := int64(len(b))
		err := checkBoltFile(bytes.NewReader(b), size)
		if err != nil || size == 0 {
			return
		}
		m, merr := newestMeta(bytes.NewReader(b), size)
		if merr != nil {
			t.Fatalf("accepted, but newestMeta = %v", merr)
		}
		if m.pageSize < metaPageMin || size < 2*m.pageSize || m.pgid > uint64(size/m.pageSize) {
			t.Fatalf("accepted a file of %d bytes whose meta counts %d pages of %d", size, m.pgid, m.pageSize)
		}
	})
}

// TestCheckJobPrunedTransitions: the steps between a pruned job's kept
// lines are gone, but a line written after the pruning moves on from its
// last state line and is checked.
func TestCheckJobPrunedTransitions(t *testing.T) {
	prunedAt := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
	kept := []gmailrelay.Line{ // sent → (review, gone) → abandoned
		{Seq: 2, Kind: gmailrelay.KindEffect, State: gmailrelay.StateSent, Attempt: 1, Time: prunedAt.Add(-2 * time.Hour)},
		{Seq: 5, Kind: gmailrelay.KindResolved, State: gmailrelay.StateAbandoned, Time: prunedAt.Add(-time.Hour)},
	}
	tests := []struct {
		name  string
		state gmailrelay.State
		after []gmailrelay.Line
		want  string // "" no violation
	}{
		{"kept lines only", gmailrelay.StateAbandoned, nil, ""},
		{"a move after the pruning outside the table", gmailrelay.StateSent,
			[]gmailrelay.Line{{Seq: 9, Kind: gmailrelay.KindResolved, State: gmailrelay.StateSent, Time: prunedAt.Add(time.Hour)}},
			"line 9 moves abandoned → sent"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			j := &gmailrelay.Job{MessageID: "<a@x>", State: tc.state, Attempts: 1, Effects: 1, PrunedAt: prunedAt}
			found := gmailrelay.CheckJob(j, append(append([]gmailrelay.Line(nil), kept...), tc.after...))
			got := strings.Join(found, "\n")
			switch {
			case tc.want == "" && len(found) > 0:
				t.Errorf("checkJob found %s, want nothing", got)
			case tc.want != "" && !strings.Contains(got, tc.want):
				t.Errorf("checkJob found %q, want %q", got, tc.want)
			}
		})
	}
}

func TestNeedsRaw(t *testing.T) {
	for _, s := range []gmailrelay.State{gmailrelay.StateQueued, gmailrelay.StateForwarding, gmailrelay.StateUnknown, gmailrelay.StateReview, gmailrelay.StateFailed, gmailrelay.StateSent} {
		if !gmailrelay.NeedsRaw(s) {
			t.Errorf("NeedsRaw(%s) = false: a job in %s can still be sent", s, s)
		}
	}
	if gmailrelay.NeedsRaw(gmailrelay.StateAbandoned) {
		t.Error("NeedsRaw(abandoned) = true: nothing leaves abandoned")
	}
}

// TestCheckFileTruncatedUnderneath: a file cut short while the log has it
// mapped makes bbolt's reads fault (SIGBUS); Check turns that into an
// error naming the file instead of the process dying.
func TestCheckFileTruncatedUnderneath(t *testing.T) {
	whole, ps := smallLogFile(t)
	path := filepath.Join(t.TempDir(), "accept.db")
	if err := os.WriteFile(path, whole, 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := OpenReadOnly(path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := os.Truncate(path, 2*ps); err != nil {
		t.Fatal(err)
	}
	err = l.Check(context.Background())
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "damaged") {
		t.Errorf("Check of a file cut short = %v, want an error naming %s as damaged", err, path)
	}
}

// checkBoltFile is the meta-page part of verifyFile: an empty file passes
// (Open refuses it before), anything else must have two valid meta pages
// whose newest names pages inside the file.
func checkBoltFile(r io.ReaderAt, size int64) error {
	if size == 0 {
		return nil
	}
	_, err := bothMetas(r, size)
	return err
}
