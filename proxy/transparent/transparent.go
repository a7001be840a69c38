//go:build linux

// Package transparent runs the proxy in transparent mode: iptables NAT rules
// redirect a sandbox's outgoing HTTP(S) connections to the proxy's port, and
// the proxy recovers where each connection was headed from the kernel's
// connection tracking (SO_ORIGINAL_DST). The rules live in chains of their
// own, so applying and clearing them never touches anyone else's rules. In
// local mode (a sandbox user sharing the proxy's network namespace) they
// also lock that user out of everything but the proxy.
package transparent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
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
	natTable    = "nat"
	filterTable = "filter"
	prerouting  = "PREROUTING"
	output      = "OUTPUT"
	// DefaultChain is the chain Rules use when Chain is empty.
	DefaultChain = "CODEFORGE-PROXY"
)

// Rules describe which TCP connections are redirected to the proxy. They
// have two modes:
//
//   - router mode (UIDOwner 0): connections arriving from other hosts or
//     namespaces (nat PREROUTING, narrowed by InInterface and SourceCIDR)
//     are redirected; nothing else is filtered;
//   - local mode (UIDOwner > 0): connections that processes of one user
//     open in this network namespace (nat OUTPUT, -m owner) are redirected,
//     and that user is locked out of everything else (filter OUTPUT): it
//     reaches only the proxy, through the redirect, and the DNS resolvers
//     in AllowDNS. IPv6 is refused to it entirely. This is the mode for a
//     sandbox that shares the proxy's network namespace.
//
// Only IPv4 is redirected.
type Rules struct {
	// Chain is the chain that holds the rules (in the nat table, and in
	// local mode also in the filter tables); empty means DefaultChain. It
	// must be the proxy's own: Apply flushes it.
	Chain string
	// ProxyPort is the local port the proxy's transparent listener is on.
	ProxyPort int
	// InInterface limits redirection to packets arriving on this interface
	// (iptables -i, "+" suffix as wildcard); empty means any. Router mode.
	InInterface string
	// SourceCIDR limits redirection to these source addresses (iptables
	// -s), IPv4; empty means any. Router mode.
	SourceCIDR string
	// Ports are the destination TCP ports to redirect; nil means 80 and 443.
	Ports []int

	// UIDOwner, when above 0, selects local mode for the processes of this
	// user (iptables -m owner --uid-owner). It must not be the proxy's own
	// user, or the proxy's upstream connections would loop back to it.
	UIDOwner int
	// GIDOwner, when above 0, narrows local mode to processes whose group
	// is also this one (--gid-owner), so that a proxy sharing the user but
	// not the group stays free.
	GIDOwner int
	// AllowDNS lists the IPv4 addresses of the DNS resolvers the user may
	// still query on port 53 (UDP and TCP) in local mode, such as Docker's
	// embedded 127.0.0.11. The match is on the address the user sent to,
	// before any NAT. Empty means no DNS at all.
	AllowDNS []string
}

var (
	chainRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,27}$`)
	ifaceRE = regexp.MustCompile(`^[A-Za-z0-9_.:@-]{1,15}\+?$`)
)

// builtin chains and targets a user chain must not be named after.
var reserved = []string{"PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING",
	"ACCEPT", "DROP", "RETURN", "QUEUE", "REJECT", "REDIRECT", "DNAT", "SNAT", "MASQUERADE"}

// local reports whether the Rules are in local (owner) mode.
func (r Rules) local() bool { return r.UIDOwner > 0 }

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
	return r.normalizedOwner()
}

// normalizedOwner checks the local-mode fields.
func (r Rules) normalizedOwner() (Rules, error) {
	switch {
	case r.UIDOwner < 0:
		return r, fmt.Errorf("transparent: owner uid %d: want the sandbox user's uid (above 0), or 0 for router mode", r.UIDOwner)
	case r.GIDOwner < 0:
		return r, fmt.Errorf("transparent: owner gid %d: want the sandbox user's gid (above 0), or 0 for any group", r.GIDOwner)
	case !r.local() && (r.GIDOwner != 0 || len(r.AllowDNS) > 0):
		return r, errors.New("transparent: an owner gid or DNS resolvers need an owner uid (local mode): set UIDOwner to the sandbox user's uid")
	case r.local() && (r.InInterface != "" || r.SourceCIDR != ""):
		return r, errors.New("transparent: an interface or source CIDR selects router mode (PREROUTING), an owner uid local mode (OUTPUT): give one or the other")
	}
	dns := make([]string, 0, len(r.AllowDNS))
	for _, a := range r.AllowDNS {
		ip, err := netip.ParseAddr(a)
		if err != nil || !ip.Is4() {
			return r, fmt.Errorf("transparent: DNS resolver %q: want an IPv4 address such as 127.0.0.11", a)
		}
		if slices.Contains(dns, ip.String()) {
			return r, fmt.Errorf("transparent: DNS resolver %s listed twice", ip)
		}
		dns = append(dns, ip.String())
	}
	if r.AllowDNS != nil {
		r.AllowDNS = dns
	}
	return r, nil
}

// ownerMatch is the -m owner match of local mode.
func (r Rules) ownerMatch() []string {
	m := []string{"-m", "owner", "--uid-owner", strconv.Itoa(r.UIDOwner)}
	if r.GIDOwner > 0 {
		m = append(m, "--gid-owner", strconv.Itoa(r.GIDOwner))
	}
	return m
}

// natHook is the nat chain the jump to Chain hangs off.
func (r Rules) natHook() string {
	if r.local() {
		return output
	}
	return prerouting
}

// natJumpSpec is the rule (in iptables -S form) that sends candidate
// packets to Chain in the nat table.
func (r Rules) natJumpSpec() []string {
	if r.local() {
		return append(append([]string{"-p", "tcp"}, r.ownerMatch()...), "-j", r.Chain)
	}
	var spec []string // iptables -S lists -s before -i
	if r.SourceCIDR != "" {
		spec = append(spec, "-s", r.SourceCIDR)
	}
	if r.InInterface != "" {
		spec = append(spec, "-i", r.InInterface)
	}
	return append(spec, "-p", "tcp", "-j", r.Chain)
}

// lockdown is the filter chain of local mode (iptables -S form, without
// "-A CHAIN"): the redirected connections and DNS pass, the rest is
// refused at once.
func (r Rules) lockdown() [][]string {
	rules := [][]string{
		// Only connections the nat chain redirected: REDIRECT maps a local
		// connection to 127.0.0.1; a direct connection to the proxy port
		// (no DNAT) is refused like any other.
		{"-d", "127.0.0.1/32", "-p", "tcp", "-m", "tcp", "--dport", strconv.Itoa(r.ProxyPort), "-m", "conntrack", "--ctstate", "DNAT", "-j", "ACCEPT"},
	}
	for _, a := range r.AllowDNS {
		for _, proto := range []string{"udp", "tcp"} {
			// Docker's resolver is itself a DNAT to another port: match
			// the address and port the user sent to.
			rules = append(rules, []string{"-p", proto, "-m", "conntrack", "--ctorigdst", a, "--ctorigdstport", "53", "-j", "ACCEPT"})
		}
	}
	return append(rules,
		[]string{"-p", "tcp", "-j", "REJECT", "--reject-with", "tcp-reset"},
		[]string{"-j", "REJECT", "--reject-with", "icmp-admin-prohibited"})
}

// lockdown6 is the IPv6 filter chain of local mode: everything refused.
func lockdown6() [][]string {
	return [][]string{
		{"-p", "tcp", "-j", "REJECT", "--reject-with", "tcp-reset"},
		{"-j", "REJECT", "--reject-with", "icmp6-adm-prohibited"},
	}
}

// Apply installs the rules. It creates (or flushes) Chain in the nat
// table, fills it with one REDIRECT rule per port, and adds a jump from
// PREROUTING (router mode) or OUTPUT (local mode) unless an identical one
// is there; in local mode it also fills Chain in the IPv4 and IPv6 filter
// tables with the lockdown and jumps to it from OUTPUT. Applying twice is
// harmless; a previous jump to Chain with other matches (say, another
// interface or user) is replaced. Re-applying local mode never opens a
// gap: the new lockdown is in place before the old one goes, and while the
// nat chain is refilled the user's connections are refused, not let out.
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
	if r.local() {
		// The lockdown first: until it stands, nothing is redirected.
		if err := installChain(ipt, filterTable, r.Chain, r.lockdown()); err != nil {
			return err
		}
		if err := ensureJump(ipt, filterTable, output, r.Chain, append(r.ownerMatch(), "-j", r.Chain)); err != nil {
			return err
		}
		if err := r.applyIPv6(); err != nil {
			return err
		}
	}
	if err := ipt.ClearChain(natTable, r.Chain); err != nil { // creates it when missing
		return fmt.Errorf("transparent: create chain %s: %w", r.Chain, err)
	}
	for _, port := range r.Ports {
		spec := []string{"-p", "tcp", "--dport", strconv.Itoa(port), "-j", "REDIRECT", "--to-ports", strconv.Itoa(r.ProxyPort)}
		if err := ipt.Append(natTable, r.Chain, spec...); err != nil {
			return fmt.Errorf("transparent: add redirect for port %d: %w", port, err)
		}
	}
	// A jump to Chain from the other hook (the Rules changed mode) goes.
	other := prerouting
	if !r.local() {
		other = output
	}
	if err := deleteJumps(ipt, natTable, other, r.Chain); err != nil {
		return err
	}
	if !r.local() {
		if err := clearLockdown(ipt, r.Chain); err != nil {
			return err
		}
	}
	return ensureJump(ipt, natTable, r.natHook(), r.Chain, r.natJumpSpec())
}

// applyIPv6 installs the IPv6 lockdown of local mode. Without IPv6 in the
// kernel there is nothing to lock; with IPv6 but no working ip6tables,
// Apply fails rather than leave the user an open IPv6 path.
func (r Rules) applyIPv6() error {
	ipt6, err := iptables.New(iptables.IPFamily(iptables.ProtocolIPv6), iptables.Timeout(10))
	if err == nil {
		if err = installChain(ipt6, filterTable, r.Chain, lockdown6()); err == nil {
			err = ensureJump(ipt6, filterTable, output, r.Chain, append(r.ownerMatch(), "-j", r.Chain))
		}
	}
	if err != nil && ipv6Present() {
		return fmt.Errorf("transparent: IPv6 lockdown: %w", err)
	}
	return nil
}

// ipv6Present reports whether this network namespace has IPv6.
func ipv6Present() bool {
	_, err := os.Stat("/proc/net/if_inet6")
	return err == nil
}

// installChain makes chain in table hold exactly rules, without a moment
// in which it holds fewer: the new rules are appended behind the old ones
// (every version ends in a refusal, so the old ones decide until they
// go), then the old ones are deleted from the front.
func installChain(ipt *iptables.IPTables, table, chain string, rules [][]string) error {
	exists, err := ipt.ChainExists(table, chain)
	if err != nil {
		return fmt.Errorf("transparent: look for %s chain %s: %w", table, chain, err)
	}
	var old [][]string
	if exists {
		if old, err = chainRules(ipt, table, chain); err != nil {
			return err
		}
	} else if err := ipt.NewChain(table, chain); err != nil {
		return fmt.Errorf("transparent: create %s chain %s: %w", table, chain, err)
	}
	for _, spec := range rules {
		if err := ipt.Append(table, chain, spec...); err != nil {
			return fmt.Errorf("transparent: add %s rule %q: %w", table, strings.Join(spec, " "), err)
		}
	}
	for _, spec := range old {
		if err := ipt.Delete(table, chain, spec...); err != nil {
			return fmt.Errorf("transparent: remove old %s rule %q: %w", table, strings.Join(spec, " "), err)
		}
	}
	return nil
}

// chainRules lists chain's rules as specs (iptables -S form).
func chainRules(ipt *iptables.IPTables, table, chain string) ([][]string, error) {
	lines, err := ipt.List(table, chain)
	if err != nil {
		return nil, fmt.Errorf("transparent: list %s chain %s: %w", table, chain, err)
	}
	var out [][]string
	for _, line := range lines {
		// "-A CHAIN <spec>"; our rules carry no quoted comments, so
		// splitting on spaces gives back the spec.
		if f := strings.Fields(line); len(f) > 2 && f[0] == "-A" && f[1] == chain {
			out = append(out, f[2:])
		}
	}
	return out, nil
}

// ensureJump makes want the one jump from hook to chain in table: it is
// inserted first unless it is there, and any other jump to chain goes
// (after the new one is in place).
func ensureJump(ipt *iptables.IPTables, table, hook, chain string, want []string) error {
	jumps, err := jumpsTo(ipt, table, hook, chain)
	if err != nil {
		return err
	}
	have := slices.ContainsFunc(jumps, func(j []string) bool { return slices.Equal(j, want) })
	if !have {
		if err := ipt.Insert(table, hook, 1, want...); err != nil {
			return fmt.Errorf("transparent: add jump from %s %s to %s: %w", table, hook, chain, err)
		}
	}
	kept := false
	for _, j := range jumps {
		if slices.Equal(j, want) && !kept && have {
			kept = true
			continue
		}
		if err := ipt.Delete(table, hook, j...); err != nil {
			return fmt.Errorf("transparent: remove stale jump from %s %s to %s: %w", table, hook, chain, err)
		}
	}
	return nil
}

// deleteJumps removes every jump from hook to chain in table.
func deleteJumps(ipt *iptables.IPTables, table, hook, chain string) error {
	jumps, err := jumpsTo(ipt, table, hook, chain)
	if err != nil {
		return err
	}
	for _, j := range jumps {
		if err := ipt.Delete(table, hook, j...); err != nil {
			return fmt.Errorf("transparent: remove jump from %s %s to %s: %w", table, hook, chain, err)
		}
	}
	return nil
}

// clearFilter removes local mode's filter chain and its jumps, if any.
func clearFilter(ipt *iptables.IPTables, table, chain string) error {
	if err := deleteJumps(ipt, table, output, chain); err != nil {
		return err
	}
	return deleteChain(ipt, table, chain)
}

// deleteChain deletes chain from table when it exists.
func deleteChain(ipt *iptables.IPTables, table, chain string) error {
	exists, err := ipt.ChainExists(table, chain)
	if err != nil {
		return fmt.Errorf("transparent: look for %s chain %s: %w", table, chain, err)
	}
	if exists {
		if err := ipt.ClearAndDeleteChain(table, chain); err != nil {
			return fmt.Errorf("transparent: delete %s chain %s: %w", table, chain, err)
		}
	}
	return nil
}

// Clear removes everything Apply made in either mode: the jumps to Chain
// and the chain itself, in the nat table and in the IPv4 and IPv6 filter
// tables. Clearing rules that are not there is not an error. Only Chain
// matters; the other fields are ignored. Clearing local mode's rules
// lifts the lockdown too: a proxy that wants its sandbox locked out while
// it is away leaves them in place.
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
	for _, hook := range []string{prerouting, output} {
		if err := deleteJumps(ipt, natTable, hook, r.Chain); err != nil {
			return err
		}
	}
	if err := deleteChain(ipt, natTable, r.Chain); err != nil {
		return err
	}
	return clearLockdown(ipt, r.Chain)
}

// clearLockdown removes local mode's filter chains and their jumps, IPv4
// and IPv6, if any.
func clearLockdown(ipt *iptables.IPTables, chain string) error {
	if err := clearFilter(ipt, filterTable, chain); err != nil {
		return err
	}
	ipt6, err := iptables.New(iptables.IPFamily(iptables.ProtocolIPv6), iptables.Timeout(10))
	if err != nil {
		if ipv6Present() {
			return fmt.Errorf("transparent: find ip6tables: %w", err)
		}
		return nil
	}
	return clearFilter(ipt6, filterTable, chain)
}

// jumpsTo lists the rules of hook in table (as rule specs) whose target
// is chain.
func jumpsTo(ipt *iptables.IPTables, table, hook, chain string) ([][]string, error) {
	rules, err := ipt.List(table, hook)
	if err != nil {
		return nil, fmt.Errorf("transparent: list %s %s: %w", table, hook, err)
	}
	var out [][]string
	for _, rule := range rules {
		f := strings.Fields(rule)
		// "-A HOOK <matches> -j CHAIN"; our rules carry no quoted
		// comments, so splitting on spaces gives back the spec.
		if len(f) < 4 || f[0] != "-A" || f[1] != hook {
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
	closed := make(chan struct{})
	stop := context.AfterFunc(ctx, func() { l.Close(); close(closed) })
	defer func() {
		// When ctx ended, return only once l is really closed: until then
		// a redirected client would still be accepted, then reset.
		if !stop() {
			<-closed
		}
	}()
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
