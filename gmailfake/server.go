// Package gmailfake is an emulator of the part of Gmail's REST API that
// gmailrelay uses: users.messages.send (metadata and upload paths),
// users.messages.list (with the rfc822msgid:, OR, {…}, in:, label:, after:
// and before: search subset), users.messages.get, users.messages.trash,
// untrash and delete, users.settings.sendAs.list, users.history.list and
// users.getProfile, at Gmail's own
// paths, with Gmail's JSON shapes, error JSON and quota costs, so that
// Google's Go client (google.golang.org/api/gmail/v1) talks to it
// unchanged.
//
// Its defaults are Gmail's unkind habits, each from Google's docs or a
// public report: malformed Message-IDs are replaced, messages.list hides
// trash and spam, a query it cannot match answers an empty list, the search
// index may lag (with a long tail), quota answers carry the retry time only
// in their message text, a From that is not a verified send-as address is
// silently replaced, there may be a daily sending limit, and a 200 may be
// followed by a bounce report in INBOX or, past the daily limit, by a
// notice that the send never went out (bounce.go). Options
// switch each behaviour; the provider's ground truth (stored copies and
// deliveries) is exposed through a control API under /_emulator/ and through
// Go methods.
//
// It is an emulator: a green run against it is evidence about the relay's
// logic, not a guarantee about Gmail.
package gmailfake

import (
	"errors"
	"math/rand/v2"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
)

// Quota costs of the calls the emulator serves, in Gmail's units (Google's
// table; Options.Costs overrides them).
const (
	CostSend    = 100
	CostList    = 5
	CostGet     = 5
	CostTrash   = 5
	CostUntrash = 5
	CostDelete  = 10
)

// DefaultQuotaPerMinute is Gmail's documented per-user budget in units per
// minute.
const DefaultQuotaPerMinute = 15000

// DefaultAccount is the mailbox's primary address when Options.Account and
// Options.Accounts are empty.
const DefaultAccount = "me@example.com"

// Method names used by faults, costs and in Stats.Calls.
const (
	MethodSend    = "send"
	MethodList    = "list"
	MethodGet     = "get"
	MethodTrash   = "trash"
	MethodUntrash = "untrash"
	MethodDelete  = "delete"
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
	// ActionDuplicate stores the message twice (two ids, one Message-ID,
	// two deliveries) and answers the first. Send only.
	ActionDuplicate = "duplicate"
)

// Options configures a Server. The zero value is a working emulator with
// Gmail's unkind defaults: malformed Message-IDs rewritten, no index lag,
// FIFO index, lenient queries, no Retry-After header, 429 quota answers,
// no daily limit, Google's costs, one account, no authentication.
type Options struct {
	// IndexLag is a fixed delay after which a stored message becomes
	// visible to messages.list; messages.get by id works at once. Measured
	// on Now. Ignored when IndexLagDistribution is set.
	IndexLag time.Duration
	// IndexLagDistribution, when set, draws each message's lag from a
	// log-normal distribution (seeded).
	IndexLagDistribution LagDistribution
	// IndexOrder is IndexFIFO (zero) or IndexRandom; it matters only with
	// IndexLagDistribution.
	IndexOrder IndexOrder
	// Rewrite says which sends get a Gmail-generated Message-ID; the zero
	// value rewrites only malformed ids.
	Rewrite RewritePolicy
	// RewriteMessageID, when true, rewrites every Message-ID (RewriteAlways,
	// whatever Rewrite says), as the first emulator did.
	RewriteMessageID bool
	// SentDedupe folds a send whose Message-ID equals a stored SENT
	// message's into that message: 200 with its id and thread, no new copy,
	// but one more delivery.
	SentDedupe bool
	// StrictQueries answers 400 to a q the emulator cannot parse; off
	// (Gmail-like), such a q answers 200 with no messages.
	StrictQueries bool
	// RateLimitHeader adds a Retry-After header (seconds) to quota answers;
	// off (Gmail-like), the retry time is only in the message text.
	RateLimitHeader bool
	// QuotaPerMinute is the per-user budget in units per minute; 0 means
	// DefaultQuotaPerMinute.
	QuotaPerMinute int
	// QuotaStatus is the status of a per-minute quota answer: 429
	// (rateLimitExceeded) or 403 (userRateLimitExceeded); 0 means 429.
	QuotaStatus int
	// DailySendLimit is the number of sends per rolling 24 h per account
	// (Workspace 2000, trial 500); 0 means no limit.
	DailySendLimit int
	// Costs overrides Google's quota cost per method (MethodGet: 20, …);
	// unknown methods are ignored.
	Costs map[string]int
	// Latency is added to the answer of every Gmail call, in real time. It is
	// spent after the call took effect, so a client that gives up during it
	// sees an ambiguous send.
	Latency time.Duration
	// Now is the clock for index lag, quota windows, the daily limit and
	// timestamps; nil means time.Now.
	Now func() time.Time
	// Seed drives every random choice (lag draws, fractional rewriting);
	// 0 means Now().UnixNano() (see Server.Seed).
	Seed int64
	// Account is the primary mailbox address; "" means Accounts[0], or
	// DefaultAccount. userId "me" is the primary account unless a token
	// says otherwise, and a From with another address (not a verified
	// alias: SendAs) is rewritten to the sending account.
	Account string
	// Accounts are further mailboxes the emulator serves; each has its own
	// messages, quota, daily limit and index.
	Accounts []string
	// Token, when not empty, is a bearer token for the primary account.
	Token string
	// Tokens maps bearer tokens to account addresses (added to the
	// accounts if missing). When any token is configured, every Gmail call
	// must carry one of them (401 authError otherwise) and may only reach
	// its own account. The control API is never authenticated.
	Tokens map[string]string
	// SendAs are the accounts' send-as aliases (see Alias and AddSendAs).
	SendAs []Alias
	// HistoryLag is how long after a change its history record becomes
	// listable by history.list (independent of IndexLag). Ignored when
	// HistoryLagDistribution is set.
	HistoryLag time.Duration
	// HistoryLagDistribution, when set, draws each record's lag (seeded).
	HistoryLagDistribution LagDistribution
	// HistoryRetention is how long history records are kept; an older
	// startHistoryId answers 404. 0 means DefaultHistoryRetention.
	HistoryRetention time.Duration
	// BounceRecipients: a sent message's recipient whose address (lower
	// case) matches is not delivered, and BounceDelay after the send a
	// delivery report (Action: failed, Status: 5.1.1) arrives in the
	// sending account's INBOX. nil means DefaultBounceRecipients;
	// NoRecipients turns bounces off.
	BounceRecipients *regexp.Regexp
	// DelayRecipients: as BounceRecipients, with a report of Action:
	// delayed, Status: 4.4.1 (BounceRecipients wins when both match). nil
	// means DefaultDelayRecipients; NoRecipients turns delays off.
	DelayRecipients *regexp.Regexp
	// BounceDelay is how long after a send its reports (and the
	// sending-limit notice) arrive, on Now; 0 means DefaultBounceDelay.
	BounceDelay time.Duration
	// DailyLimitLag is how many sends past DailySendLimit are still
	// answered 200 and stored in SENT but not delivered, followed by
	// Gmail's sending-limit notice in INBOX, before sends are refused.
	DailyLimitLag int
}

// Message is one stored message: the provider's truth.
type Message struct {
	ID                string    // Gmail id, 16 hex digits
	ThreadID          string    // the thread's id (the id of its first message)
	LabelIDs          []string  // ["SENT"], plus INBOX and UNREAD for a self-send, ["INBOX", "UNREAD"] for a report; TRASH once trashed
	MessageID         string    // the stored Message-ID header, with angle brackets
	OriginalMessageID string    // the client's Message-ID when Gmail replaced it; "" otherwise (see Rewritten)
	ClientMessageID   string    // the Message-ID the client sent (MessageID unless Gmail replaced it); "" when it sent none
	Account           string    // the mailbox that holds it
	Raw               []byte    // the stored RFC 5322 message, after any rewriting
	StoredAt          time.Time // when it was stored (internalDate), by Options.Now
	VisibleAt         time.Time // when messages.list starts to show it
	Trashed           bool      // labelled TRASH
	Deleted           bool      // deleted: gone from list and get, kept here as truth
	Bounced           []string  // recipients the send bounced for (BounceRecipients)
	Delayed           []string  // recipients the send was delayed for (DelayRecipients)
	Undelivered       bool      // accepted past the daily limit and never delivered (DailyLimitLag)
}

// Rewritten reports whether Gmail replaced the Message-ID the client sent
// (the stored copy then carries another one, and rfc822msgid: with the
// client's finds nothing). A Message-ID Gmail added to a message that had
// none is not a rewrite.
func (m Message) Rewritten() bool { return m.OriginalMessageID != "" }

// Truth is the ground truth for one Message-ID (or all messages).
type Truth struct {
	Count       int       // stored copies carrying the Message-ID (trashed and deleted ones included)
	Deliveries  int       // accepted sends of it that went out: folded and rewritten ones included
	Messages    []Message // the copies, oldest first
	Bounced     []string  // recipients a send of it bounced for, in order, once each
	Delayed     []string  // recipients a send of it was delayed for, in order, once each
	Undelivered bool      // a send of it was accepted but not delivered (DailyLimitLag)
}

// Fault is a provider-side fault for the next Count calls of Method.
type Fault struct {
	Method  string        // MethodSend, MethodList, MethodGet, MethodTrash, MethodUntrash, MethodDelete, MethodSendAs, MethodHistory or MethodProfile
	Action  string        // ActionError, ActionAcceptThenError, ActionLatency or ActionDuplicate
	Status  int           // answer status for error and accept-then-error; 0 means 500
	Count   int           // calls it applies to; 0 means 1, -1 means until cleared
	Latency time.Duration // delay before the answer; required for ActionLatency
	Account string        // only calls to this account; "" means every account
}

// Stats counts what the emulator did since it started or was last reset.
type Stats struct {
	Calls        map[string]int // Gmail calls received, by method
	QuotaUnits   int            // units charged, for calls that were not rate limited
	RateLimited  int            // per-minute quota answers (429/403) given
	DailyLimited int            // sends refused by the daily sending limit
	Deliveries   int            // accepted sends that went out
	Undelivered  int            // sends accepted past the daily limit and not delivered
	Reports      int            // delivery reports and sending-limit notices added to INBOX
}

// Server is the emulator. All its methods are safe for concurrent use.
type Server struct {
	now    func() time.Time
	seed   int64
	costs  map[string]int
	authOn bool

	mu           sync.Mutex
	rng          *rand.Rand
	rewrite      RewritePolicy
	indexLag     time.Duration
	lagDist      LagDistribution
	order        IndexOrder
	sentDedupe   bool
	strict       bool
	header       bool
	quota        int
	quotaStatus  int
	dailyLimit   int
	latency      time.Duration
	hist         historySettings
	bounce       bounceSettings
	accounts     []*account // primary first
	byAddr       map[string]*account
	tokens       map[string]*account
	byID         map[string]*stored
	counter      uint64 // ids, history ids, generated Message-IDs; survives Reset
	lastID       uint64
	faults       []*FaultState
	faultSeq     int
	unattributed counters // calls refused before an account was known
}

// New returns an emulator configured by opts.
func New(opts Options) *Server {
	s := &Server{
		now:         opts.Now,
		rewrite:     opts.Rewrite,
		indexLag:    max(opts.IndexLag, 0),
		lagDist:     opts.IndexLagDistribution,
		order:       opts.IndexOrder,
		sentDedupe:  opts.SentDedupe,
		strict:      opts.StrictQueries,
		header:      opts.RateLimitHeader,
		quotaStatus: opts.QuotaStatus,
		dailyLimit:  max(opts.DailySendLimit, 0),
		latency:     opts.Latency,
		hist:        newHistorySettings(opts),
		bounce:      newBounceSettings(opts),
		costs:       DefaultCosts(),
		byAddr:      map[string]*account{},
		tokens:      map[string]*account{},
		byID:        map[string]*stored{},
	}
	if s.now == nil {
		s.now = time.Now
	}
	if opts.RewriteMessageID {
		s.rewrite = RewritePolicy{Mode: RewriteAlways}
	}
	s.rewrite.Fraction = min(max(s.rewrite.Fraction, 0), 1)
	if s.quotaStatus != http.StatusForbidden {
		s.quotaStatus = http.StatusTooManyRequests
	}
	for k, v := range opts.Costs {
		if _, ok := s.costs[k]; ok && v >= 0 {
			s.costs[k] = v
		}
	}
	s.seed = opts.Seed
	if s.seed == 0 {
		s.seed = s.now().UnixNano()
	}
	s.rng = newRand(s.seed)

	primary := opts.Account
	if primary == "" && len(opts.Accounts) > 0 {
		primary = opts.Accounts[0]
	}
	if primary == "" {
		primary = DefaultAccount
	}
	s.addAccount(primary)
	for _, a := range opts.Accounts {
		s.addAccount(a)
	}
	if opts.Token != "" {
		s.tokens[opts.Token] = s.accounts[0]
	}
	for tok, addr := range opts.Tokens {
		s.tokens[tok] = s.addAccount(addr)
	}
	s.authOn = len(s.tokens) > 0
	for _, al := range opts.SendAs {
		s.addSendAsLocked(al)
	}
	s.setQuotaLocked(opts.QuotaPerMinute)
	return s
}

func newRand(seed int64) *rand.Rand {
	return rand.New(rand.NewPCG(uint64(seed), 0x9e3779b97f4a7c15))
}

// addAccount adds addr to the served accounts (once) and returns it.
func (s *Server) addAccount(addr string) *account {
	key := strings.ToLower(strings.TrimSpace(addr))
	if a, ok := s.byAddr[key]; ok {
		return a
	}
	a := &account{addr: strings.TrimSpace(addr)}
	a.resetLocked()
	a.history.floor = s.nextCounterLocked() // a mailbox starts with a historyId, as Gmail's always has one
	s.accounts = append(s.accounts, a)
	s.byAddr[key] = a
	return a
}

// Account is the primary mailbox's address.
func (s *Server) Account() string { return s.accounts[0].addr }

// Accounts returns every served address, primary first.
func (s *Server) Accounts() []string {
	out := make([]string, len(s.accounts))
	for i, a := range s.accounts {
		out[i] = a.addr
	}
	return out
}

// Seed is the seed of every random choice, for reproducing a run.
func (s *Server) Seed() int64 { return s.seed }

// Count returns how many stored copies carry messageID (with or without
// angle brackets) in any account, whatever their visibility to search and
// whether trashed or deleted; "" counts every message.
func (s *Server) Count(messageID string) int { return s.Lookup("", messageID).Count }

// Deliveries returns how many accepted sends that went out carried
// messageID in any account: sends whose copy was folded by SentDedupe and
// sends whose id was rewritten (counted under the client's original id)
// included, sends accepted past the daily limit but not delivered
// (Undelivered) left out; "" counts every delivery. Duplicates are counted
// by deliveries, never by copies. A send that bounced for some recipients
// is still a delivery (see Bounced).
func (s *Server) Deliveries(messageID string) int { return s.Lookup("", messageID).Deliveries }

// Messages returns copies of the stored messages carrying messageID (with or
// without angle brackets) in any account, oldest first; "" returns every
// message.
func (s *Server) Messages(messageID string) []Message { return s.Lookup("", messageID).Messages }

// Lookup returns the ground truth for messageID ("" = every message) in
// account ("" = every account; an address the emulator does not serve has
// nothing).
func (s *Server) Lookup(account, messageID string) Truth {
	key := normalizeMsgID(messageID)
	if messageID != "" && key == "" {
		// "<>", " ": no Message-ID at all; sends that carried none must
		// not be counted as its deliveries.
		return Truth{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deliverDueLocked(s.now())
	var t Truth
	for _, a := range s.accounts {
		if account != "" && !strings.EqualFold(account, a.addr) {
			continue
		}
		for _, m := range a.msgs {
			if messageID != "" && m.msgIDKey != key {
				continue
			}
			t.Messages = append(t.Messages, s.snapshotLocked(m))
		}
		for _, d := range a.deliveries {
			if messageID == "" || d.clientKey == key || d.storedKey == key {
				t.add(d)
			}
		}
	}
	t.Count = len(t.Messages)
	return t
}

// SetRewriteMessageID switches rewriting of every Message-ID for later
// sends: true is RewriteAlways, false the Gmail-like RewriteMalformed.
func (s *Server) SetRewriteMessageID(on bool) {
	if on {
		s.SetRewrite(RewritePolicy{Mode: RewriteAlways})
		return
	}
	s.SetRewrite(RewritePolicy{})
}

// SetRewrite changes the Message-ID rewriting policy for later sends.
func (s *Server) SetRewrite(p RewritePolicy) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p.Fraction = min(max(p.Fraction, 0), 1)
	s.rewrite = p
}

// SetIndexLag switches to a fixed search index lag; it applies to stored
// messages too, except those whose lag was drawn from a distribution
// (visibility under a fixed lag is computed at search time).
func (s *Server) SetIndexLag(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.indexLag = max(d, 0)
	s.lagDist = LagDistribution{}
}

// SetIndexLagDistribution draws the lag of later messages from d (a zero d
// returns to the fixed lag).
func (s *Server) SetIndexLagDistribution(d LagDistribution, order IndexOrder) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lagDist = d
	s.order = order
}

// SetQuotaPerMinute changes the per-user budget (0 means
// DefaultQuotaPerMinute) and refills every account's.
func (s *Server) SetQuotaPerMinute(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setQuotaLocked(n)
}

// SetDailySendLimit changes the sends allowed per rolling 24 h per account
// (0: no limit); sends already made still count.
func (s *Server) SetDailySendLimit(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dailyLimit = max(n, 0)
}

// Stats returns the counters summed over every account, calls refused
// before an account was known included.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deliverDueLocked(s.now())
	sum := s.unattributed.stats()
	for _, a := range s.accounts {
		sum.add(a.counters.stats())
	}
	return sum
}

// AccountStats returns the counters of one account (zero for an address
// the emulator does not serve).
func (s *Server) AccountStats(account string) Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deliverDueLocked(s.now())
	if a, ok := s.byAddr[strings.ToLower(account)]; ok {
		return a.counters.stats()
	}
	return Stats{Calls: map[string]int{}}
}

// Reset drops every message, delivery, history record and fault, refills
// the quota, clears the daily windows, zeroes the counters and re-seeds the
// random choices with Seed. Ids handed out later stay unique, and a
// startHistoryId from before the reset answers 404.
func (s *Server) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range s.accounts {
		a.resetLocked()
		a.history = mailboxHistory{floor: s.nextCounterLocked()}
	}
	s.byID = map[string]*stored{}
	s.faults = nil
	s.unattributed = counters{}
	s.rng = newRand(s.seed)
	s.setQuotaLocked(s.quota)
}

// ErrNotFound is returned by Trash, Untrash and Delete for an id that is
// not stored or was deleted.
var ErrNotFound = errors.New("gmailfake: no such message")

// Trash labels message id TRASH, as a user trashing it by hand (no quota,
// no call counted). It returns ErrNotFound for an unknown or deleted id.
func (s *Server) Trash(id string) error {
	return s.userAction(id, func(m *stored) { setTrashLocked(m, true) })
}

// Untrash removes TRASH from message id. It returns ErrNotFound for an
// unknown or deleted id.
func (s *Server) Untrash(id string) error {
	return s.userAction(id, func(m *stored) { setTrashLocked(m, false) })
}

// Delete deletes message id for good: gone from list and get, kept in the
// ground truth as Deleted. It returns ErrNotFound for an unknown or
// already deleted id.
func (s *Server) Delete(id string) error {
	return s.userAction(id, func(m *stored) { m.Deleted = true })
}

func (s *Server) userAction(id string, act func(*stored)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.byID[id]
	if !ok || m.Deleted {
		return ErrNotFound
	}
	before, wasDeleted := slices.Clone(m.LabelIDs), m.Deleted
	act(m)
	s.historyChangedLocked(m, before, wasDeleted)
	return nil
}
