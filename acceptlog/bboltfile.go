package acceptlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
)

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

// bbolt's meta page (version 2), after the page header: magic, version,
// page size, flags, root bucket (its page, its sequence), freelist page,
// pgid (the high-water mark: the file's pages in use are 0..pgid-1), txid,
// checksum. journal.go has the offsets of the fields it needs.
const (
	metaVersionOff  = metaOffset + 4
	metaPageSizeOff = metaOffset + 8
	metaRootOff     = metaOffset + 16
	metaFreelistOff = metaOffset + 32
	metaPgidOff     = metaOffset + 40
	boltVersion     = 2
	boltNoFreelist  = ^uint64(0)
	// bbolt looks for the second meta page at 1 KiB << 0..14 when the
	// first is not valid.
	minPageSize = 1024
	maxPageSize = minPageSize << 14
)

// boltMeta is what checkBoltFile reads of a meta page.
type boltMeta struct {
	pageSize                   int64
	root, freelist, pgid, txid uint64
}

// newestMeta returns the meta page bbolt would open the file with (see
// checkBoltFile).
func newestMeta(r io.ReaderAt, size int64) (boltMeta, error) {
	m0, err0 := readMeta(r, 0, size)
	ps := m0.pageSize
	if err0 != nil {
		ps = 0
		for pos := int64(minPageSize); pos <= maxPageSize && pos < size-minPageSize; pos *= 2 {
			if m, err := readMeta(r, pos, size); err == nil && m.pageSize == pos {
				ps = pos
				break
			}
		}
		if ps == 0 {
			return boltMeta{}, fmt.Errorf("no valid meta page: %w", err0)
		}
	}
	if ps < metaPageMin || ps > maxPageSize {
		return boltMeta{}, fmt.Errorf("page size %d", ps)
	}
	if size < 2*ps {
		return boltMeta{}, fmt.Errorf("%d bytes, less than two pages of %d", size, ps)
	}
	m1, err1 := readMeta(r, ps, size)
	switch {
	case err0 == nil && (err1 != nil || m0.txid >= m1.txid):
		return m0, nil
	case err1 != nil:
		return boltMeta{}, fmt.Errorf("no valid meta page: %w", err1)
	case m1.pageSize != ps:
		return boltMeta{}, fmt.Errorf("meta pages of %d and %d bytes", ps, m1.pageSize)
	}
	return m1, nil
}

// readMeta reads the meta page at off in a file of size bytes and checks
// it as bbolt does.
func readMeta(r io.ReaderAt, off, size int64) (boltMeta, error) {
	if off+metaPageMin > size {
		return boltMeta{}, fmt.Errorf("%d bytes, too short for a meta page at %d", size, off)
	}
	p := make([]byte, metaPageMin)
	if _, err := r.ReadAt(p, off); err != nil {
		return boltMeta{}, err
	}
	txid := binary.LittleEndian.Uint64(p[metaTxidOff:])
	if err := checkMetaPage(p, txid); err != nil {
		return boltMeta{}, err
	}
	if v := binary.LittleEndian.Uint32(p[metaVersionOff:]); v != boltVersion {
		return boltMeta{}, fmt.Errorf("meta page: bbolt version %d, want %d", v, boltVersion)
	}
	return boltMeta{
		pageSize: int64(binary.LittleEndian.Uint32(p[metaPageSizeOff:])),
		root:     binary.LittleEndian.Uint64(p[metaRootOff:]),
		freelist: binary.LittleEndian.Uint64(p[metaFreelistOff:]),
		pgid:     binary.LittleEndian.Uint64(p[metaPgidOff:]),
		txid:     txid,
	}, nil
}
