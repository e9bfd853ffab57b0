package bench

import (
	"context"
	"encoding/base64"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/api/gmail/v1"
	"google.golang.org/api/option"

	"github.com/gmailrelay/gmailrelay/acceptlog"
	"github.com/gmailrelay/gmailrelay/api"
	"github.com/gmailrelay/gmailrelay/gmailapi"
	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/policy"
	"github.com/gmailrelay/gmailrelay/relay"
)

// Metrics are a scenario's figures by unit name ("relay_sends/s"), as
// reported with testing.B.ReportMetric and read back by Parse.
type Metrics map[string]float64

// MsgIDDomain is the Message-ID domain of every message the harness builds.
const MsgIDDomain = "bench.gmailrelay.test"

// unlimited is a quota budget (units per minute) that never limits.
const unlimited = 1 << 40

// SendConfig configures SendOverhead.
type SendConfig struct {
	// Latency is the emulator's added latency on every Gmail call.
	Latency time.Duration
	// Concurrency is how many sends are in flight at once on each path.
	Concurrency int
	// Sends is how many messages each path sends in each of its two
	// halves (see SendOverhead): 2 × Sends a path in all.
	Sends int
	// Preload is how many messages the direct client stores in the
	// emulator before the warm-up, unmeasured: the measured sends then run
	// against an emulator that holds that many more.
	Preload int
	// EmulatorProcs, when positive, is the emulator process's GOMAXPROCS.
	EmulatorProcs int
	// Dir holds the relay's acceptance log.
	Dir string
	// Log, when set, is the acceptance log to use instead of a bbolt file
	// in Dir (the caller closes it); the relay then runs in this process.
	Log acceptlog.Store
	// Processes runs the emulator and the relay each in a process of its
	// own (see SendOverhead); the test binary's TestMain must call
	// RunChild when IsChild. Ignored when Log is set.
	Processes bool
}

// SendOverhead sends 2 × cfg.Sends messages with Google's Go client straight
// to the Gmail emulator and the same number through the relay's
// Gmail-compatible path (POST /gmail/v1/users/me/messages/send) to the same
// emulator, with the same client settings and message shape (distinct
// Message-IDs of one length). Every path is warmed up first (connections,
// and the relay runs with verify_handle never so no send pays a
// read-back).
//
// Each path sends in two halves of cfg.Sends, in the order direct,
// relayed, relayed, direct (ABBA), so that neither path runs on the
// emptier emulator or in the quieter part of the run: the emulator keeps
// every message it is sent, and a shared machine drifts. A path's figures
// are over both of its halves (sends/s is their sends over their time, p50
// and p99 over their latencies together). A half is as long as the one
// stretch per path this harness measured before ABBA: at 150 ms the
// relay's arrivals spread out round by round, so shorter stretches would
// give other figures (docs/bench-notes/fairness.md).
//
// With cfg.Processes, the emulator and the relay each run in a process of
// their own (this test binary started again: its TestMain must call
// RunChild when IsChild), the relay wired as `gmailrelay serve` wires it,
// so that the test process holds only the client and every process's CPU
// and allocations are its own. A third path is then measured in the same
// run: the same client through a bare reverse proxy to the emulator
// (httputil.ReverseProxy with the relay's Gmail transport settings, in a
// process of its own: newChildProxy), the calibration of what any Go
// proxy pays per request here. Its two halves sit in the middle, direct,
// relayed, proxied, proxied, relayed, direct, so that each path's halves
// are symmetric around the middle of the run. In that middle the direct
// client sends again, paced: each send released at the offset at which
// the first relayed half's send reached the emulator, so that the
// emulator sees the relay's arrival pattern from Google's own client.
// Otherwise (and always with cfg.Log set), the relay and the emulator run
// inside this process (see sendInProcess), with no proxy.
//
// Figures, per path (direct_, relay_): sends/s, p50_ms, p99_ms, and the
// client process's client_allocs/send and client_cpu_us/send, and the
// emulator process's emu_cpu_us/send (emu_sys_us/send of it in the
// kernel), emu_allocs/send (the same work per
// send gives the same allocations; CPU also counts wake-ups),
// emu_waits/send and emu_preempted/send (its voluntary and involuntary
// context switches), emu_gc_cpu_us/send (the runtime's estimate of its
// collector's share), emu_gap_p50_us (the median time between two sends
// reaching it) and emu_new_conns (connections it accepted during the
// measured sends). For the relay: proc_cpu_us/send (proc_sys_us/send of it
// in the kernel) and proc_allocs/send (the relay process's own rusage and
// Mallocs over the relayed sends), fsyncs/send (acceptance-log commits per
// send), the p50 of each phase of a relayed send inside the relay's
// handler (phase_decode_us, phase_admit_us, phase_commit1_us,
// phase_gmail_us, phase_commit2_us, phase_answer_us, phase_total_us; see
// api.SendTiming), and ratio (relay sends/s ÷ direct sends/s),
// added_p50_ms (relay p50 − direct p50) and emu_ratio (emulator CPU per
// relayed send ÷ per direct send). relay_proc_waits/send are the relay
// process's voluntary context switches (its idle/wake cycle).
//
// For the proxy, with processes: the same per-path figures under proxy_
// (proxy_proc_cpu_us/send, proxy_proc_sys_us/send, proxy_proc_allocs/send
// and proxy_proc_waits/send from the proxy process's own rusage and
// Mallocs), proxy_ratio (proxy sends/s ÷ direct), proxy_added_p50_ms,
// proxy_emu_ratio (emulator CPU per proxied send ÷ per direct send), and
// relay_proxy_cpu_ratio and relay_proxy_allocs_ratio (the relay process's
// CPU and allocations per send ÷ the proxy process's).
//
// Per half (direct1_, relay1_, proxy1_, proxy2_, relay2_, direct2_) and
// for the paced direct sends (paced_): sends/s, p50_ms, the emu_ figures
// above and, for the relay and the proxy, proc_cpu_us/send (see
// halfFigures). And
// emu_drift (emulator CPU per send, second direct half ÷ first),
// emu_ratio_first (first relayed half ÷ first direct half: the order this
// harness used before ABBA), emu_ratio_paced (relayed ÷ paced direct),
// emu_run_gc_cpu_us/send and emu_run_gcs (the emulator's collections over
// every measured send) and emu_heap_MiB (its heap at the end).
func SendOverhead(ctx context.Context, cfg SendConfig) (Metrics, error) {
	if cfg.Concurrency < 1 || cfg.Sends < 1 || cfg.Preload < 0 {
		return nil, fmt.Errorf("send overhead: concurrency and sends must be positive and preload not negative")
	}
	if cfg.Log != nil || !cfg.Processes {
		return sendInProcess(ctx, cfg)
	}
	env := []string{childLatencyEnv + "=" + cfg.Latency.String()}
	if cfg.EmulatorProcs > 0 {
		env = append(env, fmt.Sprintf("GOMAXPROCS=%d", cfg.EmulatorProcs))
	}
	emu, err := startChild(roleEmulator, env...)
	if err != nil {
		return nil, err
	}
	defer emu.stop()
	rel, err := startChild(roleRelay, childEmulatorEnv+"="+emu.URL, childDirEnv+"="+cfg.Dir)
	if err != nil {
		return nil, err
	}
	defer rel.stop()
	prx, err := startChild(roleProxy, childEmulatorEnv+"="+emu.URL)
	if err != nil {
		return nil, err
	}
	defer prx.stop()

	direct, via, err := warmClients(ctx, emu.URL, cfg.Concurrency, cfg.Preload, rel.URL, prx.URL)
	if err != nil {
		return nil, err
	}
	stats := func(c *child) func(context.Context) (ChildStats, error) {
		return func(ctx context.Context) (ChildStats, error) { return c.stats(ctx, false) } // the relay's also drops the phases recorded so far
	}
	h := harness{conc: cfg.Concurrency, emu: stats(emu)}
	relayed, proxied := route{via[0], stats(rel)}, route{via[1], stats(prx)}
	halves, err := h.abba(ctx, route{svc: direct}, relayed, &proxied, cfg.Sends, true)
	if err != nil {
		return nil, err
	}
	m := halves.metrics(true)
	end, err := emu.stats(ctx, true)
	if err != nil {
		return nil, err
	}
	m["emu_heap_MiB"] = float64(end.HeapBytes) / (1 << 20)
	if got, want := end.Messages, cfg.Preload+3*cfg.Concurrency+6*cfg.Sends+halves.paced.sends; got != want {
		return nil, fmt.Errorf("send overhead: emulator holds %d messages, want %d", got, want)
	}
	return m, nil
}

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
	m["fsyncs/send"] = float64(r.hop.Commits) / float64(r.sends)
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

// warmUp makes one round of sends on each client (connections).
func warmUp(ctx context.Context, conc int, svcs ...*gmail.Service) error {
	for i, svc := range svcs {
		name := fmt.Sprintf("warm%d", i)
		if _, err := runSends(ctx, svc, buildMessages(name, conc), conc, nil); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

// sendInProcess is SendOverhead with the emulator and the relay (over
// cfg.Log) inside this process: the client_ figures are then the whole
// process's (client, relay and emulator), and there are no emu_, proc_,
// paced_ or phase figures.
func sendInProcess(ctx context.Context, cfg SendConfig) (Metrics, error) {
	emu := gmailfake.New(gmailfake.Options{Latency: cfg.Latency, QuotaPerMinute: unlimited})
	emuSrv := httptest.NewServer(emu.Handler())
	defer emuSrv.Close()
	log := cfg.Log
	if log == nil {
		bl, err := acceptlog.Open(filepath.Join(cfg.Dir, "accept.db"), acceptlog.Options{})
		if err != nil {
			return nil, err
		}
		defer bl.Close()
		log = bl
	}
	prov, err := gmailapi.New(ctx, gmailapi.Config{Endpoint: emuSrv.URL})
	if err != nil {
		return nil, err
	}
	pol := policy.Default()
	pol.MsgIDDomain = MsgIDDomain
	pol.VerifyHandle = policy.VerifyNever
	// The warm-up and the measured sends together exceed the default daily
	// budget (2000): the benchmark measures sends, not the budget.
	pol.Mailboxes = map[string]policy.Mailbox{policy.DefaultMailbox: {Name: policy.DefaultMailbox, DailySendLimit: 1 << 30}}
	svc, err := relay.New(ctx, relay.Config{Log: log, Provider: prov, Policy: pol,
		Quota: relay.NewQuota(unlimited, nil), Logger: zerolog.Nop()})
	if err != nil {
		return nil, err
	}
	relaySrv := httptest.NewServer(api.New(api.Config{Service: svc, MsgIDDomain: MsgIDDomain, Logger: zerolog.Nop()}))
	defer relaySrv.Close()

	direct, via, err := warmClients(ctx, emuSrv.URL, cfg.Concurrency, cfg.Preload, relaySrv.URL)
	if err != nil {
		return nil, err
	}
	h := harness{conc: cfg.Concurrency}
	relayed := route{via[0], func(context.Context) (ChildStats, error) { return ChildStats{Commits: log.Commits()}, nil }}
	halves, err := h.abba(ctx, route{svc: direct}, relayed, nil, cfg.Sends, false)
	if err != nil {
		return nil, err
	}
	if got, want := emu.Count(""), cfg.Preload+2*cfg.Concurrency+4*cfg.Sends; got != want {
		return nil, fmt.Errorf("send overhead: emulator holds %d messages, want %d", got, want)
	}
	return halves.metrics(false), nil
}

// warmClients returns Google's Gmail client pointed at the emulator
// (direct) and one pointed at each of hops (the relay, the proxy), all
// warmed up (see warmUp) after the direct client has stored preload
// messages in the emulator.
func warmClients(ctx context.Context, emuURL string, conc, preload int, hops ...string) (direct *gmail.Service, via []*gmail.Service, err error) {
	if direct, err = newGmailClient(ctx, emuURL, conc); err != nil {
		return nil, nil, err
	}
	for _, u := range hops {
		svc, err := newGmailClient(ctx, u, conc)
		if err != nil {
			return nil, nil, err
		}
		via = append(via, svc)
	}
	if preload > 0 {
		if _, err := runSends(ctx, direct, buildMessages("preload", preload), conc, nil); err != nil {
			return nil, nil, fmt.Errorf("preload: %w", err)
		}
	}
	if err := warmUp(ctx, conc, append([]*gmail.Service{direct}, via...)...); err != nil {
		return nil, nil, err
	}
	return direct, via, nil
}

// newGmailClient is Google's Gmail client pointed at base, with a
// connection pool large enough for conc callers.
func newGmailClient(ctx context.Context, base string, conc int) (*gmail.Service, error) {
	hc := &http.Client{Transport: &http.Transport{MaxIdleConns: 2 * conc, MaxIdleConnsPerHost: 2 * conc}}
	svc, err := gmail.NewService(ctx, option.WithEndpoint(base+"/"), option.WithHTTPClient(hc))
	if err != nil {
		return nil, fmt.Errorf("gmail client for %s: %w", base, err)
	}
	return svc, nil
}

// BuildMessage returns a small RFC 5322 message carrying messageID, its
// From the emulator's own account so that nothing is rewritten.
func BuildMessage(messageID string) []byte {
	return fmt.Appendf(nil, "From: Bench <%s>\r\nTo: rcpt@example.com\r\nSubject: bench %s\r\n"+
		"Date: Mon, 01 Jun 2026 09:00:00 +0000\r\nMessage-ID: %s\r\nMIME-Version: 1.0\r\n"+
		"Content-Type: text/plain; charset=UTF-8\r\n\r\nYour order has shipped. %s\r\n",
		gmailfake.DefaultAccount, messageID, messageID, messageID)
}

// buildMessages prepares n Gmail Message resources with distinct
// Message-IDs under prefix, encoded before any timing starts.
func buildMessages(prefix string, n int) []*gmail.Message {
	out := make([]*gmail.Message, n)
	for i := range out {
		raw := BuildMessage(fmt.Sprintf("<%s-%06d@%s>", prefix, i, MsgIDDomain))
		out[i] = &gmail.Message{Raw: encodeRaw(raw)}
	}
	return out
}

// measure sends msgs with conc workers (see runSends) and returns the
// client's side of their sample: time, latencies, and this process's CPU
// and allocations.
func measure(ctx context.Context, svc *gmail.Service, msgs []*gmail.Message, conc int, at []time.Duration) (sample, error) {
	mallocs, cpu := Mallocs(), CPUTime()
	start := time.Now()
	lat, err := runSends(ctx, svc, msgs, conc, at)
	took := time.Since(start)
	cpu, mallocs = CPUTime()-cpu, Mallocs()-mallocs
	if err != nil {
		return sample{}, err
	}
	return sample{sends: len(msgs), took: took, lat: lat, clientCPU: cpu, clientMallocs: mallocs}, nil
}

// runSends sends every message with conc workers and returns each send's
// latency; with at (one offset per message, in order), message i is not
// sent before at[i] from the start. Any failed send is an error: the
// figures would be meaningless.
func runSends(ctx context.Context, svc *gmail.Service, msgs []*gmail.Message, conc int, at []time.Duration) ([]time.Duration, error) {
	lat := make([]time.Duration, len(msgs))
	var next atomic.Int64
	var wg sync.WaitGroup
	var once sync.Once
	var firstErr error
	start := time.Now()
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(msgs) {
					return
				}
				if at != nil {
					if err := sleepUntil(ctx, start.Add(at[i])); err != nil {
						once.Do(func() { firstErr = err })
						return
					}
				}
				t0 := time.Now()
				got, err := svc.Users.Messages.Send("me", msgs[i]).Context(ctx).Do()
				lat[i] = time.Since(t0)
				if err == nil && got.Id == "" {
					err = fmt.Errorf("send answered without a Gmail id")
				}
				if err != nil {
					once.Do(func() { firstErr = fmt.Errorf("send %d: %w", i, err) })
					return
				}
			}
		}()
	}
	wg.Wait()
	return lat, firstErr
}

// sleepUntil waits until t, or returns ctx's error first.
func sleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return nil
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// encodeRaw is Gmail's raw field encoding (base64url with padding).
func encodeRaw(raw []byte) string { return base64.URLEncoding.EncodeToString(raw) }
