package acceptlog

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"time"
)

// Bucket names. Every key layout is described next to its bucket.
var (
	// message id → Job record (codec.go).
	bucketJobs = []byte("jobs")
	// big-endian seq → Line record (codec.go).
	bucketLines = []byte("lines")
	// message id + 0x00 + big-endian seq → nothing.
	bucketJobLines = []byte("joblines")
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
)

var allBuckets = [][]byte{
	bucketJobs, bucketLines, bucketJobLines, bucketState, bucketDue,
	bucketUnknown, bucketBodies, bucketMailboxes, bucketCounters, bucketPrunable,
	bucketSends,
}

// maxMessageIDLen bounds a Message-ID so every derived key stays far below
// bbolt's key size limit; RFC 5322 lines are at most 998 octets anyway.
const maxMessageIDLen = 998

// checkMessageID rejects ids that cannot be keys: empty, too long, or holding
// the 0x00 separator of the composite keys.
func checkMessageID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("empty message id")
	case len(id) > maxMessageIDLen:
		return fmt.Errorf("message id of %d bytes is longer than %d", len(id), maxMessageIDLen)
	case strings.IndexByte(id, 0) >= 0:
		return fmt.Errorf("message id %q contains a NUL byte", id)
	}
	return nil
}

var knownKinds = map[Kind]bool{
	KindReceived: true, KindFault: true, KindForwarding: true, KindEffect: true,
	KindNotSent: true, KindAmbiguous: true, KindSearch: true, KindState: true,
	KindReview: true, KindResolved: true, KindHandle: true,
}

func seqKey(seq uint64) []byte {
	return binary.BigEndian.AppendUint64(make([]byte, 0, 8), seq)
}

func jobLinesPrefix(id string) []byte {
	k := make([]byte, 0, len(id)+9)
	k = append(k, id...)
	return append(k, 0)
}

func jobLineKey(id string, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(jobLinesPrefix(id), seq)
}

func stateKey(s State, id string) []byte {
	k := make([]byte, 0, len(s)+1+len(id))
	k = append(k, s...)
	k = append(k, 0)
	return append(k, id...)
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

func timeIDKey(t time.Time, id string) []byte {
	k := make([]byte, 0, 8+len(id))
	k = binary.BigEndian.AppendUint64(k, sortableTime(t))
	return append(k, id...)
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

func keysOf(j *Job) indexKeys {
	k := indexKeys{state: stateKey(j.State, j.MessageID)}
	if !j.NextCheckAt.IsZero() {
		k.due = timeIDKey(j.NextCheckAt, j.MessageID)
	}
	if j.State == StateUnknown {
		k.unknown = timeIDKey(j.AmbiguousAt, j.MessageID)
	}
	if j.Prunable() {
		k.prunable = timeIDKey(j.UpdatedAt, j.MessageID)
	}
	return k
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

// The counter keys of the known states and kinds, built once: a Mutate
// counts several, and building each anew was an allocation.
var (
	stateCounterKeys = map[State]string{}
	kindCounterKeys  = map[Kind]string{}
)

func init() {
	for _, s := range States {
		stateCounterKeys[s] = prefixState + string(s)
	}
	for k := range knownKinds {
		kindCounterKeys[k] = prefixKind + string(k)
	}
}

func counterKeyState(s State) string {
	if k, ok := stateCounterKeys[s]; ok {
		return k
	}
	return prefixState + string(s)
}
func counterKeyChannel(ch string, s State) string {
	return prefixChannel + string(s) + "\x00" + ch
}
func counterKeyKind(k Kind) string {
	if key, ok := kindCounterKeys[k]; ok {
		return key
	}
	return prefixKind + string(k)
}
func counterKeyReason(k Kind, reason string) string {
	return prefixReason + string(k) + "\x00" + reason
}

// jobCounters are the counter keys a job contributes one to.
func jobCounters(j *Job) []string {
	return []string{counterKeyState(j.State), counterKeyChannel(j.Channel, j.State)}
}

// lineCounters are the counter keys a line contributes one to. A line
// without a Reason is counted by kind only.
func lineCounters(l *Line) []string {
	keys := []string{counterLines, counterKeyKind(l.Kind)}
	if l.Reason != "" {
		keys = append(keys, counterKeyReason(l.Kind, string(l.Reason)))
	}
	return keys
}

// statsFromCounters builds Stats from counter values (OldestUnknown aside).
func statsFromCounters(counts map[string]int64) Stats {
	st := Stats{
		ByState:   map[State]int{},
		ByChannel: map[string]map[State]int{},
		ByKind:    map[Kind]int{},
		ByReason:  map[Kind]map[string]int{},
	}
	for k, n := range counts {
		switch {
		case k == counterJobs:
			st.Jobs = int(n)
		case k == counterLines:
			st.Lines = uint64(n)
		case strings.HasPrefix(k, prefixState):
			st.ByState[State(k[len(prefixState):])] = int(n)
		case strings.HasPrefix(k, prefixChannel):
			s, ch, _ := strings.Cut(k[len(prefixChannel):], "\x00")
			if st.ByChannel[ch] == nil {
				st.ByChannel[ch] = map[State]int{}
			}
			st.ByChannel[ch][State(s)] = int(n)
		case strings.HasPrefix(k, prefixKind):
			st.ByKind[Kind(k[len(prefixKind):])] = int(n)
		case strings.HasPrefix(k, prefixReason):
			kind, reason, _ := strings.Cut(k[len(prefixReason):], "\x00")
			if st.ByReason[Kind(kind)] == nil {
				st.ByReason[Kind(kind)] = map[string]int{}
			}
			st.ByReason[Kind(kind)][reason] = int(n)
		}
	}
	return st
}

func encodeCount(n int64) []byte {
	return binary.BigEndian.AppendUint64(make([]byte, 0, 8), uint64(n))
}

func decodeCount(v []byte) (int64, error) {
	if len(v) != 8 {
		return 0, fmt.Errorf("counter value of %d bytes, want 8", len(v))
	}
	return int64(binary.BigEndian.Uint64(v)), nil
}

// hasPrefixKey reports whether k starts with prefix (a cursor helper).
func hasPrefixKey(k, prefix []byte) bool { return k != nil && bytes.HasPrefix(k, prefix) }
