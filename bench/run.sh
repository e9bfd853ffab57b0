#!/bin/sh
# Runs gmailrelay's benchmarks (issue 7) and prints one markdown table of
# every figure, its target and pass/miss. The raw `go test -bench` output
# goes to stderr. Exit status 1 when a target is missed or a benchmark did
# not run.
#
#   bench/run.sh                                      # documented sizes (1,000,000-job log)
#   BENCH_FLAGS='-bench.jobs=100000' bench/run.sh     # quicker
#
# Extra flags for the test binary (e.g. -test.cpuprofile=/tmp/cpu.out) can
# be given as arguments. The package comes first: go test stops reading its
# own flags at the first one it does not know (-bench.jobs).
set -eu
cd "$(dirname "$0")/.."
go test ./bench/ -run '^$' -bench . -benchtime=1x -timeout 60m \
	${BENCH_FLAGS:--bench.jobs=1000000 -bench.growth=100000} "$@" | go run ./bench/cmd/table
