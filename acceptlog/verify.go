package acceptlog

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
)

// verifyFile reads a bbolt file through r (size bytes), page by page, as
// plain bytes: the meta pages, every page of the tree the newest meta
// names, and the stored free list if any. It finds what would make bbolt
// fault, loop or misread — a page id past the file, a page reached twice,
// a page of the wrong type, an element outside its page, keys out of
// order, a free page that is also in use — and, in a log of the current
// format, every record whose checksum fails and every bucket whose record
// count differs from the one stored in the meta bucket.
//
// bbolt trusts its file: it maps it and follows its pointers, and some of
// its walks run in goroutines of its own, where a fault on a damaged page
// kills the process. So the log verifies the file this way before bbolt
// reads anything of it (Open, Check), and a damaged file is refused with
// the damage named, never a crash. Reading through r (not a mapping) and
// checking every offset makes the walk itself safe on any bytes.
//
// The format is bbolt's (go.etcd.io/bbolt/internal/common: page.go,
// inbucket.go), which bbolt does not export: a page starts with its id
// (uint64), flags (uint16), element count (uint16) and overflow (uint32);
// a branch element is pos, ksize (uint32) and a child's page id (uint64),
// a leaf element flags, pos, ksize and vsize (uint32), pos counting from
// the element itself; a bucket's value is its root page id and sequence
// (uint64), followed by its inline page when the root is 0. Little-endian.
func verifyFile(r io.ReaderAt, size int64) (*fileReport, error) {
	m, err := bothMetas(r, size)
	if err != nil {
		return nil, err
	}
	v := &verifier{r: r, ps: m.pageSize, pgid: m.pgid, seen: make([]bool, m.pgid),
		rep: &fileReport{buckets: map[string]*bucketReport{}, txid: m.txid}}
	v.seen[0], v.seen[1] = true, true
	if m.freelist != boltNoFreelist {
		if err := v.freelist(m.freelist); err != nil {
			return nil, err
		}
	}
	// The top-level buckets first: whether the file has a meta bucket
	// says whether its records carry checksums.
	type top struct{ name, header []byte }
	var tops []top
	var last []byte
	err = v.tree(m.root, "the root", 0, keyRange{}, func(k, val []byte, isBucket bool) error {
		if !isBucket {
			return structural("a value %q outside every bucket", k)
		}
		if last != nil && bytes.Compare(k, last) <= 0 {
			return structural("the root: buckets out of order at %q", k)
		}
		last = k
		tops = append(tops, top{bytes.Clone(k), bytes.Clone(val)})
		return nil
	})
	if err != nil {
		return nil, err
	}
	v.rep.sealed = slices.ContainsFunc(tops, func(t top) bool { return bytes.Equal(t.name, bucketMeta) })
	for _, t := range tops {
		if err := v.child(t.name, t.header); err != nil {
			return nil, err
		}
	}
	for id, free := range v.free {
		if free && v.seen[id] {
			return nil, structural("page %d is both free and in use", id)
		}
	}
	v.rep.compareCounts()
	return v.rep, nil
}

// fileReport is what verifyFile found.
type fileReport struct {
	txid uint64
	// sealed: the file has a meta bucket, so its records carry checksums.
	sealed  bool
	buckets map[string]*bucketReport // the top-level buckets, by name
	// metaCounts are the record counts stored in the meta bucket.
	metaCounts map[string]int64
	// format is the meta bucket's format (0 when it has none).
	format int
	// damaged are the records that fail their checksum and the counts
	// that differ, each a DamageError.
	damaged []error
}

// bucketReport is what verifyFile found in one top-level bucket.
type bucketReport struct {
	records  int64
	sequence uint64
	lastKey  []byte // the last key (the lines bucket's newest seq)
}

// err returns the damage found, as one error (nil when none).
func (r *fileReport) err() error {
	if len(r.damaged) == 0 {
		return nil
	}
	return &damageList{r.damaged}
}

// compareCounts adds a damage for every bucket whose stored record count
// differs from the records found, and for a lines bucket whose sequence is
// behind its newest line.
func (r *fileReport) compareCounts() {
	if !r.sealed {
		return
	}
	for _, name := range countedBuckets {
		b := r.buckets[string(name)]
		if bytes.Equal(name, bucketFolds) && r.format < formatFolds {
			continue // built when Open upgrades the file
		}
		if b == nil {
			r.damaged = append(r.damaged, &DamageError{What: "bucket " + string(name), Err: errors.New("missing")})
			continue
		}
		want, ok := r.metaCounts[string(name)]
		switch {
		case !ok:
			r.damaged = append(r.damaged, &DamageError{What: describeRecord(bucketMeta, recordCountKey(name)), Err: errors.New("missing")})
		case want != b.records:
			r.damaged = append(r.damaged, &DamageError{What: "bucket " + string(name),
				Err: fmt.Errorf("holds %d records, the log counted %d: records are missing or were added outside the log", b.records, want)})
		}
	}
	if l := r.buckets[string(bucketLines)]; l != nil && len(l.lastKey) == 8 && binary.BigEndian.Uint64(l.lastKey) > l.sequence {
		r.damaged = append(r.damaged, &DamageError{What: "bucket lines",
			Err: fmt.Errorf("sequence %d is behind its newest line %d", l.sequence, binary.BigEndian.Uint64(l.lastKey))})
	}
}

// damageList is several damaged records, each named.
type damageList struct{ errs []error }

func (d *damageList) Error() string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%d damaged record(s): ", len(d.errs))
	for i, e := range d.errs {
		if i > 0 {
			b.WriteString("; ")
		}
		if i == 20 {
			fmt.Fprintf(&b, "and %d more (gmailrelay check names each)", len(d.errs)-20)
			break
		}
		b.WriteString(e.Error())
	}
	return b.String()
}

func (d *damageList) Unwrap() []error { return d.errs }

// structural is damage to the file's structure: bbolt cannot read it.
func structural(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrDamaged, fmt.Sprintf(format, args...))
}

// bbolt's page layout.
const (
	pageHeaderSize  = 16
	elementSize     = 16
	branchPageFlag  = 0x01
	leafPageFlag    = 0x02
	freelistFlag    = 0x10
	bucketLeafFlag  = 0x01
	inBucketSize    = 16
	maxTreeDepth    = 64
	freelistCountFF = 0xFFFF
)

type verifier struct {
	r    io.ReaderAt
	ps   int64
	pgid uint64 // pages 0..pgid-1 are the file's
	seen []bool
	free map[uint64]bool
	rep  *fileReport
}

// page reads page id with its overflow pages, and marks them seen.
func (v *verifier) page(id uint64, path string) ([]byte, error) {
	if id < 2 || id >= v.pgid {
		return nil, structural("%s: page %d outside the file's pages 2..%d", path, id, v.pgid-1)
	}
	hdr := make([]byte, pageHeaderSize)
	if _, err := v.r.ReadAt(hdr, int64(id)*v.ps); err != nil {
		return nil, fmt.Errorf("read page %d: %w", id, err)
	}
	if got := binary.LittleEndian.Uint64(hdr); got != id {
		return nil, structural("%s: page %d says it is page %d", path, id, got)
	}
	overflow := uint64(binary.LittleEndian.Uint32(hdr[12:]))
	if overflow >= v.pgid-id {
		return nil, structural("%s: page %d runs %d pages past the file's end", path, id, overflow)
	}
	for i := id; i <= id+overflow; i++ {
		if v.seen[i] {
			return nil, structural("%s: page %d is reached twice", path, i)
		}
		v.seen[i] = true
	}
	p := make([]byte, int64(overflow+1)*v.ps)
	if _, err := v.r.ReadAt(p, int64(id)*v.ps); err != nil {
		return nil, fmt.Errorf("read page %d: %w", id, err)
	}
	return p, nil
}

// freelist reads the stored free list at page id.
func (v *verifier) freelist(id uint64) error {
	p, err := v.page(id, "free list")
	if err != nil {
		return err
	}
	if binary.LittleEndian.Uint16(p[8:]) != freelistFlag {
		return structural("free list: page %d is not a free list page", id)
	}
	n, at := uint64(binary.LittleEndian.Uint16(p[10:])), uint64(pageHeaderSize)
	if n == freelistCountFF {
		n, at = binary.LittleEndian.Uint64(p[pageHeaderSize:]), pageHeaderSize+8
	}
	if n > (uint64(len(p))-at)/8 {
		return structural("free list: %d ids do not fit its page", n)
	}
	v.free = map[uint64]bool{}
	for i := range n {
		f := binary.LittleEndian.Uint64(p[at+8*i:])
		if f < 2 || f >= v.pgid {
			return structural("free list: page %d outside the file's pages", f)
		}
		v.free[f] = true
	}
	return nil
}

// child walks the top-level bucket name whose header (its value in the
// root) is header.
func (v *verifier) child(name, header []byte) error {
	if len(header) < inBucketSize {
		return structural("bucket %q: header cut short", name)
	}
	rep := &bucketReport{sequence: binary.LittleEndian.Uint64(header[8:])}
	v.rep.buckets[string(name)] = rep
	path := "bucket " + string(name)
	var last []byte
	each := func(key, value []byte, isBucket bool) error {
		if last != nil && bytes.Compare(key, last) <= 0 {
			return structural("%s: keys out of order at %x", path, key)
		}
		last = key
		if isBucket {
			return structural("%s holds a bucket %q", path, key)
		}
		rep.records++
		v.record(name, key, value)
		return nil
	}
	var err error
	if root := binary.LittleEndian.Uint64(header); root == 0 {
		err = v.elements(header[inBucketSize:], path, 1, keyRange{}, each)
	} else {
		err = v.tree(root, path, 1, keyRange{}, each)
	}
	rep.lastKey = bytes.Clone(last)
	return err
}

// record checks one record of a top-level bucket: its checksum, in a
// sealed file; the meta bucket's record counts are kept for
// compareCounts.
func (v *verifier) record(bucket, key, value []byte) {
	if !v.rep.sealed {
		return
	}
	body, err := unseal(bucket, key, value)
	if err != nil {
		v.rep.damaged = append(v.rep.damaged, &DamageError{What: describeRecord(bucket, key), Err: err})
		return
	}
	if !bytes.Equal(bucket, bucketMeta) {
		return
	}
	if bytes.Equal(key, metaFormat) {
		v.rep.format, _ = strconv.Atoi(string(body))
	}
	if name, ok := bytes.CutPrefix(key, []byte("records/")); ok && len(body) == 8 {
		if v.rep.metaCounts == nil {
			v.rep.metaCounts = map[string]int64{}
		}
		v.rep.metaCounts[string(name)] = int64(binary.BigEndian.Uint64(body))
	}
}

// keyRange bounds the keys of a subtree: lo <= key < hi, nil meaning
// unbounded. A branch page's element i leads to the subtree holding the
// keys from its key up to the next element's: bbolt finds a key (Get, Seek)
// through those branch keys, and checks them when it opens a file to write
// (its free-page scan), where a key out of order kills the process.
type keyRange struct{ lo, hi []byte }

// holds reports whether k is inside r.
func (r keyRange) holds(k []byte) bool {
	return (r.lo == nil || bytes.Compare(k, r.lo) >= 0) && (r.hi == nil || bytes.Compare(k, r.hi) < 0)
}

// tree walks the pages of the tree rooted at page id, whose keys must lie
// in r.
func (v *verifier) tree(id uint64, path string, depth int, r keyRange, each func(k, v []byte, isBucket bool) error) error {
	if depth > maxTreeDepth {
		return structural("%s: tree deeper than %d", path, maxTreeDepth)
	}
	p, err := v.page(id, path)
	if err != nil {
		return err
	}
	return v.elements(p, path, depth, r, each)
}

// elements walks the elements of page p (a branch or a leaf), whose keys
// must lie in r, in order.
func (v *verifier) elements(p []byte, path string, depth int, r keyRange, each func(k, v []byte, isBucket bool) error) error {
	if len(p) < pageHeaderSize {
		return structural("%s: page cut short", path)
	}
	flags, n := binary.LittleEndian.Uint16(p[8:]), int(binary.LittleEndian.Uint16(p[10:]))
	if pageHeaderSize+n*elementSize > len(p) {
		return structural("%s: %d elements do not fit their page", path, n)
	}
	span := func(at int, pos, k, val uint32) ([]byte, []byte, error) {
		start := uint64(at) + uint64(pos)
		end := start + uint64(k) + uint64(val)
		if end > uint64(len(p)) {
			return nil, nil, structural("%s: an element runs past its page", path)
		}
		return p[start : start+uint64(k)], p[start+uint64(k) : end], nil
	}
	var prev []byte
	inOrder := func(k []byte, i int) error {
		if !r.holds(k) || (i > 0 && bytes.Compare(k, prev) <= 0) {
			return structural("%s: key %x out of order (its page's keys must follow one another, inside the range its parent gives)", path, k)
		}
		prev = k
		return nil
	}
	switch {
	case flags == branchPageFlag:
		keys := make([][]byte, n)
		for i := range n {
			at := pageHeaderSize + i*elementSize
			e := p[at:]
			k, _, err := span(at, binary.LittleEndian.Uint32(e), binary.LittleEndian.Uint32(e[4:]), 0)
			if err != nil {
				return err
			}
			if err := inOrder(k, i); err != nil {
				return err
			}
			keys[i] = k
		}
		for i := range n {
			sub := keyRange{lo: keys[i], hi: r.hi}
			if i+1 < n {
				sub.hi = keys[i+1]
			}
			e := p[pageHeaderSize+i*elementSize:]
			if err := v.tree(binary.LittleEndian.Uint64(e[8:]), path, depth+1, sub, each); err != nil {
				return err
			}
		}
	case flags == leafPageFlag:
		for i := range n {
			at := pageHeaderSize + i*elementSize
			e := p[at:]
			k, val, err := span(at, binary.LittleEndian.Uint32(e[4:]), binary.LittleEndian.Uint32(e[8:]), binary.LittleEndian.Uint32(e[12:]))
			if err != nil {
				return err
			}
			if err := inOrder(k, i); err != nil {
				return err
			}
			if err := each(k, val, binary.LittleEndian.Uint32(e)&bucketLeafFlag != 0); err != nil {
				return err
			}
		}
	default:
		// bbolt asserts that a page has exactly one type flag.
		return structural("%s: a page of type %#x where a branch or leaf belongs", path, flags)
	}
	return nil
}

// bothMetas checks both meta pages and returns the newest. Unlike bbolt,
// which opens the other one when the newest fails its checksum, the log
// refuses a file with a damaged meta page: the older meta is the state
// before the last commit, and opening it would lose that commit without
// a word.
func bothMetas(r io.ReaderAt, size int64) (boltMeta, error) {
	m, err := newestMeta(r, size)
	if err != nil {
		return boltMeta{}, fmt.Errorf("%w (not a bbolt file: %v)", ErrNotALog, err)
	}
	for slot := range int64(2) {
		if _, err := readMeta(r, slot*m.pageSize, size); err != nil {
			return boltMeta{}, structural("meta page %d: %v (a damaged file; opening the other would lose the last commit)", slot, err)
		}
	}
	if m.pgid < 2 || m.pgid > uint64(size/m.pageSize) {
		return boltMeta{}, structural("the meta page counts %d pages of %d bytes, the file has %d bytes (truncated?)", m.pgid, m.pageSize, size)
	}
	if m.root < 2 || m.root >= m.pgid || (m.freelist != boltNoFreelist && (m.freelist < 2 || m.freelist >= m.pgid)) {
		return boltMeta{}, structural("the meta page points past the file's %d pages", m.pgid)
	}
	return m, nil
}
