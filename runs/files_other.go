//go:build !unix

package runs

const (
	nofollow = 0
	nonblock = 0
)
