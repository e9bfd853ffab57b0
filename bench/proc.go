package bench

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gmailrelay/gmailrelay/internal/testclock"
)

// Clock is a manually advanced clock shared by the relay, the sweeper and
// the emulator, so that quota refills and grace periods pass in no real
// time.
type Clock = testclock.Clock

// NewClock returns a clock reading a fixed, arbitrary instant.
func NewClock() *Clock { return testclock.New() }

// CPUTime returns the CPU time (user + system) the process has used so far.
func CPUTime() time.Duration {
	user, sys := CPUTimes()
	return user + sys
}

// CPUTimes returns the user and the system CPU time the process has used so
// far (system time holds the kernel's work for its syscalls: reads, writes,
// fdatasync).
func CPUTimes() (user, sys time.Duration) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, 0
	}
	return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
}

// Mallocs returns the number of heap allocations the process has made.
func Mallocs() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.Mallocs
}

// RSS returns the process's resident set size (VmRSS of /proc/self/status)
// in bytes.
func RSS() (int64, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, fmt.Errorf("read rss: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:")
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			break
		}
		kb, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parse VmRSS %q: %w", rest, err)
		}
		return kb << 10, nil
	}
	return 0, fmt.Errorf("read rss: no VmRSS line in /proc/self/status")
}

// Percentile returns the p-th percentile (0 < p <= 100, nearest rank) of
// ds, sorting ds in place; 0 for an empty slice.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	rank := int(p/100*float64(len(ds)) + 0.999999)
	rank = min(max(rank, 1), len(ds))
	return ds[rank-1]
}

// ms is d in milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// rate is n per second of d.
func rate(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}
