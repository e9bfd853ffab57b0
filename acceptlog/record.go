package acceptlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// Every value the log stores — a job, a line, an index entry, a raw
// message, a mailbox, a counter — ends with a checksum: CRC-32C over the
// bucket's name, a zero byte, the key and the value's body, big-endian.
// Covering the bucket and the key, not only the body, means a record that
// a damaged page shows under another key, or in another bucket, fails its
// check too. An index entry, whose body is empty, is its 4-byte checksum.
//
// A damaged record is never skipped: reading one is an error that names
// it (DamageError), Open refuses a file that holds one, and Check names
// every one.

// checksumSize is the length of the checksum that ends every value.
const checksumSize = 4

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errChecksum: a value's checksum does not match its bucket, key and body.
var errChecksum = errors.New("checksum mismatch")

// recordSum is the checksum of body stored under key in bucket.
func recordSum(bucket, key, body []byte) uint32 {
	c := crc32.Update(0, castagnoli, bucket)
	c = crc32.Update(c, castagnoli, []byte{0})
	c = crc32.Update(c, castagnoli, key)
	return crc32.Update(c, castagnoli, body)
}

// seal appends the checksum of the value body (already in b, from
// bodyStart on) under key in bucket.
func seal(b []byte, bodyStart int, bucket, key []byte) []byte {
	return binary.BigEndian.AppendUint32(b, recordSum(bucket, key, b[bodyStart:]))
}

// sealed returns body with its checksum, in a new slice.
func sealed(bucket, key, body []byte) []byte {
	b := make([]byte, 0, len(body)+checksumSize)
	return seal(append(b, body...), 0, bucket, key)
}

// unseal checks the value v stored under key in bucket and returns its
// body (a sub-slice of v).
func unseal(bucket, key, v []byte) ([]byte, error) {
	if len(v) < checksumSize {
		return nil, fmt.Errorf("%w: %d bytes, shorter than a checksum", errChecksum, len(v))
	}
	body := v[:len(v)-checksumSize]
	if binary.BigEndian.Uint32(v[len(body):]) != recordSum(bucket, key, body) {
		return nil, errChecksum
	}
	return body, nil
}

// DamageError is a record of the log that fails its check: its checksum,
// its decoding or its place among the others. The file is damaged there:
// the log refuses to work on it (see Open) and `gmailrelay check` names
// every such record.
type DamageError struct {
	// What names the record: "job <id>", "line 17", "index state entry …".
	What string
	Err  error
}

func (e *DamageError) Error() string { return fmt.Sprintf("damaged record: %s: %v", e.What, e.Err) }

func (e *DamageError) Unwrap() error { return e.Err }

// ErrDamaged is wrapped by every error that reports a damaged file.
var ErrDamaged = errors.New("the log file is damaged")

// Is makes a DamageError match ErrDamaged.
func (e *DamageError) Is(target error) bool { return target == ErrDamaged }

// describeRecord names the record under key in bucket for a message.
func describeRecord(bucket, key []byte) string {
	switch string(bucket) {
	case string(bucketJobs):
		return "job " + printable(key)
	case string(bucketLines):
		if len(key) == 8 {
			return fmt.Sprintf("line %d", binary.BigEndian.Uint64(key))
		}
	case string(bucketBodies):
		return "message of job " + printable(key)
	case string(bucketMailboxes):
		return "mailbox " + printable(key)
	case string(bucketCounters):
		return "counter " + printable(key)
	case string(bucketMeta):
		return "log record " + printable(key)
	}
	return fmt.Sprintf("%s entry %s", bucket, printable(key))
}

// printable renders a key for a message: as text when it is printable
// ASCII, else in hex.
func printable(k []byte) string {
	for _, c := range k {
		if c < 0x20 || c > 0x7e {
			return fmt.Sprintf("%x", k)
		}
	}
	return string(k)
}

// readRecord returns the body of the value under key in bucket b (nil when
// there is none), or a DamageError when it fails its checksum.
func readRecord(name []byte, get func([]byte) []byte, key []byte) ([]byte, error) {
	v := get(key)
	if v == nil {
		return nil, nil
	}
	body, err := unseal(name, key, v)
	if err != nil {
		return nil, &DamageError{What: describeRecord(name, key), Err: err}
	}
	return body, nil
}
