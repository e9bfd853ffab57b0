package gmailfake

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"time"
)

// RewriteMode says which sends get a new, Gmail-generated Message-ID.
type RewriteMode int

const (
	// RewriteMalformed (the zero value, Gmail-like) replaces only ids that
	// are not a strict RFC 5322 msg-id (see CheckMessageID). Public reports:
	// kernel-list mails with ids like <202304061608.@keescook> arrive with
	// X-Google-Original-Message-ID; ids without brackets are replaced too.
	RewriteMalformed RewriteMode = iota
	// RewriteNever keeps every id the client gave, malformed or not.
	RewriteNever
	// RewriteAlways replaces every id (the first emulator's
	// Options.RewriteMessageID).
	RewriteAlways
	// RewriteFraction replaces malformed ids and, at random (seeded), a
	// fraction RewritePolicy.Fraction of the others, as reports say API
	// sends sometimes get new ids (gauteh/lieer #198, FlowCrypt #4273).
	RewriteFraction
)

// RewritePolicy is the Message-ID rewriting behaviour. The zero value is
// RewriteMalformed.
type RewritePolicy struct {
	Mode     RewriteMode
	Fraction float64 // for RewriteFraction, in [0, 1]
	// Accounts, when not empty, limits Mode to the sends of these
	// accounts; the others rewrite only malformed ids (as Gmail does
	// everywhere). Go option only, for tests of several mailboxes.
	Accounts []string
}

// String returns the policy as --rewrite-message-id spells it.
func (p RewritePolicy) String() string {
	switch p.Mode {
	case RewriteNever:
		return "never"
	case RewriteAlways:
		return "always"
	case RewriteFraction:
		return strconv.FormatFloat(p.Fraction, 'g', -1, 64)
	}
	return "malformed"
}

// ParseRewritePolicy reads malformed, never, always (or true, the bare
// flag), false (never) or a fraction in [0, 1] such as 0.05.
func ParseRewritePolicy(s string) (RewritePolicy, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "malformed":
		return RewritePolicy{Mode: RewriteMalformed}, nil
	case "never", "false":
		return RewritePolicy{Mode: RewriteNever}, nil
	case "always", "true":
		return RewritePolicy{Mode: RewriteAlways}, nil
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || math.IsNaN(f) || f < 0 || f > 1 {
		return RewritePolicy{}, fmt.Errorf("want malformed, never, always or a fraction in [0, 1], not %q", s)
	}
	return RewritePolicy{Mode: RewriteFraction, Fraction: f}, nil
}

// LagDistribution is a search index lag drawn per message: log-normal
// through P50 and P99, capped at Max (0: no cap). Gmail documents no bound on
// its search lag; reports range from seconds to hours.
type LagDistribution struct {
	P50, P99, Max time.Duration
}

// IsZero reports whether d is unset (a fixed lag applies instead).
func (d LagDistribution) IsZero() bool { return d == LagDistribution{} }

// String returns the distribution as --index-lag spells it.
func (d LagDistribution) String() string {
	s := "p50=" + d.P50.String() + ",p99=" + d.P99.String()
	if d.Max > 0 {
		s += ",max=" + d.Max.String()
	}
	return s
}

// z99 is the standard normal quantile at 0.99.
const z99 = 2.3263478740408408

// draw returns one lag from the distribution.
func (d LagDistribution) draw(rng *rand.Rand) time.Duration {
	if d.P50 <= 0 {
		return 0 // no median: no lag (the Go API takes what ParseIndexLag refuses)
	}
	mu := math.Log(float64(d.P50))
	sigma := (math.Log(float64(max(d.P99, d.P50))) - mu) / z99
	v := math.Exp(mu + sigma*rng.NormFloat64())
	if d.Max > 0 && v > float64(d.Max) {
		return d.Max
	}
	if v > float64(math.MaxInt64/2) {
		return time.Duration(math.MaxInt64 / 2)
	}
	return time.Duration(v)
}

// ParseIndexLag reads --index-lag: 0, a Go duration (30s, a fixed lag) or a
// distribution p50=2s,p99=2m[,max=20m] with 0 < p50 <= p99 <= max.
func ParseIndexLag(s string) (fixed time.Duration, dist LagDistribution, err error) {
	s = strings.TrimSpace(s)
	if !strings.Contains(s, "=") {
		d, err := time.ParseDuration(s)
		if s == "0" {
			d, err = 0, nil
		}
		if err != nil || d < 0 {
			return 0, dist, fmt.Errorf("want 0, a non-negative duration (30s) or p50=2s,p99=2m,max=20m, not %q", s)
		}
		return d, dist, nil
	}
	for part := range strings.SplitSeq(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		d, perr := time.ParseDuration(strings.TrimSpace(v))
		if !ok || perr != nil || d <= 0 {
			return 0, LagDistribution{}, fmt.Errorf("%q: want key=positive duration (p50=2s)", part)
		}
		switch strings.ToLower(strings.TrimSpace(k)) {
		case "p50":
			dist.P50 = d
		case "p99":
			dist.P99 = d
		case "max":
			dist.Max = d
		default:
			return 0, LagDistribution{}, fmt.Errorf("%q: unknown key %q (want p50, p99, max)", part, k)
		}
	}
	switch {
	case dist.P50 == 0 || dist.P99 == 0:
		return 0, LagDistribution{}, fmt.Errorf("%q: a distribution needs p50 and p99", s)
	case dist.P99 < dist.P50:
		return 0, LagDistribution{}, fmt.Errorf("%q: p99 must not be below p50", s)
	case dist.Max > 0 && dist.Max < dist.P99:
		return 0, LagDistribution{}, fmt.Errorf("%q: max must not be below p99", s)
	}
	return 0, dist, nil
}

// IndexOrder says whether the index shows one account's messages in the
// order they were sent.
type IndexOrder int

const (
	// IndexFIFO (the zero value): a message never becomes searchable before
	// one sent earlier in the same account; it is visible at
	// max(sent + lag, previous message visible).
	IndexFIFO IndexOrder = iota
	// IndexRandom: each message on its own draw, so a later send can be
	// searchable first.
	IndexRandom
)

// String returns the order as --index-order spells it.
func (o IndexOrder) String() string {
	if o == IndexRandom {
		return "random"
	}
	return "fifo"
}

// ParseIndexOrder reads fifo or random.
func ParseIndexOrder(s string) (IndexOrder, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "fifo":
		return IndexFIFO, nil
	case "random":
		return IndexRandom, nil
	}
	return 0, fmt.Errorf("want fifo or random, not %q", s)
}

// DefaultCosts is Google's quota table for the methods the emulator
// serves, in units per call.
func DefaultCosts() map[string]int {
	return map[string]int{
		MethodSend: CostSend, MethodList: CostList, MethodGet: CostGet,
		MethodTrash: CostTrash, MethodUntrash: CostUntrash, MethodDelete: CostDelete,
		MethodSendAs: CostSendAs, MethodHistory: CostHistory, MethodProfile: CostProfile,
	}
}

// ParseCosts reads --cost: method=units pairs separated by commas, e.g.
// get=20,list=5. Methods are send, list, get, trash, untrash, delete,
// sendas (users.settings.sendAs.list), history (users.history.list) and
// profile (users.getProfile).
func ParseCosts(s string) (map[string]int, error) {
	out := map[string]int{}
	known := DefaultCosts()
	for part := range strings.SplitSeq(s, ",") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		k = strings.ToLower(strings.TrimSpace(k))
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if !ok || err != nil || n < 0 {
			return nil, fmt.Errorf("%q: want method=units with units >= 0 (get=20)", part)
		}
		if _, ok := known[k]; !ok {
			names := make([]string, 0, len(known))
			for name := range known {
				names = append(names, name)
			}
			sort.Strings(names)
			return nil, fmt.Errorf("%q: unknown method %q (want one of %s)", part, k, strings.Join(names, ", "))
		}
		out[k] = n
	}
	return out, nil
}
