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
	// Sends is how many messages each path sends.
	Sends int
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

// SendOverhead sends cfg.Sends messages with Google's Go client straight to
// the Gmail emulator, then the same number through the relay's
// Gmail-compatible path (POST /gmail/v1/users/me/messages/send) to the same
// emulator, with the same client settings and message shape (distinct
// Message-IDs). Both paths are warmed up first (connections, and the relay
// runs with verify_handle never so no send pays a read-back).
//
// With cfg.Processes, the emulator and the relay each run in a process of
// their own (this test binary started again: its TestMain must call
// RunChild when IsChild), the relay wired as `gmailrelay serve` wires it,
// so that the test process holds only the client and every process's CPU
// and allocations are its own. Otherwise (and always with cfg.Log set),
// the relay and the emulator run inside this process (see sendInProcess).
//
// Figures, per path (direct_, relay_): sends/s, p50_ms, p99_ms, and the
// client process's client_allocs/send and client_cpu_us/send, and the
// emulator process's emu_cpu_us/send, emu_allocs/send (the same work per
// send gives the same allocations; CPU also counts wake-ups) and
// emu_new_conns (connections it accepted during the measured sends). For the relay: proc_cpu_us/send
// (proc_sys_us/send of it in the kernel) and proc_allocs/send (the relay process's own rusage and Mallocs over the
// relayed sends), fsyncs/send (acceptance-log commits per send), the p50
// of each phase of a relayed send inside the relay's handler
// (phase_decode_us, phase_admit_us, phase_commit1_us, phase_gmail_us, phase_commit2_us,
// phase_answer_us, phase_total_us; see api.SendTiming), and ratio (relay
// sends/s ÷ direct sends/s), added_p50_ms (relay p50 − direct p50) and
// emu_ratio (emulator CPU per relayed send ÷ per direct send).
func SendOverhead(ctx context.Context, cfg SendConfig) (Metrics, error) {
	if cfg.Concurrency < 1 || cfg.Sends < 1 {
		return nil, fmt.Errorf("send overhead: concurrency and sends must be positive")
	}
	if cfg.Log != nil || !cfg.Processes {
		return sendInProcess(ctx, cfg)
	}
	emu, err := startChild(roleEmulator, childLatencyEnv+"="+cfg.Latency.String())
	if err != nil {
		return nil, err
	}
	defer emu.stop()
	rel, err := startChild(roleRelay, childEmulatorEnv+"="+emu.URL, childDirEnv+"="+cfg.Dir)
	if err != nil {
		return nil, err
	}
	defer rel.stop()

	direct, viaRelay, err := warmClients(ctx, emu.URL, rel.URL, cfg.Concurrency)
	if err != nil {
		return nil, err
	}

	m := Metrics{}
	e0, err := emu.stats(ctx)
	if err != nil {
		return nil, err
	}
	dm, err := measure(ctx, direct, buildMessages("direct", cfg.Sends), cfg.Concurrency)
	if err != nil {
		return nil, fmt.Errorf("direct sends: %w", err)
	}
	e1, err := emu.stats(ctx)
	if err != nil {
		return nil, err
	}
	r0, err := rel.stats(ctx) // also drops the warm-up's phases
	if err != nil {
		return nil, err
	}
	rm, err := measure(ctx, viaRelay, buildMessages("relay", cfg.Sends), cfg.Concurrency)
	if err != nil {
		return nil, fmt.Errorf("relay sends: %w", err)
	}
	r1, err := rel.stats(ctx)
	if err != nil {
		return nil, err
	}
	e2, err := emu.stats(ctx)
	if err != nil {
		return nil, err
	}
	n := float64(cfg.Sends)
	dm["emu_cpu_us/send"] = float64(e1.CPUNanos-e0.CPUNanos) / 1e3 / n
	rm["emu_cpu_us/send"] = float64(e2.CPUNanos-e1.CPUNanos) / 1e3 / n
	dm["emu_new_conns"] = float64(e1.Conns - e0.Conns)
	rm["emu_new_conns"] = float64(e2.Conns - e1.Conns)
	dm["emu_allocs/send"] = float64(e1.Mallocs-e0.Mallocs) / n
	rm["emu_allocs/send"] = float64(e2.Mallocs-e1.Mallocs) / n
	rm["proc_cpu_us/send"] = float64(r1.CPUNanos-r0.CPUNanos) / 1e3 / n
	rm["proc_sys_us/send"] = float64(r1.SysNanos-r0.SysNanos) / 1e3 / n
	rm["proc_allocs/send"] = float64(r1.Mallocs-r0.Mallocs) / n
	for k, v := range dm {
		m["direct_"+k] = v
	}
	for k, v := range rm {
		m["relay_"+k] = v
	}
	m["ratio"] = rm["sends/s"] / dm["sends/s"]
	m["added_p50_ms"] = rm["p50_ms"] - dm["p50_ms"]
	m["emu_ratio"] = rm["emu_cpu_us/send"] / dm["emu_cpu_us/send"]
	m["fsyncs/send"] = float64(r1.Commits-r0.Commits) / n
	for k, v := range phaseMedians(r1.Phases) {
		m[k] = v
	}
	if got, want := e2.Messages, 2*cfg.Concurrency+2*cfg.Sends; got != want {
		return nil, fmt.Errorf("send overhead: emulator holds %d messages, want %d", got, want)
	}
	return m, nil
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

// warmUp makes one round of sends on each path (connections).
func warmUp(ctx context.Context, direct, viaRelay *gmail.Service, conc int) error {
	for _, p := range []struct {
		name string
		svc  *gmail.Service
	}{{"warm-direct", direct}, {"warm-relay", viaRelay}} {
		if _, err := runSends(ctx, p.svc, buildMessages(p.name, conc), conc); err != nil {
			return fmt.Errorf("%s: %w", p.name, err)
		}
	}
	return nil
}

// sendInProcess is SendOverhead with the emulator and the relay (over
// cfg.Log) inside this process: the client_ figures are then the whole
// process's (client, relay and emulator), and there are no emu_, proc_ or
// phase figures.
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

	direct, viaRelay, err := warmClients(ctx, emuSrv.URL, relaySrv.URL, cfg.Concurrency)
	if err != nil {
		return nil, err
	}
	m := Metrics{}
	dm, err := measure(ctx, direct, buildMessages("direct", cfg.Sends), cfg.Concurrency)
	if err != nil {
		return nil, fmt.Errorf("direct sends: %w", err)
	}
	commits := log.Commits()
	rm, err := measure(ctx, viaRelay, buildMessages("relay", cfg.Sends), cfg.Concurrency)
	if err != nil {
		return nil, fmt.Errorf("relay sends: %w", err)
	}
	fsyncs := log.Commits() - commits
	for k, v := range dm {
		m["direct_"+k] = v
	}
	for k, v := range rm {
		m["relay_"+k] = v
	}
	m["ratio"] = rm["sends/s"] / dm["sends/s"]
	m["added_p50_ms"] = rm["p50_ms"] - dm["p50_ms"]
	m["fsyncs/send"] = float64(fsyncs) / float64(cfg.Sends)
	if got, want := emu.Count(""), 2*cfg.Concurrency+2*cfg.Sends; got != want {
		return nil, fmt.Errorf("send overhead: emulator holds %d messages, want %d", got, want)
	}
	return m, nil
}

// warmClients returns Google's Gmail client pointed at the emulator
// (direct) and at the relay, both warmed up (see warmUp).
func warmClients(ctx context.Context, emuURL, relayURL string, conc int) (direct, viaRelay *gmail.Service, err error) {
	if direct, err = newGmailClient(ctx, emuURL, conc); err != nil {
		return nil, nil, err
	}
	if viaRelay, err = newGmailClient(ctx, relayURL, conc); err != nil {
		return nil, nil, err
	}
	if err := warmUp(ctx, direct, viaRelay, conc); err != nil {
		return nil, nil, err
	}
	return direct, viaRelay, nil
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

// measure sends msgs with conc workers and returns sends/s, p50_ms, p99_ms,
// and this process's client_allocs/send and client_cpu_us/send.
func measure(ctx context.Context, svc *gmail.Service, msgs []*gmail.Message, conc int) (Metrics, error) {
	mallocs, cpu := Mallocs(), CPUTime()
	start := time.Now()
	lat, err := runSends(ctx, svc, msgs, conc)
	took := time.Since(start)
	cpu, mallocs = CPUTime()-cpu, Mallocs()-mallocs
	if err != nil {
		return nil, err
	}
	n := float64(len(msgs))
	return Metrics{
		"sends/s":            rate(len(msgs), took),
		"p50_ms":             ms(Percentile(lat, 50)),
		"p99_ms":             ms(Percentile(lat, 99)),
		"client_allocs/send": float64(mallocs) / n,
		"client_cpu_us/send": float64(cpu.Microseconds()) / n,
	}, nil
}

// runSends sends every message with conc workers and returns each send's
// latency. Any failed send is an error: the figures would be meaningless.
func runSends(ctx context.Context, svc *gmail.Service, msgs []*gmail.Message, conc int) ([]time.Duration, error) {
	lat := make([]time.Duration, len(msgs))
	var next atomic.Int64
	var wg sync.WaitGroup
	var once sync.Once
	var firstErr error
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(msgs) {
					return
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
