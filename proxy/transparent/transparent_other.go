//go:build !linux

package transparent

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
)

// ErrLinuxOnly is what every entry point returns on other systems:
// transparent mode needs iptables, SO_ORIGINAL_DST and Linux credentials.
var ErrLinuxOnly = errors.New("transparent mode needs Linux (iptables and SO_ORIGINAL_DST); use the explicit mode (--mode explicit) on this system")

// DefaultChain is the chain Rules use when Chain is empty.
const DefaultChain = "CODEFORGE-PROXY"

// Rules describe which TCP connections are redirected to the proxy (see
// the Linux build for their meaning). On other systems they can be built
// but not applied.
type Rules struct {
	Chain       string
	ProxyPort   int
	InInterface string
	SourceCIDR  string
	Ports       []int
	UIDOwner    int
	GIDOwner    int
	AllowDNS    []string
}

// Apply fails: transparent mode is Linux-only.
func (r Rules) Apply() error { return ErrLinuxOnly }

// Clear fails: transparent mode is Linux-only.
func (r Rules) Clear() error { return ErrLinuxOnly }

// OriginalDst fails: transparent mode is Linux-only.
func OriginalDst(*net.TCPConn) (netip.AddrPort, error) { return netip.AddrPort{}, ErrLinuxOnly }

// Serve fails: transparent mode is Linux-only.
func Serve(context.Context, net.Listener, func(net.Conn, netip.AddrPort), *slog.Logger) error {
	return ErrLinuxOnly
}

// DropPrivileges fails: transparent mode is Linux-only.
func DropPrivileges(uid, gid int) error { return ErrLinuxOnly }
