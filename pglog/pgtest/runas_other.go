//go:build !unix

package pgtest

import (
	"errors"
	"os/exec"
	"os/user"
)

// runAs is not needed where there is no root (Geteuid is -1).
func runAs(*exec.Cmd, *user.User) error {
	return errors.New("running as another user is not supported on this system")
}
