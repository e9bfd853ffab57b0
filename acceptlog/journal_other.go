//go:build !linux

package acceptlog

import (
	"os"
	"time"
)

// journalSupported: elsewhere the log commits with bbolt's own syncs, and
// bbolt alone locks the file.
const journalSupported = false

func fdatasync(f *os.File) error { return f.Sync() }

func lockFile(*os.File, time.Duration) error { return nil }
