package faultmodes

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"time"
)

// Store keeps a Set's rules outside the process, so several relays share
// them (the PostgreSQL log implements it). A Set without a Store keeps its
// rules in memory (one process; the bbolt default), as before.
type Store interface {
	// AddFaultRule stores a new rule (data is the rule as the Set encodes
	// it; remaining is nil for an unlimited one) and returns its sequence
	// number, unique and increasing: the rule's ID is "f" + seq.
	AddFaultRule(ctx context.Context, data []byte, remaining *int) (seq uint64, err error)
	// FaultRules returns every stored rule, oldest first.
	FaultRules(ctx context.Context) ([]StoredRule, error)
	// DeleteFaultRule removes a rule and reports whether it existed.
	DeleteFaultRule(ctx context.Context, seq uint64) (bool, error)
	// ClearFaultRules removes every rule and returns how many there were.
	ClearFaultRules(ctx context.Context) (int, error)
	// UseFaultRule counts one firing of a rule atomically: its hits go up
	// by one and a counted rule's remaining down by one, only while it is
	// above zero. It reports false (nothing changed) when the rule is gone
	// or exhausted, so a count: 1 rule fires once across every relay.
	UseFaultRule(ctx context.Context, seq uint64) (bool, error)
	// RefundFaultRule gives back one firing (Set.Refund); a rule gone is
	// not an error.
	RefundFaultRule(ctx context.Context, seq uint64) error
}

// StoredRule is a rule as a Store returns it.
type StoredRule struct {
	Seq       uint64
	Data      []byte
	Remaining *int
	Hits      int
}

// storeTimeout bounds each Store call a Set makes (its methods take no
// context).
const storeTimeout = 10 * time.Second

func storeCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), storeTimeout)
}

// storedEntries reads the Store's rules as entries; an unreadable rule is
// skipped.
func (s *Set) storedEntries() ([]*entry, error) {
	ctx, cancel := storeCtx()
	defer cancel()
	stored, err := s.store.FaultRules(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]*entry, 0, len(stored))
	for _, sr := range stored {
		var r Rule
		if err := json.Unmarshal(sr.Data, &r); err != nil {
			continue
		}
		r.ID = "f" + strconv.FormatUint(sr.Seq, 10)
		r.Remaining, r.Hits = sr.Remaining, sr.Hits
		out = append(out, &entry{rule: r, seq: sr.Seq})
	}
	return out, nil
}

// addStored stores r (ID not yet set) and returns it with its ID.
func (s *Set) addStored(r Rule) (Rule, error) {
	data, err := json.Marshal(r)
	if err != nil {
		return Rule{}, err
	}
	ctx, cancel := storeCtx()
	defer cancel()
	seq, err := s.store.AddFaultRule(ctx, data, r.Remaining)
	if err != nil {
		return Rule{}, err
	}
	r.ID = "f" + strconv.FormatUint(seq, 10)
	return r, nil
}

// seqOf parses a rule ID ("f12") back into its sequence number.
func seqOf(id string) (uint64, bool) {
	n, err := strconv.ParseUint(strings.TrimPrefix(id, "f"), 10, 64)
	return n, err == nil && strings.HasPrefix(id, "f")
}

// decideStored is Decide on the Store's rules: the choice as in memory,
// then the firing taken in the Store; when another relay exhausted (or
// removed) the chosen rule meanwhile, the rules are read again.
func (s *Set) decideStored(channel, key, messageID string) Decision {
	for range 5 {
		entries, err := s.storedEntries()
		if err != nil {
			s.storeErrs.Add(1)
			return Decision{}
		}
		s.mu.Lock()
		best := choose(entries, s.now(), channel, key, messageID)
		fire := best != nil && s.draw(&best.rule)
		s.mu.Unlock()
		if !fire {
			return Decision{}
		}
		ctx, cancel := storeCtx()
		used, err := s.store.UseFaultRule(ctx, best.seq)
		cancel()
		if err != nil {
			s.storeErrs.Add(1)
			return Decision{}
		}
		if !used {
			continue
		}
		r := &best.rule
		s.mu.Lock()
		s.injected[r.Mode]++
		s.mu.Unlock()
		return Decision{RuleID: r.ID, Mode: r.Mode, Drop: r.Drop}
	}
	return Decision{}
}

// StoreErrors counts the Store calls of Decide that failed (the attempt
// then went ahead without a fault).
func (s *Set) StoreErrors() int64 { return s.storeErrs.Load() }
