// Command table reads `go test -bench` output of package bench on stdin,
// echoes it to stderr, and prints one markdown table of every figure of
// issue 7 with its target and pass/miss, headed by the machine and the
// date. It exits 1 when a figure misses its target or did not run.
package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/gmailrelay/gmailrelay/bench"
)

func main() {
	if err := run(os.Stdin, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "table:", err)
		os.Exit(1)
	}
}

func run(in io.Reader, out, echo io.Writer) error {
	data, err := io.ReadAll(in)
	if err != nil {
		return fmt.Errorf("read stdin: %w", err)
	}
	if _, err := echo.Write(data); err != nil {
		return fmt.Errorf("echo: %w", err)
	}
	results, info, err := bench.Parse(bytes.NewReader(data))
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "Provider: the Gmail EMULATOR (gmailfake), not Gmail: these are emulator results.\n")
	fmt.Fprintf(out, "Machine: %s, %d CPUs (GOMAXPROCS %d), %s/%s, memory %s, %s. Date: %s.\n\n",
		orUnknown(info.CPU), runtime.NumCPU(), info.Procs, info.GOOS, info.GOARCH, memTotal(), runtime.Version(),
		time.Now().UTC().Format("2006-01-02 15:04 MST"))
	rows := bench.Rows(results)
	if err := bench.Render(out, rows); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	bad := 0
	for _, r := range rows {
		if r.Status == bench.StatusMiss || r.Status == bench.StatusNotRun {
			bad++
		}
	}
	if bad > 0 {
		return fmt.Errorf("%d figures missed their target or did not run", bad)
	}
	return nil
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown CPU"
	}
	return s
}

// memTotal is MemTotal of /proc/meminfo, or "unknown".
func memTotal() string {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			var kb int64
			if _, err := fmt.Sscan(strings.TrimSpace(rest), &kb); err == nil {
				return fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
			}
		}
	}
	return "unknown"
}
