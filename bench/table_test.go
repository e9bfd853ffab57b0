package bench_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay/bench"
)

// format writes results as `go test -bench` prints them.
func format(results []bench.Result) string {
	var b strings.Builder
	b.WriteString("goos: linux\ngoarch: amd64\ncpu: Test CPU\n")
	for _, r := range results {
		fmt.Fprintf(&b, "%s-2\t1\t12345 ns/op", r.Name)
		units := make([]string, 0, len(r.Metrics))
		for u := range r.Metrics {
			units = append(units, u)
		}
		sort.Strings(units)
		for _, u := range units {
			fmt.Fprintf(&b, "\t%.4g %s", r.Metrics[u], u)
		}
		b.WriteString("\n")
	}
	b.WriteString("PASS\nok  \tgithub.com/gmailrelay/gmailrelay/bench\t1.0s\n")
	return b.String()
}

// TestTinyRun runs every scenario on tiny sizes and the table code over
// their figures, so that neither can rot between benchmark runs.
func TestTinyRun(t *testing.T) {
	ctx := context.Background()
	var results []bench.Result
	add := func(name string, m bench.Metrics, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		results = append(results, bench.Result{Name: name, Metrics: m})
	}
	for _, lat := range []int{0, 150} {
		for _, conc := range []int{1, 16, 64} {
			name := fmt.Sprintf("BenchmarkSendOverhead/latency=%dms/conc=%d", lat, conc)
			if lat == 0 && conc == 1 {
				m, err := bench.SendOverhead(ctx, bench.SendConfig{Concurrency: 2, Sends: 10, Dir: t.TempDir(), Processes: true})
				add(name, m, err)
				if got := m["fsyncs/send"]; got <= 0 || got != 2*m["commits/send"] {
					t.Errorf("fsyncs/send = %v, want > 0 and twice commits/send (%v): every relay send is logged durably, a bbolt commit syncs twice",
						got, m["commits/send"])
				}
				for _, k := range []string{"direct1_sends/s", "relay1_sends/s", "relay2_sends/s", "direct2_sends/s",
					"paced_sends/s", "paced_emu_cpu_us/send", "relay1_proc_cpu_us/send", "emu_drift", "emu_ratio_first", "emu_ratio_paced",
					"proxy1_sends/s", "proxy2_sends/s", "proxy_sends/s", "proxy_p50_ms", "proxy_proc_cpu_us/send", "proxy_proc_allocs/send",
					"proxy2_proc_cpu_us/send", "proxy_emu_cpu_us/send", "relay_proxy_cpu_ratio", "relay_proxy_allocs_ratio"} {
					if m[k] <= 0 {
						t.Errorf("%s = %v, want > 0", k, m[k])
					}
				}
				continue
			}
			// The other configurations only differ in sizes: reuse the figures.
			results = append(results, bench.Result{Name: name, Metrics: results[0].Metrics})
		}
	}
	// In process (pglog's benchmark): the same halves, no process figures.
	if m, err := bench.SendOverhead(ctx, bench.SendConfig{Concurrency: 2, Sends: 10, Dir: t.TempDir()}); err != nil {
		t.Errorf("in process: %v", err)
	} else {
		if m["ratio"] <= 0 || m["direct1_sends/s"] <= 0 || m["relay2_sends/s"] <= 0 || m["fsyncs/send"] <= 0 {
			t.Errorf("in process: ratio %v, direct1 %v, relay2 %v, fsyncs/send %v; want all > 0",
				m["ratio"], m["direct1_sends/s"], m["relay2_sends/s"], m["fsyncs/send"])
		}
		if _, ok := m["paced_sends/s"]; ok {
			t.Errorf("in process: paced sends reported, but there is no emulator process to see arrivals")
		}
		if _, ok := m["proxy_sends/s"]; ok {
			t.Errorf("in process: proxied sends reported, but the proxy only runs in a process of its own")
		}
	}
	for _, conc := range []int{1, 16, 64} {
		m, err := bench.DurableLog(ctx, t.TempDir(), min(conc, 4), 20)
		add(fmt.Sprintf("BenchmarkDurableLog/conc=%d", conc), m, err)
	}
	m, err := bench.Sweep(ctx, bench.SweepConfig{Dir: t.TempDir(), Jobs: 40, QuotaPerMinute: 15000, BatchSize: 5})
	add("BenchmarkSweeper", m, err)
	if m["wrong"] != 0 || m["resolved"] != 40 || m["storms"] != 0 {
		t.Errorf("sweep: wrong %v, resolved %v, storms %v; want 0, 40, 0", m["wrong"], m["resolved"], m["storms"])
	}

	m, err = bench.Growth(ctx, t.TempDir(), 30)
	add("BenchmarkGrowth", m, err)
	if m["pruned_jobs"] != 30 || m["raw_bytes"] != float64(len(bench.PlainRaw)) {
		t.Errorf("growth: %v jobs pruned, raw %v bytes; want 30 and %d", m["pruned_jobs"], m["raw_bytes"], len(bench.PlainRaw))
	}
	// Kept jobs hold their raw message, pruned ones do not: even at this
	// size, where the file's fixed pages weigh most, the pruned file uses
	// fewer pages.
	if m["kept_used_bytes/job"] <= m["pruned_used_bytes/job"] || m["pruned_used_bytes/job"] <= 0 || m["kept_file_bytes/job"] <= 0 {
		t.Errorf("growth: pages in use per job kept %v, pruned %v; want kept > pruned > 0", m["kept_used_bytes/job"], m["pruned_used_bytes/job"])
	}

	dir := t.TempDir()
	big, small := filepath.Join(dir, "big.db"), filepath.Join(dir, "small.db")
	if err := bench.BuildLog(ctx, big, bench.ScaleConfig{Jobs: 200, Forwarding: 5, Review: 3, Raw: true}); err != nil {
		t.Fatal(err)
	}
	if err := bench.BuildLog(ctx, small, bench.ScaleConfig{Jobs: 20, Review: 3}); err != nil {
		t.Fatal(err)
	}
	st, err := bench.ReviewQueue(ctx, small, 3, 5)
	if err != nil {
		t.Fatal(err)
	}
	bt, err := bench.ReviewQueue(ctx, big, 3, 5)
	if err != nil {
		t.Fatal(err)
	}
	m, err = bench.OpenAndRecover(ctx, big)
	if err == nil && m["recovered"] != 5 {
		t.Errorf("recovered = %v, want 5", m["recovered"])
	}
	if err == nil && (m["verify_ms"] <= 0 || m["rss_anon_mb"] <= 0 || m["rss_file_mb"] <= 0 || m["rss_anon_mb"]+m["rss_file_mb"] > m["rss_mb"]) {
		t.Errorf("verify %v ms, rss %v MiB (anon %v, file %v): want a verify time and RSS parts within the total",
			m["verify_ms"], m["rss_mb"], m["rss_anon_mb"], m["rss_file_mb"])
	}
	if err == nil {
		m["review_ratio"], m["review_big_us"], m["review_small_us"] = float64(bt)/float64(st), float64(bt/time.Microsecond), float64(st/time.Microsecond)
	}
	if err == nil {
		m["jobs"], m["build_s"], m["file_mb"], m["raw"] = 200, 0.1, 1, 1
	}
	add("BenchmarkLogScale", m, err)

	parsed, info, err := bench.Parse(strings.NewReader(format(results)))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(parsed), len(results); got != want {
		t.Fatalf("parsed %d results, want %d", got, want)
	}
	if info.CPU != "Test CPU" || info.Procs != 2 {
		t.Errorf("info = %+v, want cpu Test CPU and 2 procs", info)
	}
	rows := bench.Rows(parsed)
	var out strings.Builder
	if err := bench.Render(&out, rows); err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.Status == bench.StatusNotRun {
			t.Errorf("row %q did not run", r.Figure)
		}
	}
	if got, want := strings.Count(out.String(), "\n"), len(rows)+2; got != want {
		t.Errorf("table has %d lines, want %d:\n%s", got, want, out.String())
	}
}

// TestRowsTargets checks the pass/miss decisions on hand-made figures.
func TestRowsTargets(t *testing.T) {
	send := func(ratio, added, fsyncs float64) bench.Metrics {
		return bench.Metrics{"ratio": ratio, "added_p50_ms": added, "fsyncs/send": fsyncs}
	}
	growth := func(kept, pruned float64) bench.Metrics {
		return bench.Metrics{"jobs": 10, "raw_bytes": 1600, "kept_file_bytes/job": kept, "pruned_file_bytes/job": pruned}
	}
	const growthLabel = "log file, 10 plain sends (1600-byte raw message; received, forwarding; effect; verify search)"
	tests := []struct {
		name   string
		result bench.Result
		figure string
		want   string
	}{
		{"throughput met", bench.Result{Name: "BenchmarkSendOverhead/latency=150ms/conc=64", Metrics: send(0.98, 1, 2)},
			"send, latency 150 ms, concurrency 64: throughput relay/direct", bench.StatusPass},
		{"throughput missed", bench.Result{Name: "BenchmarkSendOverhead/latency=150ms/conc=64", Metrics: send(0.97, 1, 2)},
			"send, latency 150 ms, concurrency 64: throughput relay/direct", bench.StatusMiss},
		{"added latency missed", bench.Result{Name: "BenchmarkSendOverhead/latency=150ms/conc=16", Metrics: send(1, 2.5, 2)},
			"send, latency 150 ms, concurrency 16: p50 added latency", bench.StatusMiss},
		{"fsyncs met", bench.Result{Name: "BenchmarkSendOverhead/latency=0ms/conc=64", Metrics: send(0.2, 50, 0.4)},
			"send, latency 0 ms, concurrency 64: fsyncs/send", bench.StatusPass},
		{"fsyncs missed", bench.Result{Name: "BenchmarkSendOverhead/latency=0ms/conc=64", Metrics: send(0.2, 50, 1)},
			"send, latency 0 ms, concurrency 64: fsyncs/send", bench.StatusMiss},
		{"throughput at 0 ms missed", bench.Result{Name: "BenchmarkSendOverhead/latency=0ms/conc=64", Metrics: send(0.4, 50, 0.4)},
			"send, latency 0 ms, concurrency 64: throughput relay/direct", bench.StatusMiss},
		{"relay CPU met", bench.Result{Name: "BenchmarkSendOverhead/latency=0ms/conc=64", Metrics: bench.Metrics{"relay_proc_cpu_us/send": 150}},
			"send, latency 0 ms, concurrency 64: relay process CPU/send", bench.StatusPass},
		{"relay CPU missed at 150 ms", bench.Result{Name: "BenchmarkSendOverhead/latency=150ms/conc=64", Metrics: bench.Metrics{"relay_proc_cpu_us/send": 201}},
			"send, latency 150 ms, concurrency 64: relay process CPU/send", bench.StatusMiss},
		{"relay allocs missed", bench.Result{Name: "BenchmarkSendOverhead/latency=0ms/conc=64", Metrics: bench.Metrics{"relay_proc_cpu_us/send": 1, "relay_proc_allocs/send": 251}},
			"send, latency 0 ms, concurrency 64: relay process allocs/send", bench.StatusMiss},
		{"emulator CPU missed", bench.Result{Name: "BenchmarkSendOverhead/latency=150ms/conc=64", Metrics: bench.Metrics{"relay_proc_cpu_us/send": 1, "emu_ratio": 1.11}},
			"send, latency 150 ms, concurrency 64: emulator CPU per send, relayed/direct", bench.StatusMiss},
		{"emulator halves and paced sends are for the record", bench.Result{Name: "BenchmarkSendOverhead/latency=0ms/conc=64",
			Metrics: bench.Metrics{"relay_proc_cpu_us/send": 1, "emu_ratio": 1.5, "paced_emu_cpu_us/send": 60, "emu_ratio_paced": 1}},
			"send, latency 0 ms, concurrency 64: emulator CPU per send, by half and paced", bench.StatusInfo},
		{"the bare proxy is for the record", bench.Result{Name: "BenchmarkSendOverhead/latency=150ms/conc=64",
			Metrics: bench.Metrics{"relay_proc_cpu_us/send": 400, "proxy_proc_cpu_us/send": 200, "relay_proxy_cpu_ratio": 2}},
			"send, latency 150 ms, concurrency 64: bare reverse proxy (httputil) per request, and relay ÷ proxy", bench.StatusInfo},
		{"relay CPU within 3× the bare proxy's", bench.Result{Name: "BenchmarkSendOverhead/latency=0ms/conc=16",
			Metrics: bench.Metrics{"relay_proc_cpu_us/send": 300, "proxy_proc_cpu_us/send": 100, "relay_proxy_cpu_ratio": 3}},
			"send, latency 0 ms, concurrency 16: relay process CPU per send ÷ bare proxy's", bench.StatusPass},
		{"relay CPU over 3× the bare proxy's", bench.Result{Name: "BenchmarkSendOverhead/latency=150ms/conc=1",
			Metrics: bench.Metrics{"relay_proc_cpu_us/send": 301, "proxy_proc_cpu_us/send": 100, "relay_proxy_cpu_ratio": 3.01}},
			"send, latency 150 ms, concurrency 1: relay process CPU per send ÷ bare proxy's", bench.StatusMiss},
		{"added p50 within 5 ms of the bare proxy's", bench.Result{Name: "BenchmarkSendOverhead/latency=150ms/conc=64",
			Metrics: bench.Metrics{"relay_proc_cpu_us/send": 1, "proxy_proc_cpu_us/send": 1, "relay_p50_ms": 156, "proxy_p50_ms": 151}},
			"send, latency 150 ms, concurrency 64: added p50 (p50 − latency), relay vs bare proxy", bench.StatusPass},
		{"added p50 over 5 ms above the bare proxy's", bench.Result{Name: "BenchmarkSendOverhead/latency=150ms/conc=16",
			Metrics: bench.Metrics{"relay_proc_cpu_us/send": 1, "proxy_proc_cpu_us/send": 1, "relay_p50_ms": 156.1, "proxy_p50_ms": 151}},
			"send, latency 150 ms, concurrency 16: added p50 (p50 − latency), relay vs bare proxy", bench.StatusMiss},
		{"a run without the proxy says so", bench.Result{Name: "BenchmarkSendOverhead/latency=0ms/conc=64", Metrics: bench.Metrics{"relay_proc_cpu_us/send": 150}},
			"send, latency 0 ms, concurrency 64: bare reverse proxy (httputil) per request, and relay ÷ proxy", bench.StatusNotRun},
		{"in-process run has no relay process figures", bench.Result{Name: "BenchmarkSendOverhead/latency=0ms/conc=64", Metrics: send(0.6, 1, 0.4)},
			"send, latency 0 ms, concurrency 64: relay process CPU and allocs per send", bench.StatusNotRun},
		{"fsyncs at concurrency 1 met", bench.Result{Name: "BenchmarkSendOverhead/latency=150ms/conc=1", Metrics: send(0.98, 1, 4)},
			"send, latency 150 ms, concurrency 1: fsyncs/send", bench.StatusPass},
		{"fsyncs at concurrency 1 missed", bench.Result{Name: "BenchmarkSendOverhead/latency=0ms/conc=1", Metrics: send(0.98, 1, 4.2)},
			"send, latency 0 ms, concurrency 1: fsyncs/send", bench.StatusMiss},
		{"fsyncs at concurrency 64 missed at 150 ms", bench.Result{Name: "BenchmarkSendOverhead/latency=150ms/conc=64", Metrics: send(0.98, 1, 0.6)},
			"send, latency 150 ms, concurrency 64: fsyncs/send", bench.StatusMiss},
		{"fsyncs at concurrency 16 are for the record", bench.Result{Name: "BenchmarkSendOverhead/latency=0ms/conc=16", Metrics: send(0.98, 1, 9)},
			"send, latency 0 ms, concurrency 16: fsyncs/send", bench.StatusInfo},
		{"bytes per kept job met", bench.Result{Name: "BenchmarkGrowth", Metrics: growth(3<<10+1600, 100)},
			growthLabel + ": file bytes per job, kept (compacted file ÷ jobs)", bench.StatusPass},
		{"bytes per kept job missed", bench.Result{Name: "BenchmarkGrowth", Metrics: growth(3<<10+1601, 100)},
			growthLabel + ": file bytes per job, kept (compacted file ÷ jobs)", bench.StatusMiss},
		{"bytes per pruned job met", bench.Result{Name: "BenchmarkGrowth", Metrics: growth(100, 1536)},
			growthLabel + ": file bytes per job after the retention pass (compacted file ÷ jobs)", bench.StatusPass},
		{"bytes per pruned job missed", bench.Result{Name: "BenchmarkGrowth", Metrics: growth(100, 1537)},
			growthLabel + ": file bytes per job after the retention pass (compacted file ÷ jobs)", bench.StatusMiss},
		{"open + recover met", bench.Result{Name: "BenchmarkLogScale", Metrics: bench.Metrics{"jobs": 10, "open_ms": 1500, "recover_ms": 500}},
			"log scale, 10 jobs (no raw messages): open + recover (100 forwarding jobs), fresh process", bench.StatusPass},
		{"open + recover missed", bench.Result{Name: "BenchmarkLogScale", Metrics: bench.Metrics{"jobs": 10, "raw": 1, "open_ms": 1500, "recover_ms": 501}},
			"log scale, 10 jobs (every raw message kept): open + recover (100 forwarding jobs), fresh process", bench.StatusMiss},
		{"durable missed", bench.Result{Name: "BenchmarkDurableLog/conc=1", Metrics: bench.Metrics{"ratio_vs_raw": 0.3}},
			"durable log, concurrency 1: appends ÷ raw fsyncs", bench.StatusMiss},
		{"sweeper wrong", bench.Result{Name: "BenchmarkSweeper", Metrics: bench.Metrics{"jobs": 10, "wrong": 1}},
			"sweeper, 10 unknown jobs (half sent), quota 15000/min: jobs wrongly resolved", bench.StatusMiss},
		{"review grows", bench.Result{Name: "BenchmarkLogScale", Metrics: bench.Metrics{"jobs": 1, "review_ratio": 3}},
			"log scale, 1 jobs (no raw messages): review queue, 10 among all jobs vs among a tenth", bench.StatusMiss},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got string
			for _, r := range bench.Rows([]bench.Result{tc.result}) {
				if r.Figure == tc.figure {
					got = r.Status
				}
			}
			if got != tc.want {
				t.Errorf("status of %q = %q, want %q", tc.figure, got, tc.want)
			}
		})
	}
}
