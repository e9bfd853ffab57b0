package faultmodes_test

import (
	"encoding/json"
	"errors"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay/faultmodes"
	"github.com/gmailrelay/gmailrelay/internal/testclock"
)

func mustAdd(t *testing.T, s *faultmodes.Set, spec faultmodes.Spec) faultmodes.Rule {
	t.Helper()
	r, err := s.Add(spec)
	if err != nil {
		t.Fatalf("Add(%+v): %v", spec, err)
	}
	return r
}

const msgID = "<job-1ca74402c25f227b40cf235d910d7664@inbound.example.com>"

func TestDecidePrecedence(t *testing.T) {
	type attempt struct{ channel, key, messageID string }
	billing := attempt{"billing", "k1", msgID}
	tests := []struct {
		name  string
		rules []faultmodes.Spec // added in this order
		at    attempt
		want  int // index into rules of the rule that must fire; -1 = none
	}{
		{"no rules", nil, billing, -1},
		{"global matches anything", []faultmodes.Spec{{Mode: faultmodes.FailBeforeForward}}, billing, 0},
		{"channel beats global added later", []faultmodes.Spec{
			{Mode: faultmodes.ForwardThenDropResponse, Channel: "billing"},
			{Mode: faultmodes.FailBeforeForward},
		}, billing, 0},
		{"key beats channel added later", []faultmodes.Spec{
			{Mode: faultmodes.ForwardAndRespond, Key: "k1"},
			{Mode: faultmodes.ForwardThenDropResponse, Channel: "billing"},
			{Mode: faultmodes.FailBeforeForward},
		}, billing, 0},
		{"key and channel beats key", []faultmodes.Spec{
			{Mode: faultmodes.FailBeforeForward, Key: "k1", Channel: "billing"},
			{Mode: faultmodes.ForwardAndRespond, Key: "k1"},
		}, billing, 0},
		{"tie: newest global wins", []faultmodes.Spec{
			{Mode: faultmodes.FailBeforeForward},
			{Mode: faultmodes.ForwardThenDropResponse},
		}, billing, 1},
		{"tie: newest channel wins", []faultmodes.Spec{
			{Mode: faultmodes.ForwardThenDropResponse, Channel: "billing"},
			{Mode: faultmodes.FailBeforeForward, Channel: "billing"},
		}, billing, 1},
		{"tie: newest key wins", []faultmodes.Spec{
			{Mode: faultmodes.ForwardThenDropResponse, Key: "k1"},
			{Mode: faultmodes.FailBeforeForward, Key: msgID},
		}, billing, 1},
		{"other channel does not match", []faultmodes.Spec{{Mode: faultmodes.FailBeforeForward, Channel: "receipts"}}, billing, -1},
		{"other key does not match", []faultmodes.Spec{{Mode: faultmodes.FailBeforeForward, Key: "k2"}}, billing, -1},
		{"key rule on other channel does not match", []faultmodes.Spec{{Mode: faultmodes.FailBeforeForward, Key: "k1", Channel: "receipts"}}, billing, -1},
		{"non-matching key rule falls to channel", []faultmodes.Spec{
			{Mode: faultmodes.ForwardThenDropResponse, Channel: "billing"},
			{Mode: faultmodes.FailBeforeForward, Key: "k2"},
		}, billing, 0},
		{"key matches Message-ID with brackets", []faultmodes.Spec{{Mode: faultmodes.FailBeforeForward, Key: msgID}}, billing, 0},
		{"key matches Message-ID without brackets", []faultmodes.Spec{{Mode: faultmodes.FailBeforeForward, Key: msgID[1 : len(msgID)-1]}}, billing, 0},
		{"key matches bare Message-ID attempt", []faultmodes.Spec{{Mode: faultmodes.FailBeforeForward, Key: msgID}},
			attempt{"billing", "", msgID[1 : len(msgID)-1]}, 0},
		{"empty attempt key matches no key rule", []faultmodes.Spec{{Mode: faultmodes.FailBeforeForward, Key: "k1"}},
			attempt{"billing", "", ""}, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := faultmodes.New(faultmodes.Options{Seed: 1, Now: testclock.New().Now})
			var ids []string
			for _, spec := range tt.rules {
				ids = append(ids, mustAdd(t, s, spec).ID)
			}
			got := s.Decide(tt.at.channel, tt.at.key, tt.at.messageID)
			want := faultmodes.Decision{}
			if tt.want >= 0 {
				want = faultmodes.Decision{RuleID: ids[tt.want], Mode: tt.rules[tt.want].Mode}
			}
			if got != want {
				t.Errorf("got %+v, want %+v", got, want)
			}
		})
	}
}

func TestTiesUseCreationOrderNotTimestamps(t *testing.T) {
	// Both rules are created at the same instant: order must still decide.
	c := testclock.New()
	s := faultmodes.New(faultmodes.Options{Seed: 1, Now: c.Now})
	mustAdd(t, s, faultmodes.Spec{Mode: faultmodes.FailBeforeForward})
	second := mustAdd(t, s, faultmodes.Spec{Mode: faultmodes.ForwardAndRespond})
	for i := 0; i < 5; i++ {
		if got := s.Decide("default", "k", ""); got.RuleID != second.ID {
			t.Fatalf("call %d: got rule %q, want %q", i, got.RuleID, second.ID)
		}
	}
}

func TestDecideDropIsReported(t *testing.T) {
	s := faultmodes.New(faultmodes.Options{Seed: 1})
	r := mustAdd(t, s, faultmodes.Spec{Mode: faultmodes.ForwardThenDropResponse, Drop: faultmodes.Drop504})
	got := s.Decide("default", "k", "")
	want := faultmodes.Decision{RuleID: r.ID, Mode: faultmodes.ForwardThenDropResponse, Drop: "504"}
	if got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

func TestCountExhaustedUnderConcurrency(t *testing.T) {
	const count, workers = 7, 50
	s := faultmodes.New(faultmodes.Options{Seed: 1})
	r := mustAdd(t, s, faultmodes.Spec{Mode: faultmodes.FailBeforeForward, Count: ptr(count)})

	start := make(chan struct{})
	results := make(chan faultmodes.Decision, workers)
	var wg sync.WaitGroup
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			results <- s.Decide("default", "k", "")
		}()
	}
	close(start)
	wg.Wait()
	close(results)

	fired := 0
	for d := range results {
		switch d.Mode {
		case faultmodes.FailBeforeForward:
			fired++
			if d.RuleID != r.ID {
				t.Errorf("rule id: got %q, want %q", d.RuleID, r.ID)
			}
		case "":
		default:
			t.Errorf("unexpected decision %+v", d)
		}
	}
	if fired != count {
		t.Errorf("fired: got %d, want %d", fired, count)
	}
	rules := s.List()
	if len(rules) != 1 {
		t.Fatalf("List: got %d rules, want 1", len(rules))
	}
	got := rules[0]
	if got.Hits != count || got.Remaining == nil || *got.Remaining != 0 || got.Active {
		t.Errorf("after exhaustion: hits %d, remaining %v, active %v; want %d, 0, false", got.Hits, deref(got.Remaining), got.Active, count)
	}
	if got := s.Injected()[faultmodes.FailBeforeForward]; got != count {
		t.Errorf("injected: got %d, want %d", got, count)
	}
}

func TestExhaustedRuleUncoversBroaderRule(t *testing.T) {
	s := faultmodes.New(faultmodes.Options{Seed: 1})
	global := mustAdd(t, s, faultmodes.Spec{Mode: faultmodes.ForwardThenDropResponse})
	key := mustAdd(t, s, faultmodes.Spec{Mode: faultmodes.FailBeforeForward, Key: "k", Count: ptr(1)})
	if got := s.Decide("default", "k", "").RuleID; got != key.ID {
		t.Fatalf("first: got %q, want key rule %q", got, key.ID)
	}
	if got := s.Decide("default", "k", "").RuleID; got != global.ID {
		t.Fatalf("second: got %q, want global rule %q", got, global.ID)
	}
}

// decisions runs n Decides and returns whether each fired.
func decisions(s *faultmodes.Set, n int) []bool {
	out := make([]bool, n)
	for i := range out {
		out[i] = s.Decide("default", "k", "").Mode != ""
	}
	return out
}

func TestProbabilityReproducibleWithSeed(t *testing.T) {
	const n, p = 1000, 0.3
	spec := faultmodes.Spec{Mode: faultmodes.FailBeforeForward, Probability: ptr(p)}
	a := faultmodes.New(faultmodes.Options{Seed: 42})
	b := faultmodes.New(faultmodes.Options{Seed: 42})
	mustAdd(t, a, spec)
	mustAdd(t, b, spec)
	got, want := decisions(a, n), decisions(b, n)
	fired := 0
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("call %d: seed 42 gave %v and %v", i, got[i], want[i])
		}
		if got[i] {
			fired++
		}
	}
	// Binomial(1000, 0.3): sd ~14.5; 5 sd either side.
	if math.Abs(float64(fired)-n*p) > 75 {
		t.Errorf("fired %d of %d, want about %v", fired, n, n*p)
	}
	rules := a.List()
	if rules[0].Hits != fired {
		t.Errorf("hits: got %d, want %d", rules[0].Hits, fired)
	}

	// A different seed gives a different sequence.
	c := faultmodes.New(faultmodes.Options{Seed: 43})
	mustAdd(t, c, spec)
	other := decisions(c, n)
	same := true
	for i := range other {
		if other[i] != got[i] {
			same = false
			break
		}
	}
	if same {
		t.Error("seeds 42 and 43 gave the same 1000 decisions")
	}
}

func TestRandomSeedIsReportedAndReplays(t *testing.T) {
	spec := faultmodes.Spec{Mode: faultmodes.FailBeforeForward, Probability: ptr(0.5)}
	a := faultmodes.New(faultmodes.Options{})
	if a.Seed() == 0 {
		t.Fatal("Seed() is 0 for a random seed")
	}
	b := faultmodes.New(faultmodes.Options{Seed: a.Seed()})
	mustAdd(t, a, spec)
	mustAdd(t, b, spec)
	got, want := decisions(a, 200), decisions(b, 200)
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("call %d differs when replaying seed %d", i, a.Seed())
		}
	}
}

func TestProbabilityMissDoesNotFallThrough(t *testing.T) {
	s := faultmodes.New(faultmodes.Options{Seed: 7})
	mustAdd(t, s, faultmodes.Spec{Mode: faultmodes.FailBeforeForward})
	key := mustAdd(t, s, faultmodes.Spec{Mode: faultmodes.ForwardThenDropResponse, Key: "k", Probability: ptr(0.5)})
	normal, keyed := 0, 0
	for i := 0; i < 200; i++ {
		switch d := s.Decide("default", "k", ""); d.RuleID {
		case "":
			normal++
		case key.ID:
			keyed++
		default:
			t.Fatalf("call %d: fell through to %+v", i, d)
		}
	}
	if normal == 0 || keyed == 0 {
		t.Errorf("normal %d, keyed %d: want both > 0", normal, keyed)
	}
}

func TestProbabilisticCountOnlyConsumedWhenFiring(t *testing.T) {
	s := faultmodes.New(faultmodes.Options{Seed: 3})
	mustAdd(t, s, faultmodes.Spec{Mode: faultmodes.FailBeforeForward, Count: ptr(5), Probability: ptr(0.2)})
	fired := 0
	for i := 0; i < 500; i++ {
		if s.Decide("default", "k", "").Mode != "" {
			fired++
		}
	}
	if fired != 5 {
		t.Errorf("fired: got %d, want 5", fired)
	}
}

func TestTTL(t *testing.T) {
	c := testclock.New()
	s := faultmodes.New(faultmodes.Options{Seed: 1, Now: c.Now})
	r := mustAdd(t, s, faultmodes.Spec{Mode: faultmodes.FailBeforeForward, TTL: "1m"})
	if r.ExpiresAt == nil || !r.ExpiresAt.Equal(c.Now().Add(time.Minute)) {
		t.Fatalf("ExpiresAt: got %v, want created+1m", r.ExpiresAt)
	}
	steps := []struct {
		advance time.Duration
		want    bool
	}{
		{0, true},
		{59 * time.Second, true},
		{time.Second - time.Nanosecond, true},
		{time.Nanosecond, false}, // now == ExpiresAt: expired
		{time.Hour, false},
	}
	for i, step := range steps {
		c.Advance(step.advance)
		if got := s.Decide("default", "k", "").Mode != ""; got != step.want {
			t.Errorf("step %d (%v after creation): fired %v, want %v", i, c.Now().Sub(r.CreatedAt), got, step.want)
		}
	}
	rules := s.List()
	if len(rules) != 1 || rules[0].Active {
		t.Errorf("expired rule: got %+v, want listed and inactive", rules)
	}
}

func TestCrashModeNeedsAllowCrash(t *testing.T) {
	spec := faultmodes.Spec{Mode: faultmodes.CrashAfterForward}
	s := faultmodes.New(faultmodes.Options{Seed: 1})
	_, err := s.Add(spec)
	var fe *faultmodes.FieldError
	if !errors.As(err, &fe) || fe.Field != "mode" {
		t.Fatalf("Add without AllowCrash: got %v, want *FieldError on mode", err)
	}
	if len(s.List()) != 0 {
		t.Error("refused rule was stored")
	}
	if _, err := s.Force(faultmodes.CrashAfterForward); !errors.As(err, &fe) || fe.Field != "mode" {
		t.Errorf("Force without AllowCrash: got %v, want *FieldError on mode", err)
	}

	allowed := faultmodes.New(faultmodes.Options{Seed: 1, AllowCrash: true})
	r := mustAdd(t, allowed, spec)
	if got := allowed.Decide("default", "k", ""); got.Mode != faultmodes.CrashAfterForward || got.RuleID != r.ID {
		t.Errorf("got %+v, want crash by %s", got, r.ID)
	}
}

func TestAddValidates(t *testing.T) {
	s := faultmodes.New(faultmodes.Options{Seed: 1})
	_, err := s.Add(faultmodes.Spec{Mode: faultmodes.FailBeforeForward, Probability: ptr(math.NaN())})
	var fe *faultmodes.FieldError
	if !errors.As(err, &fe) || fe.Field != "probability" {
		t.Errorf("got %v, want *FieldError on probability", err)
	}
}

func TestListRemoveClear(t *testing.T) {
	c := testclock.New()
	s := faultmodes.New(faultmodes.Options{Seed: 1, Now: c.Now})
	count := 2
	r1 := mustAdd(t, s, faultmodes.Spec{Mode: faultmodes.FailBeforeForward, Count: &count})
	count = 99 // the Set must not alias the caller's pointer
	c.Advance(time.Second)
	r2 := mustAdd(t, s, faultmodes.Spec{Mode: faultmodes.ForwardAndRespond, Channel: "receipts"})
	r3 := mustAdd(t, s, faultmodes.Spec{Mode: faultmodes.ForwardThenDropResponse, Channel: "billing"})
	if r1.ID == r2.ID || r2.ID == r3.ID || r1.ID == r3.ID {
		t.Fatalf("ids not unique: %s %s %s", r1.ID, r2.ID, r3.ID)
	}
	s.Decide("default", "k", "")

	list := s.List()
	var gotIDs []string
	for _, r := range list {
		gotIDs = append(gotIDs, r.ID)
	}
	if want := []string{r3.ID, r2.ID, r1.ID}; !slices.Equal(gotIDs, want) {
		t.Fatalf("List order: got %v, want %v", gotIDs, want)
	}
	if got := list[2]; got.Hits != 1 || deref(got.Remaining) != 1 || deref(got.Count) != 2 || !got.Active {
		t.Errorf("r1: hits %d remaining %d count %d active %v; want 1 1 2 true", got.Hits, deref(got.Remaining), deref(got.Count), got.Active)
	}
	*list[2].Remaining = 50 // List returns copies
	if got := deref(s.List()[2].Remaining); got != 1 {
		t.Errorf("List aliases internal state: remaining %d after edit of copy, want 1", got)
	}

	if !s.Remove(r2.ID) {
		t.Error("Remove existing: got false")
	}
	if s.Remove(r2.ID) {
		t.Error("Remove twice: got true")
	}
	if got := len(s.List()); got != 2 {
		t.Errorf("after Remove: %d rules, want 2", got)
	}
	r4 := mustAdd(t, s, faultmodes.Spec{Mode: faultmodes.FailBeforeForward})
	if r4.ID == r2.ID {
		t.Errorf("id %s reused after Remove", r4.ID)
	}
	if got := s.Clear(); got != 3 {
		t.Errorf("Clear: got %d, want 3", got)
	}
	if got := s.Decide("default", "k", ""); got != (faultmodes.Decision{}) {
		t.Errorf("after Clear: got %+v, want normal", got)
	}
	if got := s.Injected()[faultmodes.FailBeforeForward]; got != 1 {
		t.Errorf("Injected after Clear: got %d, want 1 (counters are monotonic)", got)
	}
}

func TestRuleJSON(t *testing.T) {
	c := testclock.New()
	s := faultmodes.New(faultmodes.Options{Seed: 1, Now: c.Now})
	r := mustAdd(t, s, faultmodes.Spec{Mode: faultmodes.FailBeforeForward, Channel: "billing", Count: ptr(3), TTL: "1m"})
	data, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"id": r.ID, "mode": "fail-before-forward", "channel": "billing", "count": 3.0, "ttl": "1m",
		"remaining": 3.0, "expires_at": "2026-12-02T09:01:00Z", "created_at": "2026-12-02T09:00:00Z",
		"hits": 0.0, "active": true,
	}
	if len(got) != len(want) {
		t.Errorf("got %s, want keys %v", data, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: got %v, want %v", k, got[k], v)
		}
	}
}

func TestForce(t *testing.T) {
	s := faultmodes.New(faultmodes.Options{Seed: 1})
	got, err := s.Force(faultmodes.FailBeforeForward)
	if err != nil {
		t.Fatal(err)
	}
	if want := (faultmodes.Decision{RuleID: faultmodes.HeaderRuleID, Mode: faultmodes.FailBeforeForward}); got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if _, err := s.Force("nope"); err == nil {
		t.Error("Force of unknown mode: got nil error")
	}
	if got := s.Injected(); got[faultmodes.FailBeforeForward] != 1 || len(got) != 1 {
		t.Errorf("Injected: got %v, want only fail-before-forward: 1", got)
	}
}

func TestConcurrentUseIsRaceFree(t *testing.T) {
	s := faultmodes.New(faultmodes.Options{Seed: 1})
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 50; j++ {
				r, err := s.Add(faultmodes.Spec{Mode: faultmodes.FailBeforeForward, Probability: ptr(0.5), Count: ptr(2)})
				if err != nil {
					t.Error(err)
					return
				}
				s.Decide("default", "k", "")
				_ = s.List()
				_ = s.Injected()
				s.Remove(r.ID)
			}
		}()
	}
	wg.Wait()
	if got := len(s.List()); got != 0 {
		t.Errorf("rules left: got %d, want 0", got)
	}
}

func deref(p *int) int {
	if p == nil {
		return -1
	}
	return *p
}
