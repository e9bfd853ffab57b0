package faultmodes

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Rule is a fault rule as the Set holds it and GET /admin/faults shows it.
type Rule struct {
	ID string `json:"id"`
	Spec
	// Remaining is how many more times the rule may fire; nil when Count is
	// nil (unlimited).
	Remaining *int `json:"remaining,omitempty"`
	// ExpiresAt is CreatedAt + TTL; nil when the rule has no TTL.
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	CreatedAt time.Time  `json:"created_at"`
	// Hits counts the attempts the rule fired on.
	Hits int `json:"hits"`
	// Active is false once the rule is expired or exhausted; such a rule
	// never matches again but stays listed until removed.
	Active bool `json:"active"`
}

// clone returns a copy of r that shares no pointers with it.
func (r Rule) clone() Rule {
	c := r
	c.Count = copyOf(r.Count)
	c.Probability = copyOf(r.Probability)
	c.Remaining = copyOf(r.Remaining)
	c.ExpiresAt = copyOf(r.ExpiresAt)
	return c
}

// copyOf returns a pointer to a copy of *p, or nil for nil.
func copyOf[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

// active reports whether r may still match at now: not expired
// (now < ExpiresAt) and not exhausted (Remaining != 0).
func (r *Rule) active(now time.Time) bool {
	if r.ExpiresAt != nil && !now.Before(*r.ExpiresAt) {
		return false
	}
	return r.Remaining == nil || *r.Remaining > 0
}

// Options configures a Set.
type Options struct {
	// Seed seeds the random source probabilistic rules draw from. Zero
	// means a random seed, chosen at New and reported by Set.Seed, so a run
	// can be repeated by passing the reported seed back.
	Seed int64
	// Now is the clock for created_at and expiry; nil means time.Now.
	Now func() time.Time
	// AllowCrash permits CrashAfterForward (the --allow-crash-faults flag).
	AllowCrash bool
	// Store, when set, keeps the rules (shared by every relay on it): Add,
	// Remove, Clear and List go to it, Decide reads it and takes a firing
	// in it atomically. nil keeps them in this process's memory.
	Store Store
}

// Decision is what the Set decided for one send attempt. The zero Decision
// (Mode "") means no rule fired: behave normally.
type Decision struct {
	// RuleID is the rule that fired, or HeaderRuleID for Set.Force.
	RuleID string
	Mode   Mode
	// Drop is the rule's Drop, for ForwardThenDropResponse.
	Drop string
}

// HeaderRuleID is the RuleID of decisions made by Set.Force (the
// X-Relay-Fault header) rather than by a stored rule.
const HeaderRuleID = "header"

// Set is the runtime collection of fault rules. It is safe for concurrent
// use; every method takes its mutex, so a Decide sees a consistent set of
// rules and consumes a count atomically.
type Set struct {
	mu         sync.Mutex
	now        func() time.Time
	allowCrash bool
	seed       int64
	rng        *rand.Rand
	rules      []*entry // in creation order, oldest first
	nextID     uint64
	injected   map[Mode]int
	store      Store
	storeErrs  atomic.Int64
}

type entry struct {
	rule Rule
	seq  uint64 // creation order; ties in specificity go to the larger seq
}

// New returns an empty Set.
func New(o Options) *Set {
	seed := o.Seed
	for seed == 0 {
		seed = rand.Int64()
	}
	now := o.Now
	if now == nil {
		now = time.Now
	}
	return &Set{
		now:        now,
		allowCrash: o.AllowCrash,
		seed:       seed,
		rng:        rand.New(rand.NewPCG(uint64(seed), 0x9e3779b97f4a7c15)),
		injected:   make(map[Mode]int),
		store:      o.Store,
	}
}

// Seed returns the seed of the Set's random source: Options.Seed, or the one
// New chose when that was zero. Log it so a run can be repeated.
func (s *Set) Seed() int64 { return s.seed }

// AllowCrash reports whether CrashAfterForward is permitted.
func (s *Set) AllowCrash() bool { return s.allowCrash }

// Add validates spec and stores it as a new rule, returning the rule with
// its ID ("f1", "f2", ... never reused within a Set). Errors are *FieldError:
// those of Spec.Validate, and Field "mode" for CrashAfterForward when the Set
// does not allow crash faults.
func (s *Set) Add(spec Spec) (Rule, error) {
	if err := spec.Validate(); err != nil {
		return Rule{}, err
	}
	if spec.Mode == CrashAfterForward && !s.allowCrash {
		return Rule{}, fieldErr("mode", "%s needs the server started with --allow-crash-faults", CrashAfterForward)
	}
	var ttl time.Duration
	if spec.TTL != "" {
		d, err := parseTTL(spec.TTL)
		if err != nil {
			return Rule{}, err
		}
		ttl = d
	}

	now := s.now()
	r := Rule{Spec: spec, CreatedAt: now}
	r = r.clone() // do not alias the caller's Count and Probability
	if spec.Count != nil {
		n := *spec.Count
		r.Remaining = &n
	}
	if ttl > 0 {
		exp := now.Add(ttl)
		r.ExpiresAt = &exp
	}
	r.Active = r.active(now)
	if s.store != nil {
		return s.addStored(r)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextID++
	r.ID = "f" + strconv.FormatUint(s.nextID, 10)
	s.rules = append(s.rules, &entry{rule: r, seq: s.nextID})
	return r.clone(), nil
}

// Remove deletes the rule with the given id and reports whether it existed.
func (s *Set) Remove(id string) bool {
	if s.store != nil {
		seq, ok := seqOf(id)
		if !ok {
			return false
		}
		ctx, cancel := storeCtx()
		defer cancel()
		found, err := s.store.DeleteFaultRule(ctx, seq)
		return err == nil && found
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, e := range s.rules {
		if e.rule.ID == id {
			s.rules = append(s.rules[:i], s.rules[i+1:]...)
			return true
		}
	}
	return false
}

// Clear deletes every rule and returns how many there were. The injected
// counters (Injected) are not reset: they are monotonic, like the metrics
// they feed.
func (s *Set) Clear() int {
	if s.store != nil {
		ctx, cancel := storeCtx()
		defer cancel()
		n, _ := s.store.ClearFaultRules(ctx)
		return n
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.rules)
	s.rules = nil
	return n
}

// List returns every rule, newest first, with its hit count and with Active
// computed at the current time: expired and exhausted rules are listed with
// Active false. The rules are copies.
func (s *Set) List() []Rule {
	var stored []*entry
	if s.store != nil {
		var err error
		if stored, err = s.storedEntries(); err != nil {
			return nil
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rules := s.rules // read under the lock: Add and Remove replace it
	if s.store != nil {
		rules = stored
	}
	now := s.now()
	out := make([]Rule, 0, len(rules))
	for i := len(rules) - 1; i >= 0; i-- {
		r := rules[i].rule.clone()
		r.Active = r.active(now)
		out = append(out, r)
	}
	return out
}

// specificity ranks how narrowly a rule is scoped: key and channel (3) > key
// (2) > channel (1) > global (0).
func specificity(r *Rule) int {
	n := 0
	if r.Key != "" {
		n += 2
	}
	if r.Channel != "" {
		n++
	}
	return n
}

// matches reports whether r applies to an attempt on channel for the job
// with key and messageID.
func (r *Rule) matches(channel, key, messageID string) bool {
	if r.Channel != "" && r.Channel != channel {
		return false
	}
	if r.Key != "" {
		byKey := key != "" && r.Key == key
		byID := messageID != "" && trimAngles(r.Key) == trimAngles(messageID)
		if !byKey && !byID {
			return false
		}
	}
	return true
}

func trimAngles(id string) string {
	id = strings.TrimSpace(id)
	id = strings.TrimPrefix(id, "<")
	return strings.TrimSuffix(id, ">")
}

// Decide takes the fault decision for one send attempt; call it once per
// attempt, at admission, and log the result before acting on it.
//
// Among the active rules (not expired, not exhausted) that match, the most
// specific one is chosen (see Spec: key and channel > key > channel >
// global); among equally specific rules, the one added last. The chosen rule
// then fires with its Probability, drawn from the Set's seeded source only
// when the probability is below 1. When the chosen rule does not fire, the
// decision is normal behaviour: Decide does NOT fall through to a less
// specific rule, so a narrow rule with probability p shields its scope from
// broader rules the other 1-p of the time, too. A rule that fires has its
// Remaining count decremented and its Hits incremented under the same lock,
// so concurrent attempts never both take the last count.
//
// With a Store, the rules are read from it and the firing is taken there
// (Store.UseFaultRule); a Store error means no fault (counted in
// StoreErrors).
func (s *Set) Decide(channel, key, messageID string) Decision {
	if s.store != nil {
		return s.decideStored(channel, key, messageID)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	best := choose(s.rules, now, channel, key, messageID)
	if best == nil || !s.draw(&best.rule) {
		return Decision{}
	}
	r := &best.rule
	if r.Remaining != nil {
		*r.Remaining--
	}
	r.Hits++
	r.Active = r.active(now)
	s.injected[r.Mode]++
	return Decision{RuleID: r.ID, Mode: r.Mode, Drop: r.Drop}
}

// choose returns the rule Decide applies among entries: the most specific
// active match, the newest among equals (nil: none).
func choose(entries []*entry, now time.Time, channel, key, messageID string) *entry {
	var best *entry
	for _, e := range entries {
		r := &e.rule
		if !r.active(now) || !r.matches(channel, key, messageID) {
			continue
		}
		if best == nil || specificity(r) > specificity(&best.rule) ||
			(specificity(r) == specificity(&best.rule) && e.seq > best.seq) {
			best = e
		}
	}
	return best
}

// draw reports whether the chosen rule fires (its Probability, drawn from
// the seeded source only when below 1); s.mu is held.
func (s *Set) draw(r *Rule) bool {
	p := r.Probability
	return p == nil || *p >= 1 || s.rng.Float64() < *p
}

// Refund gives back a decision taken by Decide for an attempt that was
// then not made (the front door found nothing to attempt): the rule's
// Remaining count and Hits are restored, and the injected counter. A rule
// removed meanwhile, or a zero or Force decision, is left alone.
func (s *Set) Refund(d Decision) {
	if d.Mode == "" || d.RuleID == HeaderRuleID {
		return
	}
	if s.store != nil {
		if seq, ok := seqOf(d.RuleID); ok {
			ctx, cancel := storeCtx()
			_ = s.store.RefundFaultRule(ctx, seq)
			cancel()
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		s.injected[d.Mode]--
		if s.injected[d.Mode] <= 0 {
			delete(s.injected, d.Mode)
		}
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.rules {
		if e.rule.ID != d.RuleID {
			continue
		}
		r := &e.rule
		if r.Remaining != nil {
			*r.Remaining++
		}
		r.Hits--
		r.Active = r.active(s.now())
		s.injected[r.Mode]--
		if s.injected[r.Mode] <= 0 {
			delete(s.injected, r.Mode)
		}
		return
	}
}

// Force turns a mode requested per request (the X-Relay-Fault header) into
// a Decision with RuleID HeaderRuleID and counts it in Injected. The caller
// must already have checked that the header is enabled and the request
// carries the admin token. Errors are *FieldError with Field "mode": an
// unknown mode, or CrashAfterForward when the Set does not allow it.
func (s *Set) Force(m Mode) (Decision, error) {
	if !m.Valid() {
		return Decision{}, fieldErr("mode", "unknown mode %q; want one of %s", m, modeList())
	}
	if m == CrashAfterForward && !s.allowCrash {
		return Decision{}, fieldErr("mode", "%s needs the server started with --allow-crash-faults", CrashAfterForward)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.injected[m]++
	return Decision{RuleID: HeaderRuleID, Mode: m}, nil
}

// Injected returns how many decisions each mode has produced since New (by
// rules and by Force), for metrics and stats. Modes never injected are
// absent. The map is a copy.
func (s *Set) Injected() map[Mode]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[Mode]int, len(s.injected))
	for m, n := range s.injected {
		out[m] = n
	}
	return out
}
