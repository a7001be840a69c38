//go:build linux

package transparent

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// DropPrivileges switches the whole process, every thread of it, to uid
// and gid with no supplementary groups. Leaving uid 0 takes every
// capability away (permitted, effective and ambient; the container's
// no-new-privileges keeps an exec from bringing any back). A proxy that starts as
// root only to install its Rules calls it right after Apply, so it serves
// untrusted traffic as an ordinary user. It checks the outcome and fails
// rather than carry on half-privileged; the caller must then exit.
func DropPrivileges(uid, gid int) error {
	if uid <= 0 || gid <= 0 {
		return fmt.Errorf("transparent: drop privileges to %d:%d: want a uid and gid above 0", uid, gid)
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("transparent: drop privileges to %d:%d: the process runs as uid %d, not root: start it as root (it drops to %d:%d itself) or leave the user setting out", uid, gid, os.Geteuid(), uid, gid)
	}
	// Groups first: once uid is not 0, changing them is no longer allowed.
	// Go applies each of these to every thread of the process.
	if err := syscall.Setgroups([]int{}); err != nil {
		return fmt.Errorf("transparent: drop supplementary groups: %w", err)
	}
	if err := syscall.Setgid(gid); err != nil {
		return fmt.Errorf("transparent: set gid %d: %w", gid, err)
	}
	if err := syscall.Setuid(uid); err != nil {
		return fmt.Errorf("transparent: set uid %d: %w", uid, err)
	}
	return checkUnprivileged(uid, gid)
}

// checkUnprivileged verifies that the process is uid:gid (real, effective
// and saved), has no supplementary group and no capability left.
func checkUnprivileged(uid, gid int) error {
	ruid, euid, suid := unix.Getresuid()
	rgid, egid, sgid := unix.Getresgid()
	if ruid != uid || euid != uid || suid != uid || rgid != gid || egid != gid || sgid != gid {
		return fmt.Errorf("transparent: after dropping privileges the process is uid %d/%d/%d gid %d/%d/%d, want %d:%d", ruid, euid, suid, rgid, egid, sgid, uid, gid)
	}
	if groups, err := os.Getgroups(); err != nil || len(groups) > 0 {
		return fmt.Errorf("transparent: after dropping privileges the process keeps groups %v (%v)", groups, err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("transparent: read capabilities: %w", err)
	}
	for _, d := range data {
		if d.Effective != 0 || d.Permitted != 0 {
			return errors.New("transparent: after dropping privileges the process still holds capabilities")
		}
	}
	return nil
}
