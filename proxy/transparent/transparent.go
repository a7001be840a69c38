//go:build linux

// Package transparent runs the proxy in transparent mode: iptables NAT rules
// redirect a sandbox's outgoing HTTP(S) connections to the proxy's port, and
// the proxy recovers where each connection was headed from the kernel's
// connection tracking (SO_ORIGINAL_DST). The rules live in a chain of their
// own, so applying and clearing them never touches anyone else's rules.
package transparent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/coreos/go-iptables/iptables"
	"golang.org/x/sys/unix"
)

const (
	table    = "nat"
	hookName = "PREROUTING"
	// DefaultChain is the chain Rules use when Chain is empty.
	DefaultChain = "CODEFORGE-PROXY"
)

// Rules describe which incoming TCP connections are redirected to the
// proxy. Only IPv4 (iptables) is managed.
type Rules struct {
	// Chain is the nat-table chain that holds the rules; empty means
	// DefaultChain. It must be the proxy's own: Apply flushes it.
	Chain string
	// ProxyPort is the local port the proxy's transparent listener is on.
	ProxyPort int
	// InInterface limits redirection to packets arriving on this interface
	// (iptables -i, "+" suffix as wildcard); empty means any.
	InInterface string
	// SourceCIDR limits redirection to these source addresses (iptables
	// -s), IPv4; empty means any.
	SourceCIDR string
	// Ports are the destination TCP ports to redirect; nil means 80 and 443.
	Ports []int
}

var (
	chainRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,27}$`)
	ifaceRE = regexp.MustCompile(`^[A-Za-z0-9_.:@-]{1,15}\+?$`)
)

// builtin chains and targets a user chain must not be named after.
var reserved = []string{"PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING",
	"ACCEPT", "DROP", "RETURN", "QUEUE", "REJECT", "REDIRECT", "DNAT", "SNAT", "MASQUERADE"}

// normalized checks the Rules and fills defaults.
func (r Rules) normalized() (Rules, error) {
	if r.Chain == "" {
		r.Chain = DefaultChain
	}
	if !chainRE.MatchString(r.Chain) || slices.Contains(reserved, strings.ToUpper(r.Chain)) {
		return r, fmt.Errorf("transparent: chain %q: use up to 28 letters, digits, '_', '-', '.', not a built-in chain or target name (e.g. %q)", r.Chain, DefaultChain)
	}
	if r.ProxyPort < 1 || r.ProxyPort > 65535 {
		return r, fmt.Errorf("transparent: proxy port %d: give the port of the transparent listener (1-65535)", r.ProxyPort)
	}
	if r.InInterface != "" && !ifaceRE.MatchString(r.InInterface) {
		return r, fmt.Errorf("transparent: interface %q: want a network interface name of at most 15 characters, e.g. \"eth0\" or \"veth+\"", r.InInterface)
	}
	if r.SourceCIDR != "" {
		p, err := netip.ParsePrefix(r.SourceCIDR)
		if err != nil || !p.Addr().Is4() {
			return r, fmt.Errorf("transparent: source %q: want an IPv4 CIDR such as 172.18.0.0/16", r.SourceCIDR)
		}
		r.SourceCIDR = p.Masked().String()
	}
	if r.Ports == nil {
		r.Ports = []int{80, 443}
	}
	if len(r.Ports) == 0 {
		return r, errors.New("transparent: no ports to redirect: leave Ports nil for 80 and 443, or list some")
	}
	seen := map[int]bool{}
	for _, p := range r.Ports {
		if p < 1 || p > 65535 {
			return r, fmt.Errorf("transparent: port %d: want 1-65535", p)
		}
		if seen[p] {
			return r, fmt.Errorf("transparent: port %d listed twice", p)
		}
		seen[p] = true
	}
	return r, nil
}

// jumpSpec is the PREROUTING rule that sends candidate packets to Chain.
func (r Rules) jumpSpec() []string {
	var spec []string
	if r.InInterface != "" {
		spec = append(spec, "-i", r.InInterface)
	}
	if r.SourceCIDR != "" {
		spec = append(spec, "-s", r.SourceCIDR)
	}
	return append(spec, "-p", "tcp", "-j", r.Chain)
}

// Apply installs the rules in the nat table: it creates (or flushes) Chain,
// fills it with one REDIRECT rule per port, and adds a jump from PREROUTING
// unless an identical one is there. Applying twice is harmless. A previous
// jump to Chain with other matches (say, another interface) is replaced.
// Invalid Rules change nothing.
func (r Rules) Apply() error {
	r, err := r.normalized()
	if err != nil {
		return err
	}
	ipt, err := iptables.New(iptables.IPFamily(iptables.ProtocolIPv4), iptables.Timeout(10))
	if err != nil {
		return fmt.Errorf("transparent: find iptables: %w", err)
	}
	if err := ipt.ClearChain(table, r.Chain); err != nil { // creates it when missing
		return fmt.Errorf("transparent: create chain %s: %w", r.Chain, err)
	}
	for _, port := range r.Ports {
		spec := []string{"-p", "tcp", "--dport", strconv.Itoa(port), "-j", "REDIRECT", "--to-ports", strconv.Itoa(r.ProxyPort)}
		if err := ipt.Append(table, r.Chain, spec...); err != nil {
			return fmt.Errorf("transparent: add redirect for port %d: %w", port, err)
		}
	}
	jumps, err := jumpsTo(ipt, r.Chain)
	if err != nil {
		return err
	}
	want := r.jumpSpec()
	have := false
	for _, j := range jumps {
		if slices.Equal(j, want) && !have {
			have = true
			continue
		}
		if err := ipt.Delete(table, hookName, j...); err != nil {
			return fmt.Errorf("transparent: remove stale jump to %s: %w", r.Chain, err)
		}
	}
	if !have {
		if err := ipt.Insert(table, hookName, 1, want...); err != nil {
			return fmt.Errorf("transparent: add jump to %s: %w", r.Chain, err)
		}
	}
	return nil
}

// Clear removes every PREROUTING jump to Chain and the chain itself.
// Clearing rules that are not there is not an error. Only Chain matters;
// the other fields are ignored.
func (r Rules) Clear() error {
	if r.Chain == "" {
		r.Chain = DefaultChain
	}
	if !chainRE.MatchString(r.Chain) || slices.Contains(reserved, strings.ToUpper(r.Chain)) {
		return fmt.Errorf("transparent: chain %q is not a chain Apply could have made", r.Chain)
	}
	ipt, err := iptables.New(iptables.IPFamily(iptables.ProtocolIPv4), iptables.Timeout(10))
	if err != nil {
		return fmt.Errorf("transparent: find iptables: %w", err)
	}
	jumps, err := jumpsTo(ipt, r.Chain)
	if err != nil {
		return err
	}
	for _, j := range jumps {
		if err := ipt.Delete(table, hookName, j...); err != nil {
			return fmt.Errorf("transparent: remove jump to %s: %w", r.Chain, err)
		}
	}
	exists, err := ipt.ChainExists(table, r.Chain)
	if err != nil {
		return fmt.Errorf("transparent: look for chain %s: %w", r.Chain, err)
	}
	if exists {
		if err := ipt.ClearAndDeleteChain(table, r.Chain); err != nil {
			return fmt.Errorf("transparent: delete chain %s: %w", r.Chain, err)
		}
	}
	return nil
}

// jumpsTo lists the PREROUTING rules (as rule specs) whose target is chain.
func jumpsTo(ipt *iptables.IPTables, chain string) ([][]string, error) {
	rules, err := ipt.List(table, hookName)
	if err != nil {
		return nil, fmt.Errorf("transparent: list %s: %w", hookName, err)
	}
	var out [][]string
	for _, rule := range rules {
		f := strings.Fields(rule)
		// "-A PREROUTING <matches> -j CHAIN"; our rules carry no quoted
		// comments, so splitting on spaces gives back the spec.
		if len(f) < 4 || f[0] != "-A" || f[1] != hookName {
			continue
		}
		spec := f[2:]
		if n := len(spec); n >= 2 && spec[n-2] == "-j" && spec[n-1] == chain {
			out = append(out, spec)
		}
	}
	return out, nil
}

// OriginalDst returns the address a redirected connection was sent to
// before NAT changed it, from the kernel's connection tracking. It fails
// for a connection that was not redirected and has no conntrack entry.
func OriginalDst(c *net.TCPConn) (netip.AddrPort, error) {
	local, ok := c.LocalAddr().(*net.TCPAddr)
	if !ok || local == nil {
		return netip.AddrPort{}, errors.New("transparent: connection has no local TCP address")
	}
	rc, err := c.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("transparent: original destination: %w", err)
	}
	var dst netip.AddrPort
	var serr error
	is4 := local.IP.To4() != nil
	err = rc.Control(func(fd uintptr) {
		if is4 {
			var sa unix.RawSockaddrInet4
			serr = getsockopt(int(fd), unix.SOL_IP, unix.SO_ORIGINAL_DST, unsafe.Pointer(&sa), unsafe.Sizeof(sa))
			if serr == nil {
				dst = netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), ntohs(sa.Port))
			}
			return
		}
		var sa unix.RawSockaddrInet6
		serr = getsockopt(int(fd), unix.SOL_IPV6, ip6tSoOriginalDst, unsafe.Pointer(&sa), unsafe.Sizeof(sa))
		if serr == nil {
			dst = netip.AddrPortFrom(netip.AddrFrom16(sa.Addr).Unmap(), ntohs(sa.Port))
		}
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return netip.AddrPort{}, fmt.Errorf("transparent: original destination: connection was not redirected (no conntrack entry): %w", err)
		}
		return netip.AddrPort{}, fmt.Errorf("transparent: original destination: %w", err)
	}
	return dst, nil
}

// ip6tSoOriginalDst is IP6T_SO_ORIGINAL_DST from linux/netfilter_ipv6/ip6_tables.h
// (x/sys/unix does not define it).
const ip6tSoOriginalDst = 80

func getsockopt(fd, level, opt int, val unsafe.Pointer, size uintptr) error {
	l := uint32(size)
	_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), uintptr(level), uintptr(opt), uintptr(val), uintptr(unsafe.Pointer(&l)), 0)
	if e != 0 {
		return e
	}
	return nil
}

// ntohs converts a port as the kernel stores it (network byte order) read
// as a host uint16.
func ntohs(p uint16) uint16 {
	b := (*[2]byte)(unsafe.Pointer(&p))
	return uint16(b[0])<<8 | uint16(b[1])
}

// Serve accepts connections from l until ctx ends or l fails, finds each
// one's original destination, and calls handle for it in its own
// goroutine; handle owns the connection and must close it. Connections
// without an original destination, or whose original destination is the
// listener itself (a client talking to the proxy port directly, which
// would loop), are closed. Serve closes l when ctx ends and then returns
// nil; it does not wait for handlers. A nil logger is silent.
func Serve(ctx context.Context, l net.Listener, handle func(conn net.Conn, origDst netip.AddrPort), logger *slog.Logger) error {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	log := logger.With("component", "transparent")
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	var backoff time.Duration
	for {
		conn, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, unix.EMFILE) || errors.Is(err, unix.ENFILE) || errors.Is(err, unix.ECONNABORTED) {
				// Out of descriptors or a transient failure: wait, retry.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				log.Warn("accept failed; retrying", "err", err, "in", backoff)
				select {
				case <-time.After(backoff):
					continue
				case <-ctx.Done():
					return nil
				}
			}
			return fmt.Errorf("transparent: accept: %w", err)
		}
		backoff = 0
		go serveConn(conn, handle, log)
	}
}

func serveConn(conn net.Conn, handle func(net.Conn, netip.AddrPort), log *slog.Logger) {
	tc, ok := conn.(*net.TCPConn)
	if !ok {
		log.Warn("refused: not a TCP connection", "remote", conn.RemoteAddr().String())
		conn.Close()
		return
	}
	dst, err := OriginalDst(tc)
	if err != nil {
		log.Warn("refused connection", "remote", conn.RemoteAddr().String(), "err", err)
		conn.Close()
		return
	}
	// Without NAT, conntrack reports the address the client dialled: the
	// proxy port itself. Handling that would make the proxy dial itself.
	if local := tc.LocalAddr().(*net.TCPAddr).AddrPort(); dst == netip.AddrPortFrom(local.Addr().Unmap(), local.Port()) {
		log.Warn("refused: connection was made to the proxy port itself, not redirected", "remote", conn.RemoteAddr().String())
		conn.Close()
		return
	}
	handle(conn, dst)
}
