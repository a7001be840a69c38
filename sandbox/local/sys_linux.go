package local

import (
	"fmt"
	"syscall"
	"unsafe"
)

// runProcAttr puts a run in its own process group and has the kernel kill
// it when the server's forking thread dies.
func runProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// limitData caps the data size (RLIMIT_DATA: heap, anonymous and other
// private writable mappings) of process pid at limit bytes, or at its
// current hard limit if that is lower.
func limitData(pid int, limit uint64) error {
	var cur syscall.Rlimit
	if err := prlimit(pid, syscall.RLIMIT_DATA, nil, &cur); err != nil {
		return err
	}
	limit = min(limit, cur.Max)
	return prlimit(pid, syscall.RLIMIT_DATA, &syscall.Rlimit{Cur: limit, Max: limit}, nil)
}

func prlimit(pid, resource int, newLimit, old *syscall.Rlimit) error {
	_, _, errno := syscall.RawSyscall6(syscall.SYS_PRLIMIT64, uintptr(pid), uintptr(resource),
		uintptr(unsafe.Pointer(newLimit)), uintptr(unsafe.Pointer(old)), 0, 0)
	if errno != 0 {
		return fmt.Errorf("prlimit: %w", errno)
	}
	return nil
}
