//go:build unix

package acceptlog

import (
	"errors"
	"os"
	"syscall"
	"time"

	berrors "go.etcd.io/bbolt/errors"
)

// lockFile takes f's exclusive flock, as bbolt does (bbolt's own flock on
// the same open file then succeeds), retrying until timeout; after it,
// berrors.ErrTimeout. Open locks the file before it reads a byte of it,
// so a running relay's file is never verified or replayed under it.
func lockFile(f *os.File, timeout time.Duration) error {
	return flock(f, syscall.LOCK_EX, timeout)
}

// lockShared takes f's shared flock (a reader's, as bbolt's read-only
// open takes), retrying until timeout.
func lockShared(f *os.File, timeout time.Duration) error {
	return flock(f, syscall.LOCK_SH, timeout)
}

func flock(f *os.File, how int, timeout time.Duration) error {
	start := time.Now()
	for {
		err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
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
