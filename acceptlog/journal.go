package acceptlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"hash/fnv"
)

// The journal (since issue 16) makes a commit one append and one fsync: a
// group commit's changes are appended to <path>-journal and synced before
// bbolt commits them without syncing, and the bbolt file is synced only at
// a checkpoint. This file is the journal's format; durable.go is how the
// log uses it. See docs/operations.md, "Durability: the journal".
//
// The file is a header, then records:
//
//	header: "gmrjrnl1" | uint32 version | uint32 page size | uint64 txid |
//	        the checkpoint's bbolt meta page (page size bytes) | uint32 CRC-32C
//	record: uint32 payload length | uint32 CRC-32C of payload | payload
//	payload: ops, each
//	    put:      0x01 | bucket | uvarint len | key | uvarint len | value
//	    delete:   0x02 | bucket | uvarint len | key
//	    sequence: 0x03 | bucket | uvarint sequence
//
// All integers are little-endian. A bucket is a write bucket's number (wJobs
// ...), so the version changes when they are renumbered (journalBuckets).
// The sequence op is bbolt's bucket sequence, which NextSequence changes
// without a put: the lines' Seq counter would otherwise go back after a
// replay.
//
// Version 2 (issue 16's step 2) dropped the job-lines index's bucket, number
// 2 in version 1. A version 1 journal (a gmailrelay before it stopped
// without closing its log) is still replayed, with version 1's numbers,
// into its file, which still has that bucket; Open then migrates the file
// (migrateJobLines). A gmailrelay that knows only version 1 refuses a
// version 2 journal, as it must: the file it belongs to no longer has the
// index that gmailrelay reads.
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

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// journalBucketsV1 are the buckets of a version 1 journal, by number.
var journalBucketsV1 = [...][]byte{
	bucketJobs, bucketLines, bucketJobLinesV1, bucketState, bucketDue, bucketUnknown,
	bucketPrunable, bucketBodies, bucketMailboxes, bucketCounters, bucketSends,
}

// journalBuckets returns the buckets of a journal of version v by number,
// nil for a version this gmailrelay cannot read.
func journalBuckets(v uint32) [][]byte {
	switch v {
	case 1:
		return journalBucketsV1[:]
	case journalVersion:
		return writeBucketNames[:]
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

// encodeJournalHeader returns h as the journal's first bytes.
func encodeJournalHeader(h journalHeader) []byte {
	b := make([]byte, 0, len(journalMagic)+16+len(h.meta)+4)
	b = append(b, journalMagic...)
	b = binary.LittleEndian.AppendUint32(b, h.version)
	b = binary.LittleEndian.AppendUint32(b, uint32(h.pageSize))
	b = binary.LittleEndian.AppendUint64(b, h.txid)
	b = append(b, h.meta...)
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
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
		return journalHeader{}, 0, fmt.Errorf("journal version %d, want %d or older", v, journalVersion)
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

// opRecorder collects the ops of one write transaction (see writeTx): the
// journal record its commit appends, built in place (buf starts with room
// for the record's header). Only touched inside write transactions.
type opRecorder struct {
	buf []byte
	ops int
}

func (r *opRecorder) reset() {
	if r.buf == nil {
		r.buf = make([]byte, recordHeaderSize, 4096)
	}
	r.buf, r.ops = r.buf[:recordHeaderSize], 0
}

// record fills in the record's header and returns the whole record.
func (r *opRecorder) record() []byte {
	payload := r.buf[recordHeaderSize:]
	binary.LittleEndian.PutUint32(r.buf, uint32(len(payload)))
	binary.LittleEndian.PutUint32(r.buf[4:], crc32.Checksum(payload, castagnoli))
	return r.buf
}

func (r *opRecorder) put(b int, key, value []byte) {
	r.buf = append(r.buf, opPut, byte(b))
	r.buf = binary.AppendUvarint(r.buf, uint64(len(key)))
	r.buf = append(r.buf, key...)
	r.buf = binary.AppendUvarint(r.buf, uint64(len(value)))
	r.buf = append(r.buf, value...)
	r.ops++
}

func (r *opRecorder) delete(b int, key []byte) {
	r.buf = append(r.buf, opDelete, byte(b))
	r.buf = binary.AppendUvarint(r.buf, uint64(len(key)))
	r.buf = append(r.buf, key...)
	r.ops++
}

func (r *opRecorder) sequence(b int, seq uint64) {
	r.buf = append(r.buf, opSequence, byte(b))
	r.buf = binary.AppendUvarint(r.buf, seq)
	r.ops++
}

// bbolt's meta page, as laid out by go.etcd.io/bbolt/internal/common
// (page.go, meta.go): a 16-byte page header (id uint64, flags uint16, count
// uint16, overflow uint32), then the meta: magic, version, page size,
// flags (uint32 each), root bucket (root pgid, sequence), freelist pgid,
// high-water pgid, txid, checksum (uint64 each, native byte order: this
// code, like bbolt's file format, assumes little-endian). The checksum is
// FNV-1a 64 of the meta up to the checksum and does not cover the page
// header, so the same meta can be written into both slots with each slot's
// own page id.
const (
	metaPageFlag  = 0x04
	metaMagic     = 0xED0CDAED
	metaOffset    = 16
	metaTxidOff   = metaOffset + 48
	metaSumOff    = metaOffset + 56
	metaPageMin   = metaSumOff + 8
	metaFlagsOff  = 8
	metaPageIDOff = 0
)

// checkMetaPage checks that p is a valid bbolt meta page of transaction txid.
func checkMetaPage(p []byte, txid uint64) error {
	if len(p) < metaPageMin {
		return errors.New("meta page cut short")
	}
	if binary.LittleEndian.Uint16(p[metaFlagsOff:])&metaPageFlag == 0 {
		return errors.New("not a meta page")
	}
	if binary.LittleEndian.Uint32(p[metaOffset:]) != metaMagic {
		return errors.New("meta page: bad magic")
	}
	h := fnv.New64a()
	_, _ = h.Write(p[metaOffset:metaSumOff])
	if h.Sum64() != binary.LittleEndian.Uint64(p[metaSumOff:]) {
		return errors.New("meta page: checksum mismatch")
	}
	if got := binary.LittleEndian.Uint64(p[metaTxidOff:]); got != txid {
		return fmt.Errorf("meta page of transaction %d, want %d", got, txid)
	}
	return nil
}
