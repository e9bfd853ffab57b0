// Package bench is gmailrelay's benchmark harness (issue 7). It measures,
// side by side in one run and as ratios, because absolute times on shared
// machines are noise:
//
//  1. Send overhead: Google's Go client sending straight to the Gmail
//     emulator next to the same client sending through the relay's
//     Gmail-compatible path to the same emulator, and through a bare
//     reverse proxy to it, the bar a relay's CPU per send is judged
//     against (SendOverhead).
//  2. The durable log: acceptance-log appends next to the raw write+fsync
//     rate of the same filesystem (DurableLog).
//  3. The sweeper: a backlog of unknown jobs reconciled against the
//     emulator's per-user quota on an injected clock (Sweep).
//  4. The log's scale: open-and-recover time, memory and the review queue
//     over a large log (BuildLog, OpenAndRecover, ReviewQueue).
//  5. The log's growth: file bytes per plain send, kept and after the
//     retention pass (Growth).
//
// The scenarios are plain functions returning their figures, so that the
// benchmarks in bench_test.go (which report them with b.ReportMetric) and a
// small test on tiny sizes share them. Parse and Render turn `go test
// -bench` output into one markdown table of figures, targets and pass/miss;
// bench/run.sh runs everything and prints that table.
//
// Every figure is an emulator result: the provider is gmailfake, not Gmail.
package bench
