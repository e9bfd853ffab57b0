package pglog_test

import (
	"context"
	"flag"
	"testing"

	"github.com/gmailrelay/gmailrelay/bench"
	"github.com/gmailrelay/gmailrelay/pglog"
)

var flagBenchSends = flag.Int("pglog.sends", 2000, "sends per backend in BenchmarkSendPostgresVsBbolt")

// BenchmarkSendPostgresVsBbolt sends through the relay's Gmail-compatible
// path to the emulator at concurrency 64, once with the bbolt log and once
// with the PostgreSQL log, in one run (emulator results): sends/s and the
// median added latency (relay p50 − direct p50) side by side.
func BenchmarkSendPostgresVsBbolt(b *testing.B) {
	url := databaseURL(b)
	ctx := context.Background()
	const conc = 64
	for b.Loop() {
		schema := freshSchema(b, url)
		pl, err := pglog.Open(ctx, url, pglog.Options{Schema: schema, MaxConns: conc})
		if err != nil {
			b.Fatal(err)
		}
		pm, err := bench.SendOverhead(ctx, bench.SendConfig{Concurrency: conc, Sends: *flagBenchSends, Log: pl})
		_ = pl.Close()
		if err != nil {
			b.Fatal(err)
		}
		bm, err := bench.SendOverhead(ctx, bench.SendConfig{Concurrency: conc, Sends: *flagBenchSends, Dir: b.TempDir()})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(bm["relay_sends/s"], "bbolt_sends/s")
		b.ReportMetric(pm["relay_sends/s"], "pg_sends/s")
		b.ReportMetric(bm["added_p50_ms"], "bbolt_added_p50_ms")
		b.ReportMetric(pm["added_p50_ms"], "pg_added_p50_ms")
		b.ReportMetric(bm["relay_p50_ms"], "bbolt_p50_ms")
		b.ReportMetric(pm["relay_p50_ms"], "pg_p50_ms")
		b.ReportMetric(pm["commits/send"], "pg_commits/send")
		b.ReportMetric(bm["commits/send"], "bbolt_commits/send")
	}
}
