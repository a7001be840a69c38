//go:build unix

package runs

import "syscall"

const (
	nofollow = syscall.O_NOFOLLOW
	nonblock = syscall.O_NONBLOCK
)
