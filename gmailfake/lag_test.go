package gmailfake

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay/internal/testclock"
)

// TestLagDistributionQuantiles draws 5,000 lags through the intake and
// checks the sample p50 and p99 against the flags. With sigma = ln(60)/z99
// the sample p99 of 5,000 draws has a standard error of about 9 %, so ±15 %
// holds for most seeds, not all (264 of seeds 1..300; seed 7 gives +17 %):
// the fixed seed makes the check reproducible, and the sweep over 100 seeds
// below checks that the draws are centred on the flags.
func TestLagDistributionQuantiles(t *testing.T) {
	_, dist, err := ParseIndexLag("p50=2s,p99=2m,max=20m")
	if err != nil {
		t.Fatal(err)
	}
	clk := testclock.New()
	s := New(Options{Now: clk.Now, Seed: 1, IndexLagDistribution: dist, IndexOrder: IndexRandom})
	const n = 5000
	for i := range n {
		raw := fmt.Sprintf("To: a@example.org\r\nMessage-ID: <m%d@example.com>\r\n\r\nx", i)
		if _, e := s.storeMessage(s.accounts[0], []byte(raw), "", false); e != nil {
			t.Fatal(e)
		}
	}
	var lags []time.Duration
	for _, m := range s.Messages("") {
		lags = append(lags, m.VisibleAt.Sub(m.StoredAt))
	}
	slices.Sort(lags)
	p50, p99 := lags[n/2], lags[n*99/100]
	t.Logf("5000 draws of p50=2s,p99=2m,max=20m (seed 1): sample p50 %v, p99 %v, max %v", p50, p99, lags[n-1])
	within := func(got, want time.Duration) bool {
		return float64(got) >= 0.85*float64(want) && float64(got) <= 1.15*float64(want)
	}
	if !within(p50, 2*time.Second) {
		t.Errorf("p50: got %v, want 2s ± 15%%", p50)
	}
	if !within(p99, 2*time.Minute) {
		t.Errorf("p99: got %v, want 2m ± 15%%", p99)
	}
	if lags[n-1] > 20*time.Minute {
		t.Errorf("max: got %v, want at most 20m", lags[n-1])
	}

	var log50, log99 float64
	const seeds = 100
	for seed := range int64(seeds) {
		rng := newRand(seed + 1000)
		for i := range lags {
			lags[i] = dist.draw(rng)
		}
		slices.Sort(lags)
		log50 += math.Log(float64(lags[n/2]) / float64(dist.P50))
		log99 += math.Log(float64(lags[n*99/100]) / float64(dist.P99))
	}
	t.Logf("over %d seeds: mean sample p50 %.1f%% and p99 %.1f%% off the flags", seeds, 100*math.Expm1(log50/seeds), 100*math.Expm1(log99/seeds))
	if math.Abs(log50/seeds) > 0.03 || math.Abs(log99/seeds) > 0.05 {
		t.Errorf("draws not centred on the flags: mean log ratio p50 %.3f, p99 %.3f", log50/seeds, log99/seeds)
	}
}

func TestParseBehaviourFlags(t *testing.T) {
	for _, tc := range []struct {
		in    string
		fixed time.Duration
		dist  LagDistribution
		bad   bool
	}{
		{"0", 0, LagDistribution{}, false},
		{"30s", 30 * time.Second, LagDistribution{}, false},
		{"p50=2s,p99=2m,max=20m", 0, LagDistribution{2 * time.Second, 2 * time.Minute, 20 * time.Minute}, false},
		{"p50=2s,p99=2m", 0, LagDistribution{P50: 2 * time.Second, P99: 2 * time.Minute}, false},
		{"-1s", 0, LagDistribution{}, true},
		{"p50=2s", 0, LagDistribution{}, true},
		{"p50=2m,p99=2s", 0, LagDistribution{}, true},
		{"p50=2s,p99=2m,max=1m", 0, LagDistribution{}, true},
		{"p50=2s,p99=2m,p75=3s", 0, LagDistribution{}, true},
		{"soon", 0, LagDistribution{}, true},
	} {
		fixed, dist, err := ParseIndexLag(tc.in)
		if (err != nil) != tc.bad || fixed != tc.fixed || dist != tc.dist {
			t.Errorf("ParseIndexLag(%q) = %v, %+v, %v", tc.in, fixed, dist, err)
		}
	}
	for in, want := range map[string]RewritePolicy{
		"malformed": {}, "never": {Mode: RewriteNever}, "always": {Mode: RewriteAlways}, "true": {Mode: RewriteAlways},
		"0.05": {Mode: RewriteFraction, Fraction: 0.05},
	} {
		if got, err := ParseRewritePolicy(in); err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("ParseRewritePolicy(%q) = %+v, %v", in, got, err)
		}
	}
	for _, in := range []string{"1.5", "-0.1", "sometimes", "NaN"} {
		if _, err := ParseRewritePolicy(in); err == nil {
			t.Errorf("ParseRewritePolicy(%q): no error", in)
		}
	}
	if c, err := ParseCosts("get=20,list=5"); err != nil || c[MethodGet] != 20 || c[MethodList] != 5 || len(c) != 2 {
		t.Errorf("ParseCosts: %v %v", c, err)
	}
	for _, in := range []string{"get", "get=-1", "fetch=5", "get=x"} {
		if _, err := ParseCosts(in); err == nil {
			t.Errorf("ParseCosts(%q): no error", in)
		}
	}
}

func TestCheckMessageID(t *testing.T) {
	for id, ok := range map[string]bool{
		"<job-1ca74402c25f227b40cf235d910d7664@inbound.yourdomain.com>": true,
		"<CA+abc/def=@mail.gmail.com>":                                  true,
		" <a@b> ":                                                       true,
		"<a.b.c@d.e>":                                                   true,
		"<202304061608.@keescook>":                                      false,
		"<.a@b>":                                                        false,
		"<a..b@c>":                                                      false,
		"<a@b.>":                                                        false,
		"a@b":                                                           false,
		"<a>":                                                           false,
		"<a@b@c>":                                                       false,
		"<a b@c>":                                                       false,
		"<\"q\"@c>":                                                     false,
		"<a@[1.2.3.4]>":                                                 false,
		"<é@c>":                                                         false,
		"<@c>":                                                          false,
		"":                                                              false,
		"<" + string(make([]byte, 0)) + ">":                             false,
	} {
		if err := CheckMessageID(id); (err == nil) != ok {
			t.Errorf("CheckMessageID(%q) = %v, want ok %v", id, err, ok)
		}
	}
	long := "<" + fmt.Sprintf("%0245d", 0) + "@b.c>" // 251 characters
	if CheckMessageID(long) == nil || CheckMessageID(long[:1]+long[2:]) != nil {
		t.Errorf("the 250-character bound is not where it should be")
	}
}
