package bench

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"runtime/metrics"
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
	u := ReadUsage()
	return u.User, u.Sys
}

// Usage is what the kernel counts for the process so far (getrusage).
type Usage struct {
	User, Sys time.Duration
	// Waits are voluntary context switches: a thread of the process
	// blocked (a futex sleep of an idle Go thread, a blocking syscall).
	// Each one is followed by a wake-up, so they count how often the
	// process went idle and was woken again.
	Waits int64
	// Preempted are involuntary context switches: the kernel took the CPU
	// from a runnable thread (time slice over, another process waiting).
	Preempted int64
}

// ReadUsage returns the process's Usage; zero if getrusage fails.
func ReadUsage() Usage {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return Usage{}
	}
	return Usage{User: time.Duration(ru.Utime.Nano()), Sys: time.Duration(ru.Stime.Nano()),
		Waits: ru.Nvcsw, Preempted: ru.Nivcsw}
}

// gcCPUMetric is the runtime's estimate of the CPU its garbage collector
// has used (mark assists, dedicated and idle mark workers, pauses).
const gcCPUMetric = "/cpu/classes/gc/total:cpu-seconds"

// GCStats returns the runtime's estimate of the CPU time its garbage
// collector has used so far, and the number of completed collections.
func GCStats() (cpu time.Duration, cycles uint64) {
	s := []metrics.Sample{{Name: gcCPUMetric}, {Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(s)
	if s[0].Value.Kind() == metrics.KindFloat64 {
		cpu = time.Duration(s[0].Value.Float64() * float64(time.Second))
	}
	if s[1].Value.Kind() == metrics.KindUint64 {
		cycles = s[1].Value.Uint64()
	}
	return cpu, cycles
}

// Mallocs returns the number of heap allocations the process has made.
func Mallocs() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.Mallocs
}

// RSS is the process's resident set size in bytes (/proc/self/status):
// Total (VmRSS) and its parts Anon (RssAnon: the process's own memory) and
// File (RssFile: pages of mapped files, such as a bbolt file, which the
// kernel can drop and read again).
type RSS struct {
	Total, Anon, File int64
}

// ReadRSS returns the process's RSS.
func ReadRSS() (RSS, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return RSS{}, fmt.Errorf("read rss: %w", err)
	}
	defer f.Close()
	var r RSS
	fields := map[string]*int64{"VmRSS:": &r.Total, "RssAnon:": &r.Anon, "RssFile:": &r.File}
	found := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, rest, _ := strings.Cut(sc.Text(), "\t")
		dst, ok := fields[name]
		if !ok {
			continue
		}
		v := strings.Fields(rest)
		if len(v) == 0 {
			return RSS{}, fmt.Errorf("read rss: empty %s line", name)
		}
		kb, err := strconv.ParseInt(v[0], 10, 64)
		if err != nil {
			return RSS{}, fmt.Errorf("parse %s %q: %w", name, rest, err)
		}
		*dst = kb << 10
		found++
	}
	if err := sc.Err(); err != nil {
		return RSS{}, fmt.Errorf("read rss: %w", err)
	}
	if found != len(fields) {
		return RSS{}, fmt.Errorf("read rss: /proc/self/status lacks VmRSS, RssAnon or RssFile")
	}
	return r, nil
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
