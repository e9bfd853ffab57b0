package acceptlog

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
)

// applyOp makes one journaled change in tx.
func applyOp(tx *bolt.Tx, op journalOp) error {
	b := tx.Bucket(op.name)
	if b == nil {
		return fmt.Errorf("bucket %s missing", op.name)
	}
	switch op.kind {
	case opPut:
		return b.Put(op.key, op.value)
	case opDelete:
		return b.Delete(op.key)
	default:
		return b.SetSequence(op.seq)
	}
}

// restoreMeta writes the checkpoint's meta page into both meta slots of the
// file f and syncs it, so that bbolt opens the checkpoint's state: a newer
// meta may point at pages that never reached the disk. It refuses a
// journal that cannot belong to the file: a page size that differs, or a
// checkpoint older than both of the file's valid metas (the file only
// moves on from a checkpoint, so both slots hold its txid - 1 or newer,
// unless the file was replaced, e.g. by a restored backup).
func restoreMeta(f *os.File, h journalHeader) error {
	ps := int64(h.pageSize)
	cur := make([]byte, 2*ps)
	if _, err := f.ReadAt(cur, 0); err != nil {
		return fmt.Errorf("read meta pages: %w", err)
	}
	var newest uint64
	valid := false
	for slot := range int64(2) {
		p := cur[slot*ps : (slot+1)*ps]
		txid := binary.LittleEndian.Uint64(p[metaTxidOff:])
		if checkMetaPage(p, txid) != nil {
			continue
		}
		if got := int64(binary.LittleEndian.Uint32(p[metaOffset+8:])); got != ps {
			return fmt.Errorf("journal page size %d, file page size %d: the journal belongs to another file", ps, got)
		}
		valid, newest = true, max(newest, txid)
	}
	if valid && newest+1 < h.txid {
		return fmt.Errorf("journal checkpoint %d is newer than the file (transaction %d): the file was replaced (a restored backup?); if so, remove the journal", h.txid, newest)
	}
	page := bytes.Clone(h.meta)
	for slot := range int64(2) {
		binary.LittleEndian.PutUint64(page[metaPageIDOff:], uint64(slot))
		if _, err := f.WriteAt(page, slot*ps); err != nil {
			return fmt.Errorf("write meta page %d: %w", slot, err)
		}
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync meta pages: %w", err)
	}
	return nil
}

// legacyJournal is the journal an older gmailrelay left beside its log
// file, read whole, every record checked.
type legacyJournal struct {
	path    string
	hdr     journalHeader
	records [][]byte
}

// readLegacyJournal reads the journal beside the log file at path: nil
// when there is none. A journal any part of which does not check out — its
// header, a record cut short or damaged, anything but zeros after its last
// record, a version this gmailrelay does not know — is an error naming the
// journal, the record and its offset: replaying up to the damage would
// drop every acknowledged commit after it.
func readLegacyJournal(path string) (*legacyJournal, error) {
	jpath := journalPath(path)
	b, err := os.ReadFile(jpath)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read journal %s: %w", jpath, err)
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("journal %s, left by an older gmailrelay that did not stop cleanly: %s; nothing was replayed and the log file was not changed (the journal is kept; `gmailrelay check` reports it)",
			jpath, fmt.Sprintf(format, args...))
	}
	h, off, err := decodeJournalHeader(b)
	if err != nil {
		return nil, bad("its header (offset 0) does not check out: %v", err)
	}
	j := &legacyJournal{path: jpath, hdr: h}
	for i := 1; !allZero(b[off:]); i++ {
		payload, n, ok := nextRecord(b[off:])
		if !ok {
			return nil, bad("record %d at offset %d is cut short or fails its checksum", i, off)
		}
		if err := decodeOps(payload, journalBuckets(h.version), func(journalOp) error { return nil }); err != nil {
			return nil, bad("record %d at offset %d: %v", i, off, err)
		}
		j.records = append(j.records, payload)
		off += n
	}
	return j, nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// belongsTo refuses a journal that cannot be the continuation of the file
// r (size bytes): another page size, a checkpoint newer than the file, or
// a file that went on past the journal's last commit (each record was one
// commit after the checkpoint, so a file that crashed with this journal
// is at most that many transactions past it). The last is the stale
// journal: a crash's journal beside a file that was later closed cleanly
// or restored from a backup. Replaying it would take the file back to the
// old checkpoint and lose every commit since.
func (j *legacyJournal) belongsTo(r io.ReaderAt, size int64) error {
	m, err := newestMeta(r, size)
	if err != nil {
		return fmt.Errorf("journal %s: the log file is not a bbolt file (%w)", j.path, err)
	}
	last := j.hdr.txid + uint64(len(j.records))
	switch {
	case m.pageSize != int64(j.hdr.pageSize):
		return fmt.Errorf("journal %s has pages of %d bytes, the log file %d: it belongs to another file; nothing was replayed and the log file was not changed", j.path, j.hdr.pageSize, m.pageSize)
	case m.txid+1 < j.hdr.txid:
		return fmt.Errorf("journal %s starts at transaction %d, newer than the log file (transaction %d): the file was replaced (a restored backup?); nothing was replayed and the log file was not changed; if the file is the one to keep, move the journal away", j.path, j.hdr.txid, m.txid)
	case m.txid > last:
		return fmt.Errorf("journal %s ends at transaction %d, older than the log file (transaction %d): it is stale, left by an earlier crash of another copy; nothing was replayed and the log file was not changed; if the file is the one to keep, move the journal away", j.path, last, m.txid)
	}
	return nil
}

// replayTo writes a copy of the log file src (size bytes) with j
// replayed into it at dst, converted to this version's format, verified
// and synced; src is only read. It returns what the conversion said. On
// an error dst is removed.
func (j *legacyJournal) replayTo(src io.ReaderAt, size int64, dst string, now time.Time) (notes []string, err error) {
	if err := j.belongsTo(src, size); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(dst, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("replay journal %s: %w", j.path, err)
	}
	defer func() {
		_ = f.Close()
		if err != nil {
			_ = os.Remove(dst)
			err = fmt.Errorf("replay journal %s into a copy of the log file: %w; nothing was replayed and the log file was not changed", j.path, err)
		}
	}()
	if _, err := io.Copy(f, io.NewSectionReader(src, 0, size)); err != nil {
		return nil, err
	}
	if err := restoreMeta(f, j.hdr); err != nil {
		return nil, err
	}
	// The checkpoint's tree, before bbolt reads it.
	if _, err := verifyFile(f, size); err != nil {
		return nil, fmt.Errorf("the journal's checkpoint: %w", err)
	}
	db, err := bolt.Open(dst, 0o600, &bolt.Options{NoFreelistSync: noFreelistSync})
	if err != nil {
		return nil, err
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for i, rec := range j.records {
			if err := decodeOps(rec, journalBuckets(j.hdr.version), func(op journalOp) error { return applyOp(tx, op) }); err != nil {
				return fmt.Errorf("record %d: %w", i+1, err)
			}
		}
		notes, err = migrateLegacy(tx, now)
		return err
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	rep, err := verifyFile(f, fi.Size())
	if err == nil {
		err = rep.err()
	}
	if err != nil {
		return nil, fmt.Errorf("the replayed copy: %w", err)
	}
	if err := f.Sync(); err != nil {
		return nil, err
	}
	return append([]string{fmt.Sprintf("replayed the %d commits of journal %s", len(j.records), j.path)}, notes...), nil
}

// syncDir syncs the directory holding path, so a rename or a removal in it
// is durable.
func syncDir(path string) error {
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
