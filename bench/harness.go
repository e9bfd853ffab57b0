package bench

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"google.golang.org/api/gmail/v1"

	"github.com/gmailrelay/gmailrelay/api"
)

// harness measures stretches of sends with conc callers; emu returns the
// emulator's figures (zero when it runs in this process).
type harness struct {
	conc int
	emu  func(ctx context.Context) (ChildStats, error)
}

// route is one way from Google's client to the emulator: the client
// pointed at it and, when a server stands between the client and the
// emulator (the relay, the bare proxy), a read of that server's figures;
// hop is nil on the direct path.
type route struct {
	svc *gmail.Service
	hop func(ctx context.Context) (ChildStats, error)
}

// sample is what one stretch of sends cost: the client's side, measured in
// this process, and the emulator's and the server's between them (hop:
// ChildStats.sub of the reads around it).
type sample struct {
	sends         int
	took          time.Duration
	lat           []time.Duration
	clientCPU     time.Duration
	clientMallocs uint64
	emu, hop      ChildStats
	// gaps are the times between two sends reaching the emulator.
	gaps []time.Duration
}

// plus is two stretches taken as one.
func (s sample) plus(o sample) sample {
	return sample{
		sends:         s.sends + o.sends,
		took:          s.took + o.took,
		lat:           append(slices.Clip(s.lat), o.lat...),
		clientCPU:     s.clientCPU + o.clientCPU,
		clientMallocs: s.clientMallocs + o.clientMallocs,
		emu:           s.emu.plus(o.emu),
		hop:           s.hop.plus(o.hop),
		gaps:          append(slices.Clip(s.gaps), o.gaps...),
	}
}

// metrics are the sample's per-path figures (see SendOverhead): the
// client's always, the emulator's with processes, and with hop too the
// process's between them (the relay's or the proxy's).
func (s sample) metrics(processes, hop bool) Metrics {
	n := float64(s.sends)
	m := Metrics{
		"sends/s":            rate(s.sends, s.took),
		"p50_ms":             ms(Percentile(slices.Clone(s.lat), 50)),
		"p99_ms":             ms(Percentile(slices.Clone(s.lat), 99)),
		"client_allocs/send": float64(s.clientMallocs) / n,
		"client_cpu_us/send": float64(s.clientCPU.Microseconds()) / n,
	}
	if !processes {
		return m
	}
	m["emu_cpu_us/send"] = float64(s.emu.CPUNanos) / 1e3 / n
	m["emu_sys_us/send"] = float64(s.emu.SysNanos) / 1e3 / n
	m["emu_allocs/send"] = float64(s.emu.Mallocs) / n
	m["emu_new_conns"] = float64(s.emu.Conns)
	m["emu_waits/send"] = float64(s.emu.Waits) / n
	m["emu_preempted/send"] = float64(s.emu.Preempted) / n
	m["emu_gc_cpu_us/send"] = float64(s.emu.GCNanos) / 1e3 / n
	m["emu_gap_p50_us"] = float64(Percentile(slices.Clone(s.gaps), 50)) / float64(time.Microsecond)
	if hop {
		m["proc_cpu_us/send"] = float64(s.hop.CPUNanos) / 1e3 / n
		m["proc_sys_us/send"] = float64(s.hop.SysNanos) / 1e3 / n
		m["proc_allocs/send"] = float64(s.hop.Mallocs) / n
		m["proc_waits/send"] = float64(s.hop.Waits) / n
	}
	return m
}

// window sends n messages (Message-IDs under prefix) on r and returns
// their sample; with at, send i leaves at offset at[i] from the start (see
// runSends).
func (h harness) window(ctx context.Context, prefix string, r route, n int, at []time.Duration) (sample, error) {
	msgs := buildMessages(prefix, n)
	e0, r0, err := h.read(ctx, r)
	if err != nil {
		return sample{}, err
	}
	s, err := measure(ctx, r.svc, msgs, h.conc, at)
	if err != nil {
		return sample{}, fmt.Errorf("%s sends: %w", prefix, err)
	}
	e1, r1, err := h.read(ctx, r)
	if err != nil {
		return sample{}, err
	}
	s.emu, s.hop = e1.sub(e0), r1.sub(r0)
	for i := 1; i < len(s.emu.Arrivals); i++ {
		s.gaps = append(s.gaps, time.Duration(s.emu.Arrivals[i]-s.emu.Arrivals[i-1]))
	}
	return s, nil
}

// read returns the emulator's figures and those of r's server (zero for
// what it cannot see), the emulator's first.
func (h harness) read(ctx context.Context, r route) (emu, hop ChildStats, err error) {
	if h.emu != nil {
		if emu, err = h.emu(ctx); err != nil {
			return emu, hop, err
		}
	}
	if r.hop != nil {
		hop, err = r.hop(ctx)
	}
	return emu, hop, err
}

// halves are the stretches of one ABBA run (ABCCBA with the proxy), and
// the paced direct sends in its middle (none in process).
type halves struct {
	direct1, relay1, proxy1, paced, proxy2, relay2, direct2 sample
}

// Message-ID prefixes of the stretches: one length, so that every message
// has the same size.
const (
	prefixDirect1, prefixRelay1, prefixProxy1, prefixPaced = "dir1", "rel1", "prx1", "pace"
	prefixProxy2, prefixRelay2, prefixDirect2              = "prx2", "rel2", "dir2"
)

// abba sends two halves of sends messages on each path, nested so that
// every path's halves lie symmetrically around the middle of the run:
// direct, relayed, relayed, direct, or with proxy direct, relayed,
// proxied, proxied, relayed, direct (a drift linear in time then weighs
// on every path alike). With paced, the direct client replays the first
// relayed half's arrivals at the emulator in the middle of the run.
func (h harness) abba(ctx context.Context, direct, relayed route, proxy *route, sends int, paced bool) (halves, error) {
	var hs halves
	type leg struct {
		prefix string
		r      route
		dst    *sample
	}
	first := []leg{{prefixDirect1, direct, &hs.direct1}, {prefixRelay1, relayed, &hs.relay1}}
	second := []leg{{prefixDirect2, direct, &hs.direct2}, {prefixRelay2, relayed, &hs.relay2}}
	if proxy != nil {
		first = append(first, leg{prefixProxy1, *proxy, &hs.proxy1})
		second = append(second, leg{prefixProxy2, *proxy, &hs.proxy2})
	}
	var err error
	for _, l := range first {
		if *l.dst, err = h.window(ctx, l.prefix, l.r, sends, nil); err != nil {
			return hs, err
		}
	}
	if paced {
		arr := hs.relay1.emu.Arrivals
		at := make([]time.Duration, len(arr))
		for i, t := range arr {
			at[i] = time.Duration(t - arr[0])
		}
		if hs.paced, err = h.window(ctx, prefixPaced, direct, len(at), at); err != nil {
			return hs, err
		}
	}
	for _, l := range slices.Backward(second) {
		if *l.dst, err = h.window(ctx, l.prefix, l.r, sends, nil); err != nil {
			return hs, err
		}
	}
	return hs, nil
}

// halfFigures are the figures reported for each half and the paced sends.
var halfFigures = []string{"sends/s", "p50_ms", "emu_cpu_us/send", "emu_sys_us/send", "emu_allocs/send", "emu_waits/send",
	"emu_preempted/send", "emu_gc_cpu_us/send", "emu_gap_p50_us", "emu_new_conns", "proc_cpu_us/send"}

// metrics are the run's figures (see SendOverhead).
func (hs halves) metrics(processes bool) Metrics {
	d, r := hs.direct1.plus(hs.direct2), hs.relay1.plus(hs.relay2)
	dm, rm := d.metrics(processes, false), r.metrics(processes, true)
	m := Metrics{}
	addPrefixed(m, "direct_", dm)
	addPrefixed(m, "relay_", rm)
	m["ratio"] = rm["sends/s"] / dm["sends/s"]
	m["added_p50_ms"] = rm["p50_ms"] - dm["p50_ms"]
	m["commits/send"] = float64(r.hop.Commits) / float64(r.sends)
	type part struct {
		name string
		s    sample
		hop  bool
	}
	parts := []part{{"direct1_", hs.direct1, false}, {"relay1_", hs.relay1, true}, {"relay2_", hs.relay2, true}, {"direct2_", hs.direct2, false}}
	px := hs.proxy1.plus(hs.proxy2)
	proxied := px.sends > 0
	if proxied {
		parts = append(parts, part{"proxy1_", hs.proxy1, true}, part{"proxy2_", hs.proxy2, true})
	}
	if processes {
		parts = append(parts, part{"paced_", hs.paced, false})
	}
	for _, p := range parts {
		pm := p.s.metrics(processes, p.hop)
		for _, k := range halfFigures {
			if v, ok := pm[k]; ok {
				m[p.name+k] = v
			}
		}
	}
	if !processes {
		return m
	}
	if proxied {
		pm := px.metrics(processes, true)
		addPrefixed(m, "proxy_", pm)
		m["proxy_ratio"] = pm["sends/s"] / dm["sends/s"]
		m["proxy_added_p50_ms"] = pm["p50_ms"] - dm["p50_ms"]
		m["proxy_emu_ratio"] = pm["emu_cpu_us/send"] / dm["emu_cpu_us/send"]
		m["relay_proxy_cpu_ratio"] = rm["proc_cpu_us/send"] / pm["proc_cpu_us/send"]
		m["relay_proxy_allocs_ratio"] = rm["proc_allocs/send"] / pm["proc_allocs/send"]
	}
	m["emu_ratio"] = rm["emu_cpu_us/send"] / dm["emu_cpu_us/send"]
	m["emu_ratio_first"] = m["relay1_emu_cpu_us/send"] / m["direct1_emu_cpu_us/send"]
	m["emu_drift"] = m["direct2_emu_cpu_us/send"] / m["direct1_emu_cpu_us/send"]
	m["emu_ratio_paced"] = rm["emu_cpu_us/send"] / m["paced_emu_cpu_us/send"]
	// A collection falls in one stretch: over the whole run its share is
	// steadier than per half.
	all := d.plus(r).plus(px).plus(hs.paced)
	m["emu_run_gc_cpu_us/send"] = float64(all.emu.GCNanos) / 1e3 / float64(all.sends)
	m["emu_run_gcs"] = float64(all.emu.GCs)
	maps.Copy(m, phaseMedians(r.hop.Phases))
	return m
}

// addPrefixed adds src's figures to m, each name under prefix.
func addPrefixed(m Metrics, prefix string, src Metrics) {
	for k, v := range src {
		m[prefix+k] = v
	}
}

// phaseMedians is the p50, in µs, of each phase of the sends in ts.
func phaseMedians(ts []api.SendTiming) Metrics {
	m := Metrics{}
	if len(ts) == 0 {
		return m
	}
	for name, get := range map[string]func(api.SendTiming) time.Duration{
		"phase_decode_us":  func(t api.SendTiming) time.Duration { return t.Decode },
		"phase_admit_us":   func(t api.SendTiming) time.Duration { return t.Admit },
		"phase_commit1_us": func(t api.SendTiming) time.Duration { return t.FirstCommit },
		"phase_gmail_us":   func(t api.SendTiming) time.Duration { return t.Gmail },
		"phase_commit2_us": func(t api.SendTiming) time.Duration { return t.OutcomeCommit },
		"phase_answer_us":  func(t api.SendTiming) time.Duration { return t.Answer },
		"phase_total_us":   func(t api.SendTiming) time.Duration { return t.Total },
	} {
		ds := make([]time.Duration, len(ts))
		for i, t := range ts {
			ds[i] = get(t)
		}
		m[name] = float64(Percentile(ds, 50)) / float64(time.Microsecond)
	}
	return m
}
