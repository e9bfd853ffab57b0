// Package gmailfake is an emulator of the part of Gmail's REST API that
// gmailrelay uses: users.messages.send (metadata and upload paths),
// users.messages.list (with the rfc822msgid:, OR, {…}, in: and label: search
// subset) and users.messages.get, at Gmail's own paths, with Gmail's JSON
// shapes, error JSON and quota costs, so that Google's Go client
// (google.golang.org/api/gmail/v1) talks to it unchanged.
//
// It also models the provider behaviours the relay must survive — search
// index lag, Message-ID rewriting, per-user quota, injected faults and
// duplicate storage — and exposes the provider's ground truth (the stored
// messages) through a control API under /_emulator/ and through Go methods.
//
// It is an emulator: a green run against it is evidence about the relay's
// logic, not a guarantee about Gmail.
package gmailfake

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"math"
	"net/http"
	"net/mail"
	"strings"
	"sync"
	"time"
)

// Quota costs of the calls the emulator serves, in Gmail's units.
const (
	CostSend = 100
	CostList = 5
	CostGet  = 5
)

// DefaultQuotaPerMinute is Gmail's documented per-user budget in units per
// minute.
const DefaultQuotaPerMinute = 15000

// DefaultAccount is the mailbox's primary address when Options.Account is
// empty.
const DefaultAccount = "me@example.com"

// Method names used by faults and in Stats.Calls.
const (
	MethodSend = "send"
	MethodList = "list"
	MethodGet  = "get"
)

// Fault actions.
const (
	// ActionError answers Gmail's error JSON for Fault.Status (default 500)
	// without storing anything.
	ActionError = "error"
	// ActionAcceptThenError stores the message, then answers Fault.Status
	// (default 500): a real ambiguous send. Send only.
	ActionAcceptThenError = "accept-then-error"
	// ActionLatency delays the answer by Fault.Latency.
	ActionLatency = "latency"
	// ActionDuplicate stores the message twice (two ids, one Message-ID) and
	// answers the first. Send only.
	ActionDuplicate = "duplicate"
)

// Options configures a Server. The zero value is a working emulator.
type Options struct {
	// IndexLag is how long after it was stored a message becomes visible to
	// messages.list; messages.get by id works at once. Measured on Now.
	IndexLag time.Duration
	// RewriteMessageID replaces the client's Message-ID with a Gmail-style
	// one (<CA+…@mail.gmail.com>), as public reports say Gmail sometimes does.
	RewriteMessageID bool
	// QuotaPerMinute is the per-user budget in units per minute; 0 means
	// DefaultQuotaPerMinute.
	QuotaPerMinute int
	// QuotaStatus is the status of an over-quota answer: 429
	// (rateLimitExceeded) or 403 (userRateLimitExceeded); 0 means 429.
	QuotaStatus int
	// Latency is added to the answer of every Gmail call, in real time. It is
	// spent after the call took effect, so a client that gives up during it
	// sees an ambiguous send.
	Latency time.Duration
	// Now is the clock for index lag, quota and timestamps; nil means
	// time.Now.
	Now func() time.Time
	// Token, when not empty, is the bearer token every Gmail call must carry
	// (401 authError otherwise). The control API is never authenticated.
	Token string
	// Account is the mailbox's primary address; "" means DefaultAccount.
	// userId must be "me" or this address, and a From with another address
	// is rewritten to it.
	Account string
}

// Message is one stored message: the provider's truth.
type Message struct {
	ID        string    // Gmail id, 16 hex digits
	ThreadID  string    // the thread's id (the id of its first message)
	LabelIDs  []string  // ["SENT"]
	MessageID string    // the stored Message-ID header, with angle brackets
	Raw       []byte    // the stored RFC 5322 message, after any rewriting
	StoredAt  time.Time // when it was stored, by Options.Now
}

// Fault is a provider-side fault for the next Count calls of Method.
type Fault struct {
	Method  string        // MethodSend, MethodList or MethodGet
	Action  string        // ActionError, ActionAcceptThenError, ActionLatency or ActionDuplicate
	Status  int           // answer status for error and accept-then-error; 0 means 500
	Count   int           // calls it applies to; 0 means 1, -1 means until cleared
	Latency time.Duration // delay before the answer; required for ActionLatency
}

// Stats counts what the emulator did since it started or was last reset.
type Stats struct {
	Calls       map[string]int // Gmail calls received, by method (send, list, get)
	QuotaUnits  int            // units charged, for calls that were not rate limited
	RateLimited int            // 429/403 quota answers given
}

// Server is the emulator. All its methods are safe for concurrent use.
type Server struct {
	now     func() time.Time
	account string
	token   string

	mu          sync.Mutex
	rewrite     bool
	indexLag    time.Duration
	quota       int
	quotaStatus int
	latency     time.Duration
	msgs        []*stored // in storage order
	byID        map[string]*stored
	counter     uint64 // ids, history ids, generated Message-IDs; survives Reset
	lastID      uint64
	faults      []*FaultState
	faultSeq    int
	calls       map[string]int
	units       int
	rateLimited int
	tokens      float64
	refilled    time.Time
}

// stored is a Message with what search and threading need.
type stored struct {
	Message
	seq       uint64
	historyID uint64
	msgIDKey  string   // Message-ID without angle brackets
	subject   string   // subject without Re:/Fwd: prefixes, for threading
	refs      []string // In-Reply-To and References ids, without angle brackets
}

// New returns an emulator configured by opts.
func New(opts Options) *Server {
	s := &Server{
		now:         opts.Now,
		account:     opts.Account,
		token:       opts.Token,
		rewrite:     opts.RewriteMessageID,
		indexLag:    opts.IndexLag,
		quotaStatus: opts.QuotaStatus,
		latency:     opts.Latency,
		byID:        map[string]*stored{},
		calls:       map[string]int{},
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.account == "" {
		s.account = DefaultAccount
	}
	if s.quotaStatus != http.StatusForbidden {
		s.quotaStatus = http.StatusTooManyRequests
	}
	s.setQuotaLocked(opts.QuotaPerMinute)
	return s
}

// Account is the mailbox's primary address.
func (s *Server) Account() string { return s.account }

// Count returns how many stored messages carry messageID (with or without
// angle brackets), whatever their visibility to search; "" counts every
// message.
func (s *Server) Count(messageID string) int {
	key := normalizeMsgID(messageID)
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, m := range s.msgs {
		if messageID == "" || m.msgIDKey == key {
			n++
		}
	}
	return n
}

// Messages returns copies of the stored messages carrying messageID (with or
// without angle brackets), oldest first; "" returns every message.
func (s *Server) Messages(messageID string) []Message {
	key := normalizeMsgID(messageID)
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Message
	for _, m := range s.msgs {
		if messageID != "" && m.msgIDKey != key {
			continue
		}
		c := m.Message
		c.LabelIDs = append([]string(nil), m.LabelIDs...)
		c.Raw = append([]byte(nil), m.Raw...)
		out = append(out, c)
	}
	return out
}

// SetRewriteMessageID switches Message-ID rewriting for later sends.
func (s *Server) SetRewriteMessageID(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rewrite = on
}

// SetIndexLag changes the search index lag; it applies to stored messages
// too (visibility is computed at search time).
func (s *Server) SetIndexLag(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.indexLag = d
}

// SetQuotaPerMinute changes the per-user budget (0 means
// DefaultQuotaPerMinute) and refills it.
func (s *Server) SetQuotaPerMinute(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setQuotaLocked(n)
}

func (s *Server) setQuotaLocked(n int) {
	if n <= 0 {
		n = DefaultQuotaPerMinute
	}
	s.quota = n
	s.tokens = float64(n)
	s.refilled = s.now()
}

// Stats returns a snapshot of the counters.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	calls := make(map[string]int, len(s.calls))
	for k, v := range s.calls {
		calls[k] = v
	}
	return Stats{Calls: calls, QuotaUnits: s.units, RateLimited: s.rateLimited}
}

// Reset drops every message and fault, refills the quota and zeroes the
// counters. Ids handed out later stay unique.
func (s *Server) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.msgs = nil
	s.byID = map[string]*stored{}
	s.faults = nil
	s.calls = map[string]int{}
	s.units = 0
	s.rateLimited = 0
	s.setQuotaLocked(s.quota)
}

// takeQuota charges cost units if the bucket holds them. The bucket holds at
// most one minute's budget and refills at quota/60 units per second of the
// injected clock. When it cannot pay, it returns the seconds until it can.
func (s *Server) takeQuotaLocked(cost int) (ok bool, retryAfter int) {
	now := s.now()
	rate := float64(s.quota) / 60
	if el := now.Sub(s.refilled); el > 0 {
		s.tokens = math.Min(float64(s.quota), s.tokens+el.Seconds()*rate)
		s.refilled = now
	}
	if s.tokens >= float64(cost) {
		s.tokens -= float64(cost)
		return true, 0
	}
	wait := int(math.Ceil((float64(cost) - s.tokens) / rate))
	return false, min(max(wait, 1), 60)
}

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
func (s *Server) gmailMessageIDLocked(now time.Time) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "%d/%d/%s", s.nextCounterLocked(), now.UnixNano(), s.account))
	return "<CA+" + base64.RawStdEncoding.EncodeToString(sum[:27]) + "@mail.gmail.com>"
}

// sendResult is what a send stored.
type sendResult struct {
	ID       string
	ThreadID string
	LabelIDs []string
}

// storeMessage applies Gmail's intake rules to raw (recipients required,
// From rewritten to the account, Message-ID added or rewritten, Date added)
// and stores it, twice when duplicate is set.
func (s *Server) storeMessage(raw []byte, threadID string, duplicate bool) (sendResult, *apiError) {
	if len(raw) > maxMessageBytes {
		return sendResult{}, tooLarge()
	}
	m := parseRFC822(raw)
	if e := recipients(m); e != nil {
		return sendResult{}, e
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	changed := false
	if from, err := mail.ParseAddress(m.get("From")); err != nil || !strings.EqualFold(from.Address, s.account) {
		name := ""
		if err == nil {
			name = from.Name
		}
		m.set("From", (&mail.Address{Name: name, Address: s.account}).String())
		changed = true
	}
	msgID := m.get("Message-ID")
	if s.rewrite || normalizeMsgID(msgID) == "" {
		msgID = s.gmailMessageIDLocked(now)
		m.set("Message-ID", msgID)
		changed = true
	}
	if m.get("Date") == "" {
		m.set("Date", now.Format(time.RFC1123Z))
		changed = true
	}
	if changed {
		raw = m.bytes()
	}
	st := &stored{
		Message: Message{
			LabelIDs:  []string{"SENT"},
			MessageID: msgID,
			Raw:       raw,
			StoredAt:  now,
		},
		msgIDKey: normalizeMsgID(msgID),
		subject:  threadSubject(decodeHeader(m.get("Subject"))),
		refs:     referencedIDs(m),
	}
	st.ThreadID = s.threadForLocked(threadID, st)
	res := s.addLocked(st, now)
	if duplicate {
		dup := *st
		dup.LabelIDs = []string{"SENT"}
		s.addLocked(&dup, now)
	}
	return res, nil
}

func (s *Server) addLocked(st *stored, now time.Time) sendResult {
	st.ID = s.newIDLocked(now)
	if st.ThreadID == "" {
		st.ThreadID = st.ID
	}
	st.seq = s.nextCounterLocked()
	st.historyID = st.seq
	s.msgs = append(s.msgs, st)
	s.byID[st.ID] = st
	return sendResult{ID: st.ID, ThreadID: st.ThreadID, LabelIDs: append([]string(nil), st.LabelIDs...)}
}

// threadForLocked applies Gmail's threading rule for sends: the requested
// thread is used when the message references (In-Reply-To/References) a
// message of that thread and the subjects match; otherwise the message
// starts a new thread ("" here).
func (s *Server) threadForLocked(threadID string, st *stored) string {
	if threadID == "" {
		return ""
	}
	for _, m := range s.msgs {
		if m.ThreadID != threadID || m.subject != st.subject {
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

// sleepCtx waits d in real time, or until ctx is done; it reports whether the
// full wait elapsed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
