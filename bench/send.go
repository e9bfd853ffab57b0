package bench

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/api/gmail/v1"
	"google.golang.org/api/option"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/acceptlog"
	"github.com/gmailrelay/gmailrelay/api"
	"github.com/gmailrelay/gmailrelay/gmailapi"
	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/internal/lifecycle"
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
	Log gmailrelay.Store
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
// and p99 over their latencies together). A half is as long as a path's
// whole stretch in docs/bench-notes/fairness.md: at 150 ms the relay's
// arrivals spread out round by round, so shorter stretches would give
// other figures.
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
// Mallocs over the relayed sends), commits/send (acceptance-log commits
// per send) and, for the bbolt log, fsyncs/send (two per commit), the p50 of each phase of a relayed send inside the relay's
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
// emu_ratio_first (first relayed half ÷ first direct half: one direct
// stretch then one relayed, no ABBA), emu_ratio_paced (relayed ÷ paced direct),
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
	m["fsyncs/send"] = boltSyncsPerCommit * m["commits/send"]
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
	relaySrv := httptest.NewServer(api.New(api.Config{Relay: svc, Log: log, Policy: pol, MsgIDDomain: MsgIDDomain, Logger: zerolog.Nop()}))
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
	m := halves.metrics(false)
	if cfg.Log == nil {
		m["fsyncs/send"] = boltSyncsPerCommit * m["commits/send"]
	}
	return m, nil
}

// boltSyncsPerCommit is how many times a bbolt commit syncs the file: its
// pages, then its meta page (once more when it grows the file, which is
// rare and not counted).
const boltSyncsPerCommit = 2

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
					if !lifecycle.Sleep(ctx, time.Until(start.Add(at[i]))) {
						once.Do(func() { firstErr = ctx.Err() })
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

// encodeRaw is Gmail's raw field encoding (base64url with padding).
func encodeRaw(raw []byte) string { return base64.URLEncoding.EncodeToString(raw) }
