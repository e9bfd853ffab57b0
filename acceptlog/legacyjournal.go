package acceptlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// The journal of an older gmailrelay. Those versions made a commit one
// append and one fsync of <path>-journal and synced the bbolt file only at
// a checkpoint; after a crash, the file's last checkpoint plus the
// journal's records are the log. This version writes no journal: Open
// replays one an older version left (legacy.go), once, and only when
// every record in it checks out. This file reads the format:
//
//	header: "gmrjrnl1" | uint32 version | uint32 page size | uint64 txid |
//	        the checkpoint's bbolt meta page (page size bytes) | uint32 CRC-32C
//	record: uint32 payload length | uint32 CRC-32C of payload | payload
//	payload: ops, each
//	    put:      0x01 | bucket | uvarint len | key | uvarint len | value
//	    delete:   0x02 | bucket | uvarint len | key
//	    sequence: 0x03 | bucket | uvarint sequence
//
// After the last record the file holds zeros (it was written ahead with
// zeros). All integers are little-endian. A bucket is its number in the
// journal's version (journalBuckets). Version 1 journals name the
// job-lines index of files of that time, which Open then migrates.
const (
	journalMagic   = "gmrjrnl1"
	journalVersion = 2

	opPut      = 1
	opDelete   = 2
	opSequence = 3

	recordHeaderSize = 8
	// maxRecord bounds a record's length field, so a corrupt length cannot
	// make the reader allocate or skip gigabytes.
	maxRecord = 1 << 30
)

// journalBucketsV1 are the buckets of a version 1 journal, by number.
var journalBucketsV1 = [...][]byte{
	bucketJobs, bucketLines, bucketJobLinesV1, bucketState, bucketDue, bucketUnknown,
	bucketPrunable, bucketBodies, bucketMailboxes, bucketCounters, bucketSends,
}

// journalBucketsV2 are the buckets of a version 2 journal, by number.
var journalBucketsV2 = [...][]byte{
	bucketJobs, bucketLines, bucketState, bucketDue, bucketUnknown,
	bucketPrunable, bucketBodies, bucketMailboxes, bucketCounters, bucketSends,
}

// journalBuckets returns the buckets of a journal of version v by number,
// nil for a version this gmailrelay cannot read.
func journalBuckets(v uint32) [][]byte {
	switch v {
	case 1:
		return journalBucketsV1[:]
	case journalVersion:
		return journalBucketsV2[:]
	}
	return nil
}

// journalHeader is what a journal starts with: the checkpoint it applies
// to, as the bbolt meta page that was durable when it was written, and the
// journal's version.
type journalHeader struct {
	version  uint32 // encodeJournalHeader writes journalVersion
	pageSize int
	txid     uint64
	meta     []byte // pageSize bytes
}

// decodeJournalHeader reads the header at the start of b and returns it and
// its length. An error means b does not start with a whole, valid header.
func decodeJournalHeader(b []byte) (journalHeader, int, error) {
	const fixed = len(journalMagic) + 16
	if len(b) < fixed || string(b[:len(journalMagic)]) != journalMagic {
		return journalHeader{}, 0, errors.New("no journal header")
	}
	v := binary.LittleEndian.Uint32(b[8:])
	if journalBuckets(v) == nil {
		return journalHeader{}, 0, fmt.Errorf("journal version %d, want %d or older (written by another version of gmailrelay: open the file with that version)", v, journalVersion)
	}
	ps := int(binary.LittleEndian.Uint32(b[12:]))
	if ps < metaPageMin || ps > 1<<16 {
		return journalHeader{}, 0, fmt.Errorf("journal page size %d", ps)
	}
	n := fixed + ps + 4
	if len(b) < n {
		return journalHeader{}, 0, errors.New("journal header cut short")
	}
	if crc32.Checksum(b[:n-4], castagnoli) != binary.LittleEndian.Uint32(b[n-4:]) {
		return journalHeader{}, 0, errors.New("journal header checksum mismatch")
	}
	h := journalHeader{version: v, pageSize: ps, txid: binary.LittleEndian.Uint64(b[16:]), meta: b[fixed : fixed+ps]}
	if err := checkMetaPage(h.meta, h.txid); err != nil {
		return journalHeader{}, 0, fmt.Errorf("journal header: %w", err)
	}
	return h, n, nil
}

// nextRecord returns the payload of the record at the start of b and the
// record's length; ok is false when b holds no whole, valid record there
// (the end of the journal, or a torn or corrupt tail: a record that was
// being written when the process or the machine stopped, never
// acknowledged).
func nextRecord(b []byte) (payload []byte, n int, ok bool) {
	if len(b) < recordHeaderSize {
		return nil, 0, false
	}
	size := binary.LittleEndian.Uint32(b)
	if size == 0 || size > maxRecord || uint64(len(b)-recordHeaderSize) < uint64(size) {
		return nil, 0, false
	}
	payload = b[recordHeaderSize : recordHeaderSize+int(size)]
	if crc32.Checksum(payload, castagnoli) != binary.LittleEndian.Uint32(b[4:]) {
		return nil, 0, false
	}
	return payload, recordHeaderSize + int(size), true
}

// journalOp is one change of a record: a put, a delete or a new bucket
// sequence, in a write bucket (wJobs...; in a version 1 journal, see
// journalBuckets) named name.
type journalOp struct {
	kind   byte
	bucket int
	name   []byte
	key    []byte
	value  []byte // put only
	seq    uint64 // sequence only
}

// decodeOps calls fn with each op of a record's payload, in order; buckets
// are the journal's buckets by number (journalBuckets). key and value
// alias payload. A payload that does not parse is an error: its checksum
// matched, so it is not a torn write but a bug or a journal of another
// version.
func decodeOps(payload []byte, buckets [][]byte, fn func(op journalOp) error) error {
	for len(payload) > 0 {
		if len(payload) < 2 {
			return errors.New("journal record: op cut short")
		}
		op := journalOp{kind: payload[0], bucket: int(payload[1])}
		payload = payload[2:]
		if op.bucket >= len(buckets) {
			return fmt.Errorf("journal record: bucket %d unknown", op.bucket)
		}
		op.name = buckets[op.bucket]
		var err error
		switch op.kind {
		case opPut:
			if op.key, payload, err = readBytes(payload); err != nil {
				return err
			}
			if op.value, payload, err = readBytes(payload); err != nil {
				return err
			}
		case opDelete:
			if op.key, payload, err = readBytes(payload); err != nil {
				return err
			}
		case opSequence:
			n := 0
			if op.seq, n = binary.Uvarint(payload); n <= 0 {
				return errors.New("journal record: bad sequence")
			}
			payload = payload[n:]
		default:
			return fmt.Errorf("journal record: op %d unknown", op.kind)
		}
		if err := fn(op); err != nil {
			return err
		}
	}
	return nil
}

// readBytes reads a uvarint length and that many bytes from the start of b.
func readBytes(b []byte) (v, rest []byte, err error) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)-k) {
		return nil, nil, errors.New("journal record: length out of range")
	}
	return b[k : k+int(n) : k+int(n)], b[k+int(n):], nil
}
