package faultmodes_test

import (
	"context"
	"sync"
	"testing"

	"github.com/gmailrelay/gmailrelay/faultmodes"
	"github.com/gmailrelay/gmailrelay/faultmodes/faulttest"
	"github.com/gmailrelay/gmailrelay/internal/testclock"
)

// memStore is a faultmodes.Store in memory, standing in for a database
// several Sets (several relays) share.
type memStore struct {
	mu    sync.Mutex
	seq   uint64
	rules []faultmodes.StoredRule
}

func (m *memStore) AddFaultRule(_ context.Context, data []byte, remaining *int) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.seq++
	r := faultmodes.StoredRule{Seq: m.seq, Data: append([]byte(nil), data...)}
	if remaining != nil {
		v := *remaining
		r.Remaining = &v
	}
	m.rules = append(m.rules, r)
	return m.seq, nil
}

func (m *memStore) FaultRules(context.Context) ([]faultmodes.StoredRule, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]faultmodes.StoredRule, len(m.rules))
	for i, r := range m.rules {
		out[i] = r
		if r.Remaining != nil {
			v := *r.Remaining
			out[i].Remaining = &v
		}
	}
	return out, nil
}

func (m *memStore) find(seq uint64) *faultmodes.StoredRule {
	for i := range m.rules {
		if m.rules[i].Seq == seq {
			return &m.rules[i]
		}
	}
	return nil
}

func (m *memStore) DeleteFaultRule(_ context.Context, seq uint64) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range m.rules {
		if m.rules[i].Seq == seq {
			m.rules = append(m.rules[:i], m.rules[i+1:]...)
			return true, nil
		}
	}
	return false, nil
}

func (m *memStore) ClearFaultRules(context.Context) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := len(m.rules)
	m.rules = nil
	return n, nil
}

func (m *memStore) UseFaultRule(_ context.Context, seq uint64) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.find(seq)
	if r == nil || (r.Remaining != nil && *r.Remaining <= 0) {
		return false, nil
	}
	if r.Remaining != nil {
		*r.Remaining--
	}
	r.Hits++
	return true, nil
}

func (m *memStore) RefundFaultRule(_ context.Context, seq uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if r := m.find(seq); r != nil {
		if r.Remaining != nil {
			*r.Remaining++
		}
		r.Hits--
	}
	return nil
}

// Two Sets on one Store behave as one: a rule added through one is listed
// and decided by the other, a count: 3 rule fires exactly three times over
// 200 concurrent decisions spread over both, a refund gives a firing back,
// and Remove and Clear through one empty both.
func TestSetsSharingAStoreActAsOne(t *testing.T) {
	st := &memStore{}
	a := faultmodes.New(faultmodes.Options{Store: st, Now: testclock.New().Now})
	b := faultmodes.New(faultmodes.Options{Store: st, Now: testclock.New().Now})
	three := 3
	r, err := a.Add(faultmodes.Spec{Mode: faultmodes.FailBeforeForward, Count: &three})
	if err != nil {
		t.Fatal(err)
	}
	if l := b.List(); len(l) != 1 || l[0].ID != r.ID || deref(l[0].Remaining) != 3 {
		t.Fatalf("B lists %+v, want A's rule %s with 3 remaining", l, r.ID)
	}
	if fired := faulttest.DecideSpread(a, b, 200, faultmodes.FailBeforeForward); fired != 3 {
		t.Errorf("a count: 3 rule fired %d times over two Sets, want 3", fired)
	}
	if l := a.List(); deref(l[0].Remaining) != 0 || l[0].Hits != 3 || l[0].Active {
		t.Errorf("after the firings: %+v; want remaining 0, hits 3, inactive", l[0])
	}
	b.Refund(faultmodes.Decision{RuleID: r.ID, Mode: faultmodes.FailBeforeForward})
	if d := a.Decide("default", "", "<x@y>"); d.RuleID != r.ID {
		t.Errorf("after B's refund A decided %+v, want the rule to fire once more", d)
	}
	if !b.Remove(r.ID) || len(a.List()) != 0 {
		t.Errorf("B removed %s, A still lists %v", r.ID, a.List())
	}
	if _, err := b.Add(faultmodes.Spec{Mode: faultmodes.ForwardThenDropResponse}); err != nil {
		t.Fatal(err)
	}
	if n := a.Clear(); n != 1 || len(b.List()) != 0 {
		t.Errorf("A cleared %d, B lists %v; want 1 and none", n, b.List())
	}
}
