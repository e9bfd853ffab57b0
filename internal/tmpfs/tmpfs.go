// Package tmpfs mounts a small tmpfs for tests that need a disk that
// fills up: a real file system refusing writes with ENOSPC, not a fake.
// Mounting needs root on Linux; elsewhere the tests skip, except with
// CI=true, where they fail (CI runs as root and never skips them).
package tmpfs

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
)

// Mount mounts a tmpfs of size bytes on a new directory and unmounts it
// when the test ends; it returns the directory.
func Mount(t testing.TB, size int64) string {
	t.Helper()
	if runtime.GOOS != "linux" || os.Geteuid() != 0 {
		why := "mounting a tmpfs needs root on Linux"
		if os.Getenv("CI") == "true" {
			t.Fatal(why + ": with CI=true the disk-full tests must run")
		}
		t.Skip(why + "; skipping the disk-full test")
	}
	dir := filepath.Join(t.TempDir(), "tmpfs")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d,mode=0700", size), "tmpfs", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("mount a tmpfs of %d bytes on %s: %v\n%s", size, dir, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v\n%s", dir, err, out)
		}
	})
	return dir
}

// Fill writes a file at path until the file system has no room left and
// returns how many bytes it holds. Removing it gives the room back.
func Fill(t testing.TB, path string) int64 {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	var n int64
	for {
		w, err := f.Write(buf)
		n += int64(w)
		if err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("fill %s: %v", path, err)
			}
			return n
		}
	}
}
