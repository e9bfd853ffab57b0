package acceptlog

import (
	"bytes"
	"context"
	"encoding/binary"
	"strconv"
	"time"

	"github.com/gmailrelay/gmailrelay"
	bolt "go.etcd.io/bbolt"
)

// bucketSends indexes every attempt handed to Gmail (every forwarding
// line) by mailbox and time, for the daily sending budget: key mailbox,
// 0x00, sortable time (8 bytes), Message-ID, 0x00, attempt; no value.
// Entries are never removed with the job's lines, so a resend counts even
// after retention; PruneSends drops the ones older than a cut-off.
var bucketSends = []byte("sends")

// appendSendKey appends the send-index key of one attempt to b.
func appendSendKey(b []byte, mailbox string, t time.Time, id string, attempt int) []byte {
	b = append(b, mailbox...)
	b = append(b, 0)
	b = binary.BigEndian.AppendUint64(b, sortableTime(t))
	b = append(b, id...)
	b = append(b, 0)
	return strconv.AppendInt(b, int64(attempt), 10)
}

// indexSends adds an entry for each forwarding line of lines (written for
// a job of mailbox).
func indexSends(w *writeTx, mailbox string, lines []gmailrelay.Line) error {
	for i := range lines {
		ln := &lines[i]
		if ln.Kind != gmailrelay.KindForwarding {
			continue
		}
		w.key = appendSendKey(w.key[:0], mailbox, ln.Time, ln.MessageID, ln.Attempt)
		if err := w.put(wSends, w.key, nil); err != nil {
			return err
		}
	}
	return nil
}

// SendTimes returns, oldest first, the times of the attempts handed to
// Gmail for mailbox at or after since (every forwarding line, resends
// included). The daily sending budget is counted from it.
func (l *Log) SendTimes(ctx context.Context, mailbox string, since time.Time) ([]time.Time, error) {
	var out []time.Time
	prefix := append([]byte(mailbox), 0)
	err := l.view(ctx, "send times", func(tx *bolt.Tx) error {
		out = nil
		c := tx.Bucket(bucketSends).Cursor()
		start := binary.BigEndian.AppendUint64(bytes.Clone(prefix), sortableTime(since))
		for k, _ := c.Seek(start); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
			out = append(out, timeIDKeyTime(k[len(prefix):]))
		}
		return nil
	})
	return out, err
}

// PruneSends removes the send-index entries older than before (of every
// mailbox) and returns how many it removed.
func (l *Log) PruneSends(ctx context.Context, before time.Time) (int, error) {
	n := 0
	err := l.commit(func(w *writeTx) error {
		n = 0
		b := w.tx.Bucket(bucketSends)
		var dead [][]byte
		err := b.ForEach(func(k, _ []byte) error {
			i := bytes.IndexByte(k, 0)
			if i < 0 || len(k) < i+9 {
				dead = append(dead, bytes.Clone(k))
				return nil
			}
			if timeIDKeyTime(k[i+1:]).Before(before) {
				dead = append(dead, bytes.Clone(k))
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, k := range dead {
			if err := w.delete(wSends, k); err != nil {
				return err
			}
		}
		n = len(dead)
		return nil
	})
	return n, err
}
