package gmailrelay

import (
	"encoding/json"
	"fmt"
	"math"
	"time"
)

// MaxLagSamples bounds a mailbox's LagSamples: the newest win. Few,
// because the record is decoded and encoded in every write that edits it
// (about 15 µs more with 64 samples, 25 µs with 128), and its nearest-rank
// p99 is then the largest sample: the floor errs late, never early.
const MaxLagSamples = 64

// LagSamples are the newest index lag samples of a mailbox, oldest first,
// each kept as whole milliseconds (rounded up: a sample is an upper bound,
// and rounding never makes it smaller). At most MaxLagSamples, in an array
// rather than a slice so that a Mailbox stays comparable. The zero value
// holds none; a record stored before the samples were kept reads as zero.
//
// Stored as JSON {"ms": [oldest, …, newest], "from": key}.
type LagSamples struct {
	n    int
	ms   [MaxLagSamples]uint32
	from string
}

// Add appends d as the newest sample (dropping the oldest when full),
// unless key is the key of the newest sample already added: one send
// measured twice (two replicas verifying it, or a verify repeated after a
// crash) adds one sample. An empty key is never a repeat. It reports
// whether d was added.
func (s *LagSamples) Add(key string, d time.Duration) bool {
	if key != "" && key == s.from && s.n > 0 {
		return false
	}
	if s.n == MaxLagSamples {
		copy(s.ms[:], s.ms[1:])
		s.n--
	}
	s.ms[s.n] = toMillis(d)
	s.n++
	s.from = key
	return true
}

// Len is how many samples s holds.
func (s LagSamples) Len() int { return s.n }

// IsZero reports whether s holds no sample (encoding/json's omitzero).
func (s LagSamples) IsZero() bool { return s.n == 0 }

// Durations returns the samples, oldest first (nil when there is none).
func (s LagSamples) Durations() []time.Duration {
	if s.n == 0 {
		return nil
	}
	out := make([]time.Duration, s.n)
	for i, ms := range s.ms[:s.n] {
		out[i] = time.Duration(ms) * time.Millisecond
	}
	return out
}

// toMillis is d in whole milliseconds, rounded up, within uint32 (about
// 49 days, far beyond any lag the relay waits for); negative is 0.
func toMillis(d time.Duration) uint32 {
	if d <= 0 {
		return 0
	}
	ms := (d + time.Millisecond - 1) / time.Millisecond
	return uint32(min(ms, math.MaxUint32))
}

type lagSamplesJSON struct {
	MS   []uint32 `json:"ms"`
	From string   `json:"from,omitempty"`
}

// MarshalJSON implements json.Marshaler.
func (s LagSamples) MarshalJSON() ([]byte, error) {
	return json.Marshal(lagSamplesJSON{MS: s.ms[:s.n], From: s.from})
}

// UnmarshalJSON implements json.Unmarshaler. Of more than MaxLagSamples
// samples (a record written with a larger bound) the newest are kept.
func (s *LagSamples) UnmarshalJSON(b []byte) error {
	var v lagSamplesJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return fmt.Errorf("lag samples: %w", err)
	}
	ms := v.MS[max(len(v.MS)-MaxLagSamples, 0):]
	*s = LagSamples{n: len(ms), from: v.From}
	copy(s.ms[:], ms)
	return nil
}
