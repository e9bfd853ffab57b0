package acceptlog

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// Opening the log and recovering it from its journal (see durable.go).

// journalPath is where the journal of the log at path lives.
func journalPath(path string) string { return path + "-journal" }

// Open opens (creating if needed) the log stored at path and creates its
// buckets. A journal left by a process or machine that stopped without
// Close is replayed first (every acknowledged write comes back). It does
// not recover jobs left in StateForwarding: that is the relay's decision
// (see ByState). When another process (or another Log in this one) holds
// the file, Open fails after about a second with an error saying the file
// is locked.
func Open(path string, opts Options) (*Log, error) {
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	logf := opts.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	l := &Log{path: path, jpath: journalPath(path), now: now, logf: logf, groupWait: opts.GroupWait, identity: opts.Identity}
	if l.groupWait == 0 {
		l.groupWait = DefaultGroupWait
	}
	if err := l.open(opts.Synced || !journalSupported); err != nil {
		return nil, fmt.Errorf("open log %s: %w", path, err)
	}
	return l, nil
}

func (l *Log) open(synced bool) error {
	// The file is locked before its journal is even read: recovery writes
	// the file, and the journal of a running relay must not be touched.
	// bbolt is handed the locked file (flock on the same open file is a
	// no-op), so no other process gets in between.
	f, err := os.OpenFile(l.path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	handed := false
	defer func() {
		if !handed {
			_ = f.Close()
		}
	}()
	if err := lockFile(f, lockTimeout); err != nil {
		if errors.Is(err, berrors.ErrTimeout) {
			return fmt.Errorf("file is locked by another user of the log (another gmailrelay running?): %w", err)
		}
		return fmt.Errorf("lock: %w", err)
	}
	_ = os.Remove(l.jpath + ".tmp") // a checkpoint's unfinished journal
	hdr, records, exists, err := readJournal(l.jpath)
	if err != nil {
		return err
	}
	if hdr != nil {
		if err := restoreMeta(f, *hdr); err != nil {
			return fmt.Errorf("recover from journal %s: %w", l.jpath, err)
		}
	}
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if err := checkBoltFile(f, fi.Size()); err != nil {
		return err
	}
	bopts := &bolt.Options{Timeout: lockTimeout, NoFreelistSync: noFreelistSync,
		OpenFile: func(string, int, os.FileMode) (*os.File, error) { handed = true; return f, nil }}
	if !synced {
		l.mapping = max(minMapping, 2*fi.Size())
		bopts.InitialMmapSize = int(l.mapping)
	}
	db, err := bolt.Open(l.path, 0o600, bopts)
	if err != nil && !synced {
		// The large mapping was refused (an address-space limit, say):
		// bbolt has closed the file; open it again without the journal,
		// whose recovery does not depend on it.
		l.logf("acceptlog: mapping %s at %d MiB failed (%v); the log commits with bbolt's own syncs, without its journal", l.path, l.mapping>>20, err)
		l.mapping = 0
		return l.open(true)
	}
	if err != nil {
		return err
	}
	l.db, l.pageSize = db, db.Info().PageSize
	db.MaxBatchDelay = maxBatchDelay
	if err := l.recover(hdr, records, exists); err != nil {
		_ = db.Close()
		return err
	}
	migrated, indexed, idNote := 0, 0, ""
	err = db.Update(func(tx *bolt.Tx) error {
		var err error
		if idNote, err = l.openIdentity(tx); err != nil { // identitystore.go
			return err
		}
		// A file written before the prunable index existed gets it filled
		// from its jobs, and one written before the send index existed
		// gets it filled from its recent forwarding lines (the other
		// buckets are as old as the file).
		backfill := tx.Bucket(bucketPrunable) == nil && tx.Bucket(bucketJobs) != nil
		backfillSends := tx.Bucket(bucketSends) == nil && tx.Bucket(bucketLines) != nil
		for _, name := range allBuckets {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return fmt.Errorf("create bucket %s: %w", name, err)
			}
		}
		if backfill {
			if err := backfillPrunable(tx); err != nil {
				return err
			}
		}
		if backfillSends {
			n, err := backfillSendIndex(tx, l.now().Add(-sendsBackfillWindow))
			if err != nil {
				return fmt.Errorf("fill the send index: %w", err)
			}
			indexed = n
		}
		migrated, err = migrateJobLines(tx)
		return err
	})
	if err == nil && migrated > 0 {
		l.logf("acceptlog: %s: the job-lines index was moved into the %d job records and dropped (once; an older gmailrelay would not read the file right)", l.path, migrated)
	}
	if err == nil && idNote != "" {
		l.logf("%s", idNote)
	}
	if err == nil && indexed > 0 {
		l.logf("acceptlog: %s: the send index was created and filled with the %d sends of the last %s (the daily sending budget counts them)", l.path, indexed, sendsBackfillWindow)
	}
	if err == nil && !synced {
		// Journaling starts only now: the writes above are synced, and a
		// journal cannot replay bucket creation.
		err = l.checkpoint()
		db.NoSync = err == nil
	}
	if err != nil {
		if l.j != nil {
			l.releaseJournal()
		}
		_ = db.Close()
		return err
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

// checkBoltFile refuses a file of size bytes that bbolt cannot open
// safely: bbolt maps the file and trusts its meta page, and one counting
// pages past the end of the file (a truncated copy) makes the first read
// of them fault (SIGBUS) instead of failing. It finds the meta page bbolt
// would use, as bbolt does: the valid one (magic, version, checksum) of
// the two with the higher transaction id, the page size named by the
// first, or found by looking for the second at every page size bbolt
// tries. That meta's pages must all be in the file. An empty file passes
// (bbolt initialises it). bbolt exports none of this: the offsets are its
// file format's.
func checkBoltFile(r io.ReaderAt, size int64) error {
	if size == 0 {
		return nil
	}
	m, err := newestMeta(r, size)
	if err != nil {
		return fmt.Errorf("truncated or not a bbolt log (%w)", err)
	}
	if m.pgid < 2 || m.pgid > uint64(size/m.pageSize) {
		return fmt.Errorf("truncated or not a bbolt log (its meta page counts %d pages of %d bytes, the file has %d bytes)", m.pgid, m.pageSize, size)
	}
	if m.root >= m.pgid || (m.freelist >= m.pgid && m.freelist != boltNoFreelist) {
		return fmt.Errorf("truncated or not a bbolt log (its meta page points past its %d pages)", m.pgid)
	}
	return nil
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

// recover replays a journal's records (hdr not nil: Open restored the
// checkpoint's meta page) in one synced transaction and removes the
// journal. Every crash point is safe: until the replay's commit is synced
// the file's newest valid meta is the checkpoint's or the replay's, and
// the replay only wrote pages that the checkpoint's tree does not use (one
// transaction never reuses a page it frees), so the next Open restores the
// checkpoint and replays again; once it is synced the journal is no longer
// needed, and it is removed before anything else writes. A journal without
// a valid header (exists, hdr nil) belongs to a synced file and is removed.
func (l *Log) recover(hdr *journalHeader, records [][]byte, exists bool) error {
	if hdr != nil && len(records) > 0 {
		err := l.db.Update(func(tx *bolt.Tx) error {
			for i, rec := range records {
				if err := decodeOps(rec, journalBuckets(hdr.version), func(op journalOp) error { return applyOp(tx, op) }); err != nil {
					return fmt.Errorf("record %d: %w", i+1, err)
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("replay journal %s: %w", l.jpath, err)
		}
		l.logf("acceptlog: replayed %d commits from journal %s (the log was not closed cleanly)", len(records), l.jpath)
	}
	if !exists {
		return nil
	}
	if err := removeSynced(l.jpath); err != nil {
		return fmt.Errorf("remove journal: %w", err)
	}
	return nil
}

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

// readJournal reads the journal at path: its header (nil when there is no
// journal or its header is not valid) and the payloads of its valid records,
// up to the first torn or corrupt one. exists says whether the file exists.
func readJournal(path string) (_ *journalHeader, records [][]byte, exists bool, _ error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, false, nil
	}
	if err != nil {
		return nil, nil, false, fmt.Errorf("read journal: %w", err)
	}
	h, n, err := decodeJournalHeader(b)
	if err != nil {
		if len(b) >= len(journalMagic)+4 && string(b[:len(journalMagic)]) == journalMagic &&
			journalBuckets(binary.LittleEndian.Uint32(b[len(journalMagic):])) == nil {
			// Another gmailrelay's journal: its records must not be lost.
			return nil, nil, true, fmt.Errorf("journal %s: %w (written by another version of gmailrelay: open the file with that version)", path, err)
		}
		return nil, nil, true, nil
	}
	for b = b[n:]; ; {
		payload, k, ok := nextRecord(b)
		if !ok {
			break
		}
		records = append(records, payload)
		b = b[k:]
	}
	return &h, records, true, nil
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
	if err := fdatasync(f); err != nil {
		return fmt.Errorf("sync meta pages: %w", err)
	}
	return nil
}

// migrateJobLines converts a file written before issue 16's step 2, which
// kept a job's lines in the job-lines index (bucketJobLinesV1), to job
// records that list their lines' seqs, and deletes the index; it returns
// how many job records it rewrote (0 and nothing done when the file has no
// index). It runs inside Open's synced transaction: a crash leaves the file
// as it was, and the next Open converts it again.
//
// The seqs are taken from the lines bucket, not from the index: every line
// names its job, so the records come out right even when the index is not
// (a file a gmailrelay before this change reopened after this one had
// migrated it: that one created the index again, empty, and filled it for
// its new lines only). Every job record is rewritten in the binary form, a
// JSON one (from an older gmailrelay) included: JSON records hold no seqs.
// It holds every line's seq in memory (a few tens of bytes per line) and
// every job record it rewrites in the transaction, once.
func migrateJobLines(tx *bolt.Tx) (int, error) {
	if tx.Bucket(bucketJobLinesV1) == nil {
		return 0, nil
	}
	byJob := map[string][]uint64{}
	err := tx.Bucket(bucketLines).ForEach(func(k, v []byte) error {
		if len(k) != 8 {
			return fmt.Errorf("line key %x is not a seq", k)
		}
		var ln Line
		if err := decodeLine(v, &ln); err != nil {
			return fmt.Errorf("decode line %x: %w", k, err)
		}
		byJob[ln.MessageID] = append(byJob[ln.MessageID], binary.BigEndian.Uint64(k))
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("move the job-lines index into the jobs: %w", err)
	}
	jobs := tx.Bucket(bucketJobs)
	c := jobs.Cursor()
	n := 0
	for k, v := c.First(); k != nil; k, v = c.Next() {
		var j Job
		if err := decodeJob(v, &j); err != nil {
			return 0, fmt.Errorf("move the job-lines index into the jobs: decode job %s: %w", k, err)
		}
		rec := encodeJob(&j, encodeSeqs(byJob[string(k)]))
		if bytes.Equal(rec, v) {
			continue
		}
		key := bytes.Clone(k)
		if err := jobs.Put(key, rec); err != nil {
			return 0, fmt.Errorf("move the job-lines index into the jobs: put job %s: %w", key, err)
		}
		n++
		c.Seek(key) // a Put may move the cursor's page: back to where it was
	}
	if err := tx.DeleteBucket(bucketJobLinesV1); err != nil {
		return 0, fmt.Errorf("delete the job-lines index: %w", err)
	}
	return n, nil
}

// sendsBackfillWindow is how far back backfillSendIndex looks: the 48 h
// the retention pass keeps send-index entries for (retention's
// DefaultSendsKeep), twice the daily budget's 24 h.
const sendsBackfillWindow = 48 * time.Hour

// sendsClockSlack is how far past the window's start backfillSendIndex
// goes on walking back: lines are in time order but for a clock stepped
// back, and one such line must not end the walk early.
const sendsClockSlack = time.Hour

// backfillSendIndex fills the send index (bucketSends) of a file written
// before it existed from the forwarding lines dated at or after since,
// with the entries the write path (indexSends) would have made: the
// line's time, Message-ID and attempt under its job's mailbox. Without it
// the daily sending budget would start from zero on upgrade and the relay
// could send a second day's limit on top of today's sends. Lines are keyed
// by seq, in time order: the walk goes back from the newest and stops at
// the first line older than since (less sendsClockSlack). It returns how
// many entries it added; it runs in Open's synced transaction.
func backfillSendIndex(tx *bolt.Tx, since time.Time) (int, error) {
	idx, jobs := tx.Bucket(bucketSends), tx.Bucket(bucketJobs)
	stop := since.Add(-sendsClockSlack)
	mailboxes := map[string]string{}
	var key []byte
	n := 0
	c := tx.Bucket(bucketLines).Cursor()
	for k, v := c.Last(); k != nil; k, v = c.Prev() {
		var ln Line
		if err := decodeLine(v, &ln); err != nil {
			return n, fmt.Errorf("decode line %x: %w", k, err)
		}
		if ln.Time.Before(stop) {
			break
		}
		if ln.Kind != KindForwarding || ln.Time.Before(since) {
			continue
		}
		mailbox, ok := mailboxes[ln.MessageID]
		if !ok {
			rec := jobs.Get([]byte(ln.MessageID))
			if rec == nil {
				// A line without its job: Check reports it; the send
				// names no mailbox to count it against.
				continue
			}
			var j Job
			if err := decodeJob(rec, &j); err != nil {
				return n, fmt.Errorf("decode job %s: %w", ln.MessageID, err)
			}
			mailbox = j.Mailbox
			mailboxes[ln.MessageID] = mailbox
		}
		key = appendSendKey(key[:0], mailbox, ln.Time, ln.MessageID, ln.Attempt)
		if err := idx.Put(key, nil); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}
