package acceptlog

import (
	"errors"
	"os"
	"syscall"
)

// fallocKeepSize is FALLOC_FL_KEEP_SIZE: fallocate allocates the blocks
// without changing the file's size.
const fallocKeepSize = 0x01

// reserve allocates disk for n bytes of f from off on, leaving f's size
// and content as they are: it fails (ENOSPC) when the disk lacks the
// room. A file system without fallocate reserves nothing and says so by
// succeeding: the commit that follows is the test there.
func reserve(f *os.File, off, n int64) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) {
		for {
			ferr = syscall.Fallocate(int(fd), fallocKeepSize, off, n)
			if !errors.Is(ferr, syscall.EINTR) {
				return
			}
		}
	}); err != nil {
		return err
	}
	if errors.Is(ferr, syscall.EOPNOTSUPP) || errors.Is(ferr, syscall.ENOSYS) {
		return nil
	}
	if ferr != nil {
		return &os.PathError{Op: "fallocate", Path: f.Name(), Err: ferr}
	}
	return nil
}
