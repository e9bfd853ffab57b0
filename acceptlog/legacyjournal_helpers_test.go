package acceptlog

import (
	"encoding/binary"
	"hash/crc32"
	"os"
)

// The journal writer of the gmailrelay before this one, kept for tests
// that make the journals such a version leaves.

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

func (r *opRecorder) sequence(b int, seq uint64) {
	r.buf = append(r.buf, opSequence, byte(b))
	r.buf = binary.AppendUvarint(r.buf, seq)
	r.ops++
}

// readMetaPage reads the meta page of transaction txid from the file at path
// (bbolt writes transaction t's meta into slot t % 2) and checks it.
func readMetaPage(path string, pageSize int, txid uint64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	p := make([]byte, pageSize)
	if _, err := f.ReadAt(p, int64(txid%2)*int64(pageSize)); err != nil {
		return nil, err
	}
	if err := checkMetaPage(p, txid); err != nil {
		return nil, err
	}
	return p, nil
}
