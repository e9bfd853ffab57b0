package acceptlog

import (
	"errors"
	"os"
	"strconv"
	"syscall"
	"time"

	berrors "go.etcd.io/bbolt/errors"
)

// journalSupported: the journal needs fdatasync and flock, and a 64-bit
// address space: the file is mapped far larger than it is (minMapping),
// which neither fits bbolt's mapping limit nor an int on a 32-bit
// platform, where the log keeps bbolt's own synced commits.
const journalSupported = strconv.IntSize == 64

// fdatasync flushes f's data (and the size it needs to be read back).
func fdatasync(f *os.File) error {
	for {
		err := syscall.Fdatasync(int(f.Fd()))
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}

// lockFile takes f's exclusive flock, as bbolt does (bbolt's own flock on
// the same open file then succeeds), retrying until timeout; after it,
// berrors.ErrTimeout.
func lockFile(f *os.File, timeout time.Duration) error {
	start := time.Now()
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		switch {
		case err == nil:
			return nil
		case !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR):
			return err
		case time.Since(start) > timeout:
			return berrors.ErrTimeout
		}
		time.Sleep(50 * time.Millisecond) // as bbolt's flock polls
	}
}
