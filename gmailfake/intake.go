package gmailfake

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/mail"
	"slices"
	"strings"
	"time"
)

// stored is a Message with what search, threading and the index need.
type stored struct {
	Message
	acct      *account
	seq       uint64
	historyID uint64
	msgIDKey  string   // Message-ID without angle brackets
	from      string   // the From field, decoded, lower case (for from:)
	subject   string   // subject without Re:/Fwd: prefixes, for threading
	refs      []string // In-Reply-To and References ids, without angle brackets
	drawn     bool     // visibleAt was drawn from a lag distribution
	visibleAt time.Time
}

// snapshotLocked is a copy safe to hand out.
func (s *Server) snapshotLocked(m *stored) Message {
	c := m.Message
	c.VisibleAt = m.StoredAt.Add(s.indexLag)
	if m.drawn {
		c.VisibleAt = m.visibleAt
	}
	c.LabelIDs = append([]string(nil), m.LabelIDs...)
	c.Raw = append([]byte(nil), m.Raw...)
	c.Bounced, c.Delayed = slices.Clone(m.Bounced), slices.Clone(m.Delayed)
	c.Trashed = slices.Contains(m.LabelIDs, labelTrash)
	return c
}

// visibleLocked reports whether search shows m at now.
func (s *Server) visibleLocked(m *stored, now time.Time) bool {
	if m.drawn {
		return !now.Before(m.visibleAt)
	}
	return !now.Before(m.StoredAt.Add(s.indexLag))
}

const (
	labelSent   = "SENT"
	labelInbox  = "INBOX"
	labelUnread = "UNREAD"
	labelTrash  = "TRASH"
	labelSpam   = "SPAM"
)

// nextCounterLocked advances the counter behind ids and history ids.
func (s *Server) nextCounterLocked() uint64 {
	s.counter++
	return s.counter
}

// newIDLocked returns a Gmail-style id: 16 hex digits that grow with time,
// as Gmail's do.
func (s *Server) newIDLocked(now time.Time) string {
	v := uint64(now.UnixMilli())<<20 | (s.nextCounterLocked() & 0xfffff)
	if v <= s.lastID {
		v = s.lastID + 1
	}
	s.lastID = v
	return fmt.Sprintf("%016x", v)
}

// gmailMessageIDLocked is a Message-ID in the shape Gmail generates.
func (s *Server) gmailMessageIDLocked(now time.Time, a *account) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "%d/%d/%s", s.nextCounterLocked(), now.UnixNano(), a.addr))
	return "<CA+" + base64.RawStdEncoding.EncodeToString(sum[:27]) + "@mail.gmail.com>"
}

// sendResult is what a send stored (or, folded, the copy it was folded
// into).
type sendResult struct {
	ID        string
	ThreadID  string
	LabelIDs  []string
	HistoryID uint64
}

// rewriteLocked decides whether the client's Message-ID is replaced in a
// send of account a.
func (s *Server) rewriteLocked(a *account, clientID string) bool {
	mode := s.rewrite.Mode
	if len(s.rewrite.Accounts) > 0 && !slices.ContainsFunc(s.rewrite.Accounts, func(x string) bool { return strings.EqualFold(x, a.addr) }) {
		mode = RewriteMalformed
	}
	switch mode {
	case RewriteNever:
		return false
	case RewriteAlways:
		return true
	case RewriteFraction:
		draw := s.rng.Float64() < s.rewrite.Fraction
		return draw || CheckMessageID(clientID) != nil
	}
	return CheckMessageID(clientID) != nil
}

// storeMessage applies Gmail's intake rules to raw for account a (daily
// limit, recipients required, a From that is neither the account nor a
// verified alias rewritten to the account, Message-ID
// added or rewritten, Date added, Sent-copy folding) and stores it, twice
// when duplicate is set.
func (s *Server) storeMessage(a *account, raw []byte, threadID string, duplicate bool) (sendResult, *apiError) {
	if len(raw) > maxMessageBytes {
		return sendResult{}, tooLarge()
	}
	m := parseRFC822(raw)
	rcpts, e := recipients(m)
	if e != nil {
		return sendResult{}, e
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	undelivered, e := s.dailyLimitLocked(a, now)
	if e != nil {
		return sendResult{}, e
	}
	changed := false
	if name, keep := a.keepsFromLocked(m.get("From")); !keep {
		m.set("From", (&mail.Address{Name: name, Address: a.addr}).String())
		changed = true
	}
	clientID := m.get("Message-ID")
	msgID, original := clientID, ""
	if normalizeMsgID(clientID) == "" {
		clientID = "" // none worth the name: Gmail adds one
		msgID = s.gmailMessageIDLocked(now, a)
		m.set("Message-ID", msgID)
		changed = true
	} else if s.rewriteLocked(a, clientID) {
		msgID, original = s.gmailMessageIDLocked(now, a), clientID
		m.set("Message-ID", msgID)
		changed = true
	}
	if m.get("Date") == "" {
		m.set("Date", now.Format(time.RFC1123Z))
		changed = true
	}
	d := delivery{clientKey: normalizeMsgID(clientID), storedKey: normalizeMsgID(msgID), undelivered: undelivered}
	if !undelivered {
		d.bounced, d.delayed = s.bounceSplit(a, rcpts)
	}
	if s.sentDedupe && !duplicate {
		for _, old := range a.msgs {
			if !old.Deleted && old.msgIDKey == d.storedKey && slices.Contains(old.LabelIDs, labelSent) {
				s.deliveredLocked(a, d, old, now)
				return sendResult{ID: old.ID, ThreadID: old.ThreadID, LabelIDs: slices.Clone(old.LabelIDs), HistoryID: old.historyID}, nil
			}
		}
	}
	if changed {
		raw = m.bytes()
	}
	labels := []string{labelSent}
	if slices.ContainsFunc(rcpts, func(addr string) bool { return strings.EqualFold(addr, a.addr) }) {
		labels = []string{labelSent, labelInbox, labelUnread} // a self-send is stored once
	}
	st := &stored{
		Message: Message{
			LabelIDs:          labels,
			MessageID:         msgID,
			OriginalMessageID: original,
			ClientMessageID:   clientID,
			Account:           a.addr,
			Raw:               raw,
			StoredAt:          now,
			Bounced:           d.bounced,
			Delayed:           d.delayed,
			Undelivered:       undelivered,
		},
		acct:     a,
		msgIDKey: d.storedKey,
		from:     fromKey(m.get("From")),
		subject:  threadSubject(decodeHeader(m.get("Subject"))),
		refs:     referencedIDs(m),
	}
	st.ThreadID = s.threadForLocked(a, threadID, st)
	res := s.addLocked(st, now)
	s.deliveredLocked(a, d, st, now)
	if duplicate {
		dup := *st
		dup.LabelIDs = slices.Clone(labels)
		s.addLocked(&dup, now)
		s.sentOnceMoreLocked(a, d, &dup, now)
	}
	return res, nil
}

// deliveredLocked records one accepted send of m (d: to whom it went) in
// the daily window and the deliveries, and schedules its reports.
func (s *Server) deliveredLocked(a *account, d delivery, m *stored, now time.Time) {
	if !d.undelivered {
		a.sends = append(a.sends, now)
	}
	s.sentOnceMoreLocked(a, d, m, now)
}

// sentOnceMoreLocked records a delivery of m outside the daily window (a
// duplicate the provider made), and schedules its reports.
func (s *Server) sentOnceMoreLocked(a *account, d delivery, m *stored, now time.Time) {
	a.deliveries = append(a.deliveries, d)
	if d.undelivered {
		a.counters.undelivered++
		return
	}
	a.counters.deliveries++
	s.scheduleReportsLocked(a, d, m, now)
}

func (s *Server) addLocked(st *stored, now time.Time) sendResult {
	a := st.acct
	st.ID = s.newIDLocked(now)
	if st.ThreadID == "" {
		st.ThreadID = st.ID
	}
	st.seq = s.nextCounterLocked()
	st.historyID = st.seq
	if !s.lagDist.IsZero() {
		st.drawn = true
		st.visibleAt = now.Add(s.lagDist.draw(s.rng))
		if s.order == IndexFIFO {
			if st.visibleAt.Before(a.lastVisible) {
				st.visibleAt = a.lastVisible
			}
			a.lastVisible = st.visibleAt
		}
	}
	a.msgs = append(a.msgs, st)
	s.byID[st.ID] = st
	s.historyAddedLocked(st)
	return sendResult{ID: st.ID, ThreadID: st.ThreadID, LabelIDs: slices.Clone(st.LabelIDs), HistoryID: st.historyID}
}

// threadForLocked applies Gmail's threading rule for sends: the requested
// thread is used when the message references (In-Reply-To/References) a
// message of that thread in the same account and the subjects match;
// otherwise the message starts a new thread ("" here).
func (s *Server) threadForLocked(a *account, threadID string, st *stored) string {
	if threadID == "" {
		return ""
	}
	for _, m := range a.msgs {
		if m.Deleted || m.ThreadID != threadID || m.subject != st.subject {
			continue
		}
		for _, ref := range st.refs {
			if ref == m.msgIDKey {
				return threadID
			}
		}
	}
	return ""
}

// fromKey is a From field as from: searches it: "name <address>" in lower
// case, the name decoded and unquoted (the field as it is when it does not
// parse).
func fromKey(v string) string {
	v = decodeHeader(v)
	if a, err := mail.ParseAddress(v); err == nil {
		v = a.Address
		if a.Name != "" {
			v = a.Name + " <" + a.Address + ">"
		}
	}
	return strings.ToLower(v)
}

func referencedIDs(m *rfcMessage) []string {
	var ids []string
	for _, v := range append(m.all("In-Reply-To"), m.all("References")...) {
		for _, f := range strings.Fields(strings.ReplaceAll(v, ">", "> ")) {
			if id := normalizeMsgID(f); id != "" {
				ids = append(ids, id)
			}
		}
	}
	return ids
}

// threadSubject strips reply and forward prefixes, as Gmail does when it
// compares subjects for threading.
func threadSubject(subj string) string {
	s := strings.TrimSpace(subj)
	for {
		l := strings.ToLower(s)
		cut := 0
		for _, p := range []string{"re:", "fwd:", "fw:", "aw:", "tr:"} {
			if strings.HasPrefix(l, p) {
				cut = len(p)
				break
			}
		}
		if cut == 0 {
			return strings.ToLower(s)
		}
		s = strings.TrimSpace(s[cut:])
	}
}

func tooLarge() *apiError {
	return &apiError{code: http.StatusRequestEntityTooLarge, reason: "uploadTooLarge",
		message: "Message too large: Gmail accepts at most 35 MB", domain: "global"}
}

// setTrashLocked trashes (trash true) or untrashes m: TRASH is added or
// removed, every other label kept (a trashed sent message keeps SENT).
func setTrashLocked(m *stored, trash bool) {
	m.LabelIDs = slices.DeleteFunc(m.LabelIDs, func(l string) bool { return l == labelTrash })
	if trash {
		m.LabelIDs = append(m.LabelIDs, labelTrash)
	}
}
