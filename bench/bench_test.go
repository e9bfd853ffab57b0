package bench_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay/bench"
)

// Sizes. The documented run (bench/run.sh) passes -bench.jobs=1000000 and
// -bench.growth=100000; the defaults keep a plain `go test -bench .` short
// on a 2-core machine.
var (
	flagJobs    = flag.Int("bench.jobs", 100_000, "jobs of the big log in BenchmarkLogScale (the documented figure is 1000000)")
	flagRaw     = flag.Bool("bench.raw", true, "every job of BenchmarkLogScale's logs keeps its raw message (false: none does, as after retention)")
	flagSends   = flag.Int("bench.sends", 1000, "sends per half of each path at 0 ms emulator latency in BenchmarkSendOverhead (each path sends two halves)")
	flagRounds  = flag.Int("bench.rounds", 8, "rounds of sends per half of each path at 150 ms latency (sends = concurrency × rounds)")
	flagPreload = flag.Int("bench.preload", 0, "messages stored in the emulator before BenchmarkSendOverhead measures (its state's effect on its CPU)")
	flagEmuProc = flag.Int("bench.emuprocs", 0, "GOMAXPROCS of BenchmarkSendOverhead's emulator process (0: the default)")
	flagDurable = flag.Int("bench.durable", 2000, "Mutates per concurrency level in BenchmarkDurableLog")
	flagSweep   = flag.Int("bench.sweepjobs", 10_000, "unknown jobs in BenchmarkSweeper")
	flagGrowth  = flag.Int("bench.growth", 20_000, "plain sends written in BenchmarkGrowth (each kept, then pruned)")
)

// childEnv names the log a child process opens for BenchmarkLogScale.
const childEnv = "GMAILRELAY_BENCH_CHILD_LOG"

// childPrefix starts the line a child prints its figures on.
const childPrefix = "BENCH-CHILD "

func report(b *testing.B, m bench.Metrics) {
	b.Helper()
	for unit, v := range m {
		b.ReportMetric(v, unit)
	}
}

// BenchmarkSendOverhead: Google's client straight to the emulator vs
// through the relay's Gmail-compatible path vs through a bare reverse
// proxy (in the order direct, relayed, proxied, proxied, relayed, direct),
// at emulator latency 0 and 150 ms and concurrency 1, 16, 64.
func BenchmarkSendOverhead(b *testing.B) {
	ctx := context.Background()
	for _, lat := range []time.Duration{0, 150 * time.Millisecond} {
		for _, conc := range []int{1, 16, 64} {
			b.Run(fmt.Sprintf("latency=%dms/conc=%d", lat.Milliseconds(), conc), func(b *testing.B) {
				n := *flagSends
				if lat > 0 {
					n = conc * *flagRounds
				}
				var m bench.Metrics
				for b.Loop() {
					var err error
					m, err = bench.SendOverhead(ctx, bench.SendConfig{Latency: lat, Concurrency: conc, Sends: n, Preload: *flagPreload, EmulatorProcs: *flagEmuProc,
						Dir: b.TempDir(), Processes: true})
					if err != nil {
						b.Fatal(err)
					}
				}
				report(b, m)
			})
		}
	}
}

// BenchmarkDurableLog: durable appends next to raw write+fsync.
func BenchmarkDurableLog(b *testing.B) {
	ctx := context.Background()
	for _, conc := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("conc=%d", conc), func(b *testing.B) {
			var m bench.Metrics
			for b.Loop() {
				var err error
				if m, err = bench.DurableLog(ctx, b.TempDir(), conc, *flagDurable); err != nil {
					b.Fatal(err)
				}
			}
			report(b, m)
		})
	}
}

// BenchmarkSweeper: a backlog of unknown jobs, half really sent, at
// Gmail's per-user quota on the emulator's (injected) clock.
func BenchmarkSweeper(b *testing.B) {
	ctx := context.Background()
	var m bench.Metrics
	for b.Loop() {
		var err error
		m, err = bench.Sweep(ctx, bench.SweepConfig{Dir: b.TempDir(), Jobs: *flagSweep, QuotaPerMinute: 15000})
		if err != nil {
			b.Fatal(err)
		}
	}
	report(b, m)
}

// BenchmarkGrowth: the log file's bytes per plain send, kept and after
// the retention pass (Growth).
func BenchmarkGrowth(b *testing.B) {
	var m bench.Metrics
	for b.Loop() {
		var err error
		if m, err = bench.Growth(context.Background(), b.TempDir(), *flagGrowth); err != nil {
			b.Fatal(err)
		}
	}
	report(b, m)
}

// BenchmarkLogScale: a big log (-bench.jobs plain sends, 100 left
// forwarding, 10 in review, see bench.ScaleConfig) opened and recovered in
// a fresh process, and its review queue listed next to that of a log with
// a tenth of the jobs.
func BenchmarkLogScale(b *testing.B) {
	ctx := context.Background()
	const forwarding, review = 100, 10
	jobs := *flagJobs
	dir := b.TempDir()
	big, small := filepath.Join(dir, "big.db"), filepath.Join(dir, "small.db")
	t0 := time.Now()
	if err := bench.BuildLog(ctx, big, bench.ScaleConfig{Jobs: jobs, Forwarding: forwarding, Review: review, Raw: *flagRaw}); err != nil {
		b.Fatal(err)
	}
	built := time.Since(t0)
	if err := bench.BuildLog(ctx, small, bench.ScaleConfig{Jobs: jobs / 10, Review: review, Raw: *flagRaw}); err != nil {
		b.Fatal(err)
	}
	var m bench.Metrics
	for b.Loop() {
		// Review queues first: recovery below writes to the big log.
		smallT, err := bench.ReviewQueue(ctx, small, review, 1000)
		if err != nil {
			b.Fatal(err)
		}
		bigT, err := bench.ReviewQueue(ctx, big, review, 1000)
		if err != nil {
			b.Fatal(err)
		}
		if m, err = runChild(big); err != nil {
			b.Fatal(err)
		}
		m["review_small_us"] = float64(smallT) / float64(time.Microsecond)
		m["review_big_us"] = float64(bigT) / float64(time.Microsecond)
		m["review_ratio"] = float64(bigT) / float64(smallT)
	}
	st, err := os.Stat(big)
	if err != nil {
		b.Fatal(err)
	}
	m["jobs"], m["build_s"], m["file_mb"] = float64(jobs), built.Seconds(), float64(st.Size())/(1<<20)
	m["raw"] = 0
	if *flagRaw {
		m["raw"] = 1
	}
	report(b, m)
}

// runChild runs OpenAndRecover on path in a fresh process (this test
// binary, running TestScaleChild) so that its RSS is the log's alone.
func runChild(path string) (bench.Metrics, error) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestScaleChild$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), childEnv+"="+path)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("child process: %w: %s", err, out.String())
	}
	for _, line := range strings.Split(out.String(), "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), childPrefix); ok {
			var m bench.Metrics
			if err := json.Unmarshal([]byte(rest), &m); err != nil {
				return nil, fmt.Errorf("child figures %q: %w", rest, err)
			}
			return m, nil
		}
	}
	return nil, fmt.Errorf("child printed no figures: %s", out.String())
}

// TestScaleChild is BenchmarkLogScale's child process; it does nothing
// unless started by it.
func TestScaleChild(t *testing.T) {
	path := os.Getenv(childEnv)
	if path == "" {
		t.Skip("only run as BenchmarkLogScale's child process")
	}
	m, err := bench.OpenAndRecover(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println(childPrefix + string(data))
}

// TestMain runs this binary as one of SendOverhead's servers when it was
// started as one (bench.IsChild).
func TestMain(m *testing.M) {
	if bench.IsChild() {
		os.Exit(bench.RunChild())
	}
	os.Exit(m.Run())
}
