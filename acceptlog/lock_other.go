//go:build !unix

package acceptlog

import (
	"os"
	"time"
)

// lockFile does nothing where flock is missing: bbolt alone locks the file
// when it opens it.
func lockFile(*os.File, time.Duration) error { return nil }

// lockShared does nothing where flock is missing (see lockFile).
func lockShared(*os.File, time.Duration) error { return nil }
