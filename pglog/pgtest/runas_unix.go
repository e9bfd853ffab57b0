//go:build unix

package pgtest

import (
	"os/exec"
	"os/user"
	"strconv"
	"syscall"
)

// runAs makes cmd run as u.
func runAs(cmd *exec.Cmd, u *user.User) error {
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return err
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return err
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	return nil
}
