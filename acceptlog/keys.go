package acceptlog

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/gmailrelay/gmailrelay"
)

// Bucket names. Every key layout is described next to its bucket.
var (
	// message id → Job record (codec.go).
	bucketJobs = []byte("jobs")
	// big-endian seq → Line record (codec.go).
	bucketLines = []byte("lines")
	// state + 0x00 + message id → nothing.
	bucketState = []byte("state")
	// sortable time of NextCheckAt + message id → nothing; exactly the jobs
	// whose NextCheckAt is non-zero.
	bucketDue = []byte("due")
	// sortable time of AmbiguousAt + message id → nothing; exactly the jobs in
	// StateUnknown, so Stats finds the oldest without a scan.
	bucketUnknown = []byte("unknown")
	// message id → raw message.
	bucketBodies = []byte("bodies")
	// mailbox name → JSON Mailbox.
	bucketMailboxes = []byte("mailboxes")
	// sortable time of UpdatedAt + message id → nothing; exactly the jobs the
	// retention pass may prune (see Prunable), oldest first.
	bucketPrunable = []byte("prunable")
	// counter key (see counterKey*) → 8-byte big-endian two's-complement count.
	bucketCounters = []byte("counters")
	// message id + 0x00 + big-endian seq → nothing: the job-lines index of
	// files of the older layout, where a job record did not list its lines'
	// seqs; Open fills them in and deletes this bucket (migrateJobLines).
	bucketJobLinesV1 = []byte("joblines")
)

var allBuckets = [][]byte{
	bucketJobs, bucketLines, bucketState, bucketDue,
	bucketUnknown, bucketBodies, bucketMailboxes, bucketCounters, bucketPrunable,
	bucketSends, bucketKeys, bucketFolds,
}

func seqKey(seq uint64) []byte {
	return binary.BigEndian.AppendUint64(make([]byte, 0, 8), seq)
}

func stateKey(s gmailrelay.State, id string) []byte {
	return appendStateKey(make([]byte, 0, len(s)+1+len(id)), s, id)
}

// The append* functions write a key at the end of b, so a write
// transaction builds its keys in one reused buffer (bbolt's Put copies the
// key it is given).

func appendStateKey(b []byte, s gmailrelay.State, id string) []byte {
	b = append(b, s...)
	b = append(b, 0)
	return append(b, id...)
}

// The range of times whose UnixNano is defined; others are clamped so the
// index order stays the time order.
var (
	minIndexTime = time.Unix(0, math.MinInt64)
	maxIndexTime = time.Unix(0, math.MaxInt64)
)

// sortableTime encodes t so that byte order is time order, including times
// before 1970 (the sign bit is flipped).
func sortableTime(t time.Time) uint64 {
	switch {
	case t.Before(minIndexTime):
		t = minIndexTime
	case t.After(maxIndexTime):
		t = maxIndexTime
	}
	return uint64(t.UnixNano()) ^ (1 << 63)
}

func appendTimeIDKey(b []byte, t time.Time, id string) []byte {
	b = binary.BigEndian.AppendUint64(b, sortableTime(t))
	return append(b, id...)
}

// timeIDKeyTime decodes the time of a timeIDKey (in UTC).
func timeIDKeyTime(k []byte) time.Time {
	return time.Unix(0, int64(binary.BigEndian.Uint64(k[:8])^(1<<63))).UTC()
}

// indexKeys are the index entries a stored job owns; Mutate replaces the
// old job's entries with the new one's and Check recomputes them.
type indexKeys struct {
	state   []byte
	due     []byte // nil when NextCheckAt is zero
	unknown []byte // nil unless State is StateUnknown
	// prunable is nil unless the job is Prunable.
	prunable []byte
}

// The indexes a job has entries in, in the order of indexKeys' fields;
// appendIndexKey builds the entry of one.
const (
	indexState = iota
	indexDue
	indexUnknown
	indexPrunable
	numIndexes
)

// appendIndexKey appends j's entry in index i to b; ok is false (and b is
// returned as it was) when j has none there.
func appendIndexKey(b []byte, i int, j *gmailrelay.Job) (_ []byte, ok bool) {
	switch i {
	case indexState:
		return appendStateKey(b, j.State, j.MessageID), true
	case indexDue:
		if !j.NextCheckAt.IsZero() {
			return appendTimeIDKey(b, j.NextCheckAt, j.MessageID), true
		}
	case indexUnknown:
		if j.State == gmailrelay.StateUnknown {
			return appendTimeIDKey(b, j.AmbiguousAt, j.MessageID), true
		}
	case indexPrunable:
		if j.Prunable() {
			return appendTimeIDKey(b, j.UpdatedAt, j.MessageID), true
		}
	}
	return b, false
}

func keysOf(j *gmailrelay.Job) indexKeys {
	var k [numIndexes][]byte
	for i := range k {
		if key, ok := appendIndexKey(nil, i, j); ok {
			k[i] = key
		}
	}
	return indexKeys{state: k[indexState], due: k[indexDue], unknown: k[indexUnknown], prunable: k[indexPrunable]}
}

// Counter keys. Kinds and states never hold 0x00 (both are validated), so
// the separators are unambiguous even when a channel or reason holds one.
const (
	counterJobs   = "jobs"
	counterLines  = "lines"
	prefixState   = "state\x00"
	prefixChannel = "chan\x00"
	prefixKind    = "kind\x00"
	prefixReason  = "reason\x00"
)

func counterKeyState(s gmailrelay.State) string { return prefixState + string(s) }

func counterKeyKind(k gmailrelay.Kind) string { return prefixKind + string(k) }

func counterKeyChannel(ch string, s gmailrelay.State) string {
	return prefixChannel + string(s) + "\x00" + ch
}

func counterKeyReason(k gmailrelay.Kind, reason string) string {
	return prefixReason + string(k) + "\x00" + reason
}

// jobCounters are the counter keys a job contributes one to.
func jobCounters(j *gmailrelay.Job) [2]string {
	return [2]string{counterKeyState(j.State), counterKeyChannel(j.Channel, j.State)}
}

// lineCounters are the counter keys a line contributes one to. A line
// without a Reason is counted by kind only.
func lineCounters(l *gmailrelay.Line) []string {
	keys := []string{counterLines, counterKeyKind(l.Kind)}
	if l.Reason != "" {
		keys = append(keys, counterKeyReason(l.Kind, string(l.Reason)))
	}
	return keys
}

// statsFromCounters builds Stats from counter values (OldestUnknown aside).
func statsFromCounters(counts map[string]int64) gmailrelay.Stats {
	st := gmailrelay.Stats{
		ByState:   map[gmailrelay.State]int{},
		ByChannel: map[string]map[gmailrelay.State]int{},
		ByKind:    map[gmailrelay.Kind]int{},
		ByReason:  map[gmailrelay.Kind]map[string]int{},
	}
	for k, n := range counts {
		switch {
		case k == counterJobs:
			st.Jobs = int(n)
		case k == counterLines:
			st.Lines = uint64(n)
		case strings.HasPrefix(k, prefixState):
			st.ByState[gmailrelay.State(k[len(prefixState):])] = int(n)
		case strings.HasPrefix(k, prefixChannel):
			s, ch, _ := strings.Cut(k[len(prefixChannel):], "\x00")
			if st.ByChannel[ch] == nil {
				st.ByChannel[ch] = map[gmailrelay.State]int{}
			}
			st.ByChannel[ch][gmailrelay.State(s)] = int(n)
		case strings.HasPrefix(k, prefixKind):
			st.ByKind[gmailrelay.Kind(k[len(prefixKind):])] = int(n)
		case strings.HasPrefix(k, prefixReason):
			kind, reason, _ := strings.Cut(k[len(prefixReason):], "\x00")
			if st.ByReason[gmailrelay.Kind(kind)] == nil {
				st.ByReason[gmailrelay.Kind(kind)] = map[string]int{}
			}
			st.ByReason[gmailrelay.Kind(kind)][reason] = int(n)
		}
	}
	return st
}

// appendCount appends a counter's stored value (8 bytes) to b.
func appendCount(b []byte, n int64) []byte { return binary.BigEndian.AppendUint64(b, uint64(n)) }

func decodeCount(v []byte) (int64, error) {
	if len(v) != 8 {
		return 0, fmt.Errorf("counter value of %d bytes, want 8", len(v))
	}
	return int64(binary.BigEndian.Uint64(v)), nil
}

// hasPrefixKey reports whether k starts with prefix (a cursor helper).
func hasPrefixKey(k, prefix []byte) bool { return k != nil && bytes.HasPrefix(k, prefix) }
