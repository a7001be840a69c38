//go:build !linux

package local

import "syscall"

// runProcAttr puts a run in its own process group. Other systems have no
// parent-death signal: a run outlives a server killed with SIGKILL until
// its own timeout would have ended it (the server kills the group on every
// orderly path).
func runProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// limitData does nothing on this system, which cannot set another
// process's limits (no prlimit): Deno's heap cap (--max-old-space-size)
// is the run's only memory bound here. The Linux build adds RLIMIT_DATA.
func limitData(pid int, limit uint64) error { return nil }
