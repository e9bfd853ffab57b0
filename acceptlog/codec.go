package acceptlog

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/gmailrelay/gmailrelay"
)

// Job and line records are stored in a compact binary form: a format byte,
// then the type's fields in the order of appendJob / appendLine: strings as
// a uvarint length and the bytes, integers as varints, bools gathered into
// one flags uvarint, times as a length byte (0: the zero time) and
// time.Time's binary form, string lists as a uvarint count and the strings.
// A record may end early: the fields after its end are zero, so a field
// added at the end needs no new format. Like every stored value, the
// record is followed by its checksum (record.go).
//
// The format byte is recordV2. recordV1 (the same fields, stored without a
// checksum) and JSON records ('{') are written by older gmailrelays: Open
// converts a file holding them once (migrate.go); an older gmailrelay
// refuses a recordV2 record as an unknown format instead of misreading it.
//
// A job record's last fields are the seqs of the job's lines, oldest
// first, stored like a string: a uvarint byte length, then a seq list (see
// seqList), and the lease's end. The seqs are the stored record's, not
// Job's: the log keeps them (Mutate appends the seqs of the lines it
// writes, Prune drops those it removes) and reads a job's lines through
// them.
const (
	recordV1 = 0x01
	recordV2 = 0x02
)

// maxTimeSize is the most appendTime writes: a length byte and time.Time's
// binary form (at most 16 bytes).
const maxTimeSize = 17

// errShortRecord: a record ends inside a field.
var errShortRecord = errors.New("record ends inside a field")

// Job flags.
const (
	jobRetryable = 1 << iota
	jobVerified
)

// Line flags.
const (
	lineRetryable = 1 << iota
	lineHandleSet // HandleKept is non-nil
	lineHandleKept
)

// encodeJob returns j's record, with seqs (a seqList's bytes) as the seqs
// of its lines, in one allocation.
func encodeJob(j *gmailrelay.Job, seqs []byte) []byte {
	return appendJob(make([]byte, 0, jobSize(j, seqs)), j, seqs)
}

// jobStrings are the strings of j's record.
func jobStrings(j *gmailrelay.Job) [11]string {
	return [...]string{j.MessageID, j.Key, j.Channel, j.Mailbox, j.Fingerprint, string(j.State),
		j.ThreadIDIn, j.GmailID, j.ThreadID, j.LastError, string(j.LastReason)}
}

// jobSize bounds the length of j's record (see appendJob).
func jobSize(j *gmailrelay.Job, seqs []byte) int {
	n := 1 + 9*binary.MaxVarintLen64 + 8*maxTimeSize + listSize(j.LabelIDs) + len(seqs)
	for _, s := range jobStrings(j) {
		n += binary.MaxVarintLen64 + len(s)
	}
	return n
}

// appendJob appends j's record to b (which jobSize(j, seqs) more bytes
// fit in without a new allocation).
func appendJob(b []byte, j *gmailrelay.Job, seqs []byte) []byte {
	strs := jobStrings(j)
	var flags uint64
	if j.Retryable {
		flags |= jobRetryable
	}
	if j.Verified {
		flags |= jobVerified
	}
	b = append(b, recordV2)
	for _, s := range strs[:7] { // identity and request
		b = appendString(b, s)
	}
	b = binary.AppendUvarint(b, flags)
	b = binary.AppendVarint(b, int64(j.Attempts))
	b = binary.AppendVarint(b, int64(j.Effects))
	b = appendString(b, j.GmailID)
	b = appendString(b, j.ThreadID)
	b = appendList(b, j.LabelIDs)
	b = binary.AppendVarint(b, int64(j.LastStatus))
	b = appendString(b, j.LastError)
	b = appendString(b, string(j.LastReason))
	b = appendTime(b, j.NextCheckAt)
	b = binary.AppendVarint(b, int64(j.Checks))
	b = binary.AppendVarint(b, int64(j.VerifyLooks))
	b = appendTime(b, j.AmbiguousAt)
	b = appendTime(b, j.SendAt)
	b = appendTime(b, j.CreatedAt)
	b = appendTime(b, j.UpdatedAt)
	b = appendTime(b, j.PrunedAt)
	b = binary.AppendUvarint(b, uint64(len(seqs)))
	b = append(b, seqs...)
	// Added after the seqs: a record without them (older) reads as zero.
	b = appendTime(b, j.LeaseUntil)
	b = binary.AppendVarint(b, int64(j.Bounced))
	return binary.AppendVarint(b, int64(j.Delayed))
}

// decodeJob reads a record written by encodeJob or an older JSON one. The
// strings of a binary record share one allocation.
func decodeJob(v []byte, j *gmailrelay.Job) error {
	_, err := decodeJobRecord(v, j)
	return err
}

// decodeJobRecord is decodeJob that also returns the seqs of the job's
// lines as stored (empty when the record has none). They share the
// strings' allocation.
func decodeJobRecord(v []byte, j *gmailrelay.Job) (seqList, error) {
	if len(v) > 0 && v[0] == '{' {
		return "", json.Unmarshal(v, j)
	}
	d, err := newDecoder(v)
	if err != nil {
		return "", err
	}
	*j = gmailrelay.Job{
		MessageID:   d.string(),
		Key:         d.string(),
		Channel:     d.string(),
		Mailbox:     d.string(),
		Fingerprint: d.string(),
		State:       gmailrelay.State(d.string()),
		ThreadIDIn:  d.string(),
	}
	flags := d.uvarint()
	j.Retryable, j.Verified = flags&jobRetryable != 0, flags&jobVerified != 0
	j.Attempts = d.int()
	j.Effects = d.int()
	j.GmailID = d.string()
	j.ThreadID = d.string()
	j.LabelIDs = d.list()
	j.LastStatus = d.int()
	j.LastError = d.string()
	j.LastReason = gmailrelay.Reason(d.string())
	j.NextCheckAt = d.time()
	j.Checks = d.int()
	j.VerifyLooks = d.int()
	j.AmbiguousAt = d.time()
	j.SendAt = d.time()
	j.CreatedAt = d.time()
	j.UpdatedAt = d.time()
	j.PrunedAt = d.time()
	seqs := seqList(d.string())
	j.LeaseUntil = d.time()
	j.Bounced = d.int()
	j.Delayed = d.int()
	if d.err != nil {
		return "", d.err
	}
	return seqs, nil
}

// seqList is the seqs of a job's lines as a job record stores them: each a
// uvarint, the first seq, then every later one minus the one before it
// (never 0: a job's seqs are strictly increasing). A job that went through
// review, resends and verify passes has dozens of lines; their seqs take a
// byte or two each.
type seqList string

// appendSeq appends seq to the list enc whose last seq is last (0 when enc
// is empty); seq must be greater than last.
func appendSeq(enc []byte, last, seq uint64) []byte {
	return binary.AppendUvarint(enc, seq-last)
}

// each calls fn with each seq of the list, in order, until fn returns
// false, and returns the last seq it read. A list that does not parse (a
// cut varint, a delta of 0, a seq past 2^64) is an error.
func (s seqList) each(fn func(seq uint64) bool) (last uint64, err error) {
	for len(s) > 0 {
		delta, n := uvarint(string(s))
		if n <= 0 {
			return last, errors.New("line seqs: bad varint")
		}
		s = s[n:]
		if delta == 0 || last+delta < last {
			return last, fmt.Errorf("line seqs: %d after %d is not increasing", last+delta, last)
		}
		last += delta
		if !fn(last) {
			break
		}
	}
	return last, nil
}

// last returns the list's last seq (0 when empty).
func (s seqList) last() (uint64, error) {
	return s.each(func(uint64) bool { return true })
}

// seqs returns the list's seqs.
func (s seqList) seqs() ([]uint64, error) {
	var out []uint64
	_, err := s.each(func(seq uint64) bool { out = append(out, seq); return true })
	return out, err
}

// encodeSeqs returns seqs (strictly increasing) as a seqList's bytes.
func encodeSeqs(seqs []uint64) []byte {
	var b []byte
	var last uint64
	for _, seq := range seqs {
		b = appendSeq(b, last, seq)
		last = seq
	}
	return b
}

// encodeLine returns ln's record in one allocation.
func encodeLine(ln *gmailrelay.Line) []byte {
	return appendLine(make([]byte, 0, lineSize(ln)), ln)
}

// lineSize bounds the length of ln's record (see appendLine).
func lineSize(ln *gmailrelay.Line) int {
	n := 1 + 7*binary.MaxVarintLen64 + maxTimeSize + listSize(ln.LabelIDs)
	for _, s := range [...]string{ln.MessageID, string(ln.Kind), string(ln.State), string(ln.Reason), ln.Source,
		ln.GmailID, ln.ThreadID, ln.Error, ln.Query, ln.Witness, ln.RuleID, ln.Mode,
		ln.StoredMessageID, ln.Channel, ln.Actor, ln.Note, ln.Recipient, ln.Action, ln.DSNStatus, ln.Diagnostic} {
		n += binary.MaxVarintLen64 + len(s)
	}
	return n
}

// appendLine appends ln's record to b (which lineSize(ln) more bytes fit
// in without a new allocation).
func appendLine(b []byte, ln *gmailrelay.Line) []byte {
	var flags uint64
	if ln.Retryable {
		flags |= lineRetryable
	}
	if ln.HandleKept != nil {
		flags |= lineHandleSet
		if *ln.HandleKept {
			flags |= lineHandleKept
		}
	}
	b = append(b, recordV2)
	b = binary.AppendUvarint(b, ln.Seq)
	b = appendTime(b, ln.Time)
	b = appendString(b, ln.MessageID)
	b = binary.AppendVarint(b, int64(ln.Attempt))
	b = appendString(b, string(ln.Kind))
	b = appendString(b, string(ln.State))
	b = appendString(b, string(ln.Reason))
	b = binary.AppendUvarint(b, flags)
	b = appendString(b, ln.Source)
	b = appendString(b, ln.GmailID)
	b = appendString(b, ln.ThreadID)
	b = appendList(b, ln.LabelIDs)
	b = binary.AppendVarint(b, int64(ln.Status))
	b = appendString(b, ln.Error)
	b = appendString(b, ln.Query)
	b = binary.AppendVarint(b, int64(ln.Hits))
	b = binary.AppendVarint(b, int64(ln.SentHits))
	b = binary.AppendVarint(b, int64(ln.Check))
	b = appendString(b, ln.Witness)
	b = appendString(b, ln.RuleID)
	b = appendString(b, ln.Mode)
	b = appendString(b, ln.StoredMessageID)
	b = appendString(b, ln.Channel)
	b = appendString(b, ln.Actor)
	b = appendString(b, ln.Note)
	// Added after Note: an older record ends here and reads them as "".
	b = appendString(b, ln.Recipient)
	b = appendString(b, ln.Action)
	b = appendString(b, ln.DSNStatus)
	return appendString(b, ln.Diagnostic)
}

// decodeLine reads a record written by encodeLine or an older JSON one.
func decodeLine(v []byte, ln *gmailrelay.Line) error {
	if len(v) > 0 && v[0] == '{' {
		return json.Unmarshal(v, ln)
	}
	d, err := newDecoder(v)
	if err != nil {
		return err
	}
	*ln = gmailrelay.Line{Seq: d.uvarint(), Time: d.time(), MessageID: d.string(), Attempt: d.int()}
	ln.Kind = gmailrelay.Kind(d.string())
	ln.State = gmailrelay.State(d.string())
	ln.Reason = gmailrelay.Reason(d.string())
	flags := d.uvarint()
	ln.Retryable = flags&lineRetryable != 0
	if flags&lineHandleSet != 0 {
		kept := flags&lineHandleKept != 0
		ln.HandleKept = &kept
	}
	ln.Source = d.string()
	ln.GmailID = d.string()
	ln.ThreadID = d.string()
	ln.LabelIDs = d.list()
	ln.Status = d.int()
	ln.Error = d.string()
	ln.Query = d.string()
	ln.Hits = d.int()
	ln.SentHits = d.int()
	ln.Check = d.int()
	ln.Witness = d.string()
	ln.RuleID = d.string()
	ln.Mode = d.string()
	ln.StoredMessageID = d.string()
	ln.Channel = d.string()
	ln.Actor = d.string()
	ln.Note = d.string()
	ln.Recipient = d.string()
	ln.Action = d.string()
	ln.DSNStatus = d.string()
	ln.Diagnostic = d.string()
	return d.err
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func listSize(l []string) int {
	n := binary.MaxVarintLen64
	for _, s := range l {
		n += binary.MaxVarintLen64 + len(s)
	}
	return n
}

func appendList(b []byte, l []string) []byte {
	b = binary.AppendUvarint(b, uint64(len(l)))
	for _, s := range l {
		b = appendString(b, s)
	}
	return b
}

// appendTime appends t as a length byte and time.Time's binary form (its
// instant and zone offset; the zero time is the length 0). Decoding gives
// the time JSON decoding gives: UTC, Local when the offset is Local's, or a
// fixed zone.
func appendTime(b []byte, t time.Time) []byte {
	if t.IsZero() {
		return append(b, 0)
	}
	if _, off := t.Zone(); off == 0 {
		t = t.UTC() // as JSON's "Z" decodes
	}
	at := len(b)
	b = append(b, 0)
	b, err := t.AppendBinary(b)
	if err != nil {
		// A zone offset that is not a whole minute (before 1972, in a
		// few zones): keep the instant, in UTC.
		b, _ = t.UTC().AppendBinary(b[:at+1])
	}
	b[at] = byte(len(b) - at - 1)
	return b
}

// decoder reads a binary record. The first error sticks; every later read
// gives a zero value. Reading past the end gives zero values too (a field
// the record predates).
type decoder struct {
	s   string // the record after its format byte, copied once
	err error
}

func newDecoder(v []byte) (decoder, error) {
	switch {
	case len(v) == 0:
		return decoder{}, errors.New("empty record")
	case v[0] != recordV2 && v[0] != recordV1:
		return decoder{}, fmt.Errorf("unknown record format %#x", v[0])
	}
	return decoder{s: string(v[1:])}, nil
}

func (d *decoder) fail(err error) {
	if d.err == nil {
		d.err = err
	}
	d.s = ""
}

func (d *decoder) uvarint() uint64 {
	if d.s == "" {
		return 0
	}
	x, n := uvarint(d.s)
	if n <= 0 {
		d.fail(errors.New("bad varint"))
		return 0
	}
	d.s = d.s[n:]
	return x
}

// uvarint is binary.Uvarint on a string: the value at the start of s and
// its length, or n <= 0 when s does not start with a valid uvarint.
func uvarint(s string) (x uint64, n int) {
	var shift uint
	for i := 0; i < len(s) && i < binary.MaxVarintLen64; i++ {
		c := s[i]
		if c < 0x80 {
			if i == binary.MaxVarintLen64-1 && c > 1 {
				return 0, -1
			}
			return x | uint64(c)<<shift, i + 1
		}
		x |= uint64(c&0x7f) << shift
		shift += 7
	}
	return 0, -1
}

func (d *decoder) int() int {
	u := d.uvarint()
	x := int64(u >> 1)
	if u&1 != 0 {
		x = ^x
	}
	return int(x)
}

func (d *decoder) string() string {
	n := d.uvarint()
	if n > uint64(len(d.s)) {
		d.fail(errShortRecord)
		return ""
	}
	s := d.s[:n]
	d.s = d.s[n:]
	return s
}

func (d *decoder) list() []string {
	n := d.uvarint()
	if n == 0 {
		return nil
	}
	if n > uint64(len(d.s)) { // each string takes at least a byte
		d.fail(errShortRecord)
		return nil
	}
	l := make([]string, n)
	for i := range l {
		l[i] = d.string()
	}
	return l
}

func (d *decoder) time() time.Time {
	if d.s == "" {
		return time.Time{}
	}
	n := int(d.s[0])
	if n == 0 {
		d.s = d.s[1:]
		return time.Time{}
	}
	if n+1 > len(d.s) {
		d.fail(errShortRecord)
		return time.Time{}
	}
	var t time.Time
	if err := t.UnmarshalBinary([]byte(d.s[1 : n+1])); err != nil {
		d.fail(fmt.Errorf("time: %w", err))
		return time.Time{}
	}
	d.s = d.s[n+1:]
	return t
}
