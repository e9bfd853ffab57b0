package acceptlog

import (
	"errors"
	"os"
	"syscall"
	"time"

	berrors "go.etcd.io/bbolt/errors"
)

// journalSupported: the journal needs fdatasync and flock.
const journalSupported = true

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
