#!/bin/sh
# Runs gmailrelay's benchmarks (issue 7) and prints one markdown table of
# every figure, its target and pass/miss. The raw `go test -bench` output
# goes to stderr. Exit status 1 when a target is missed or a benchmark did
# not run.
#
#   bench/run.sh                                      # documented sizes (1,000,000-line log)
#   BENCH_FLAGS='-bench.lines=200000' bench/run.sh    # quicker
#
# Extra flags for the test binary (e.g. -test.cpuprofile=/tmp/cpu.out) can
# be given as arguments. The package comes first: go test stops reading its
# own flags at the first one it does not know (-bench.lines).
set -eu
cd "$(dirname "$0")/.."
go test ./bench/ -run '^$' -bench . -benchtime=1x -timeout 60m \
	${BENCH_FLAGS:--bench.lines=1000000} "$@" | go run ./bench/cmd/table
