#!/bin/sh
# Runs gmailrelay's benchmarks (issue 7) and prints one markdown table of
# every figure, its target and pass/miss. The raw `go test -bench` output
# goes to stderr. Exit status 1 when a target is missed.
#
#   bench/run.sh                 # the documented sizes (1,000,000-line log)
#   BENCH_FLAGS='-bench.lines=200000' bench/run.sh   # quicker
#
# Extra `go test` flags (e.g. -cpuprofile) can be given as arguments.
set -eu
cd "$(dirname "$0")/.."
go test -run '^$' -bench . -benchtime=1x -timeout 60m \
	${BENCH_FLAGS:--bench.lines=1000000} "$@" ./bench/ | go run ./bench/cmd/table
