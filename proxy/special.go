package proxy

import "net/netip"

// rangeRule says what the proxy does with an address of a special-purpose
// range.
type rangeRule int

const (
	// ruleRefuse: not globally reachable; never dialled without
	// --allow-private-upstreams.
	ruleRefuse rangeRule = iota
	// ruleAllow: a globally reachable sub-block of a refused range.
	ruleAllow
	// ruleEmbedded: the low 32 bits are an IPv4 address that the packet
	// really goes to; the address is as public as that IPv4 address.
	ruleEmbedded
)

// addrRange is one row of the refusal table.
type addrRange struct {
	prefix netip.Prefix
	rule   rangeRule
	name   string
	why    string
}

func row(prefix string, rule rangeRule, name, why string) addrRange {
	return addrRange{prefix: netip.MustParsePrefix(prefix), rule: rule, name: name, why: why}
}

// specialRanges is the one table of destinations the proxy refuses: every
// entry of the IANA IPv4 and IPv6 Special-Purpose Address Registries whose
// "Globally Reachable" is False or N/A, plus multicast and the IPv6 space
// outside 2000::/3 (the only block allocated for global unicast). The most
// specific row containing an address decides. Anything not in the table is
// public. When the registry gains a row, add it here and a case to
// rangeCases in special_test.go.
var specialRanges = []addrRange{
	// IPv4 (https://www.iana.org/assignments/iana-ipv4-special-registry)
	row("0.0.0.0/8", ruleRefuse, "this network", "RFC 791: 0.0.0.0 and 0/8 reach the local host on common stacks"),
	row("10.0.0.0/8", ruleRefuse, "private-use", "RFC 1918: internal networks"),
	row("100.64.0.0/10", ruleRefuse, "shared address space", "RFC 6598: carrier-grade NAT, inside a provider's network"),
	row("127.0.0.0/8", ruleRefuse, "loopback", "RFC 1122: the proxy's own host"),
	row("169.254.0.0/16", ruleRefuse, "link local", "RFC 3927: the link; 169.254.169.254 is a cloud machine's credential service"),
	row("172.16.0.0/12", ruleRefuse, "private-use", "RFC 1918: internal networks (Docker's default bridges)"),
	row("192.0.0.0/24", ruleRefuse, "IETF protocol assignments", "RFC 6890: not globally reachable (NAT64 discovery, DS-Lite, …)"),
	row("192.0.0.9/32", ruleAllow, "Port Control Protocol anycast", "RFC 7723: globally reachable per the registry"),
	row("192.0.0.10/32", ruleAllow, "TURN relay anycast", "RFC 8155: globally reachable per the registry"),
	row("192.0.2.0/24", ruleRefuse, "documentation (TEST-NET-1)", "RFC 5737: never a real host"),
	row("192.88.99.0/24", ruleRefuse, "deprecated 6to4 relay anycast", "RFC 7526: relays we do not control, which decapsulate to anywhere"),
	row("192.168.0.0/16", ruleRefuse, "private-use", "RFC 1918: home and office networks, routers' admin pages"),
	row("198.18.0.0/15", ruleRefuse, "benchmarking", "RFC 2544: lab networks, not globally reachable"),
	row("198.51.100.0/24", ruleRefuse, "documentation (TEST-NET-2)", "RFC 5737: never a real host"),
	row("203.0.113.0/24", ruleRefuse, "documentation (TEST-NET-3)", "RFC 5737: never a real host"),
	row("224.0.0.0/4", ruleRefuse, "multicast", "RFC 5771: not a unicast destination for TCP"),
	row("240.0.0.0/4", ruleRefuse, "reserved", "RFC 1112: not allocated; some stacks route it locally"),
	row("255.255.255.255/32", ruleRefuse, "limited broadcast", "RFC 919: the local link"),

	// IPv6 (https://www.iana.org/assignments/iana-ipv6-special-registry)
	row("::/3", ruleRefuse, "not global unicast", "RFC 4291: only 2000::/3 is allocated for global unicast; ::/8 and 100::/8 are reserved"),
	row("::/128", ruleRefuse, "unspecified", "RFC 4291: the local host on common stacks"),
	row("::1/128", ruleRefuse, "loopback", "RFC 4291: the proxy's own host"),
	row("::/96", ruleRefuse, "IPv4-compatible (deprecated)", "RFC 4291 2.5.5.1: deprecated; refused whole rather than trusting the embedded IPv4"),
	row("::ffff:0:0/96", ruleEmbedded, "IPv4-mapped", "RFC 4291: the socket dials the embedded IPv4 address"),
	row("64:ff9b::/96", ruleEmbedded, "NAT64 well-known prefix", "RFC 6052: a NAT64 gateway forwards to the embedded IPv4 address"),
	row("64:ff9b:1::/48", ruleRefuse, "local-use NAT64", "RFC 8215: a site's own translator; not globally reachable"),
	row("100::/64", ruleRefuse, "discard-only", "RFC 6666: not globally reachable"),
	row("100:0:0:1::/64", ruleRefuse, "dummy IPv6 prefix", "RFC 9780: not globally reachable"),
	row("2001::/23", ruleRefuse, "IETF protocol assignments", "RFC 2928: not globally reachable apart from the sub-blocks below"),
	row("2001::/32", ruleRefuse, "Teredo", "RFC 4380: tunnels to an embedded, obfuscated IPv4 through relays we do not control"),
	row("2001:1::1/128", ruleAllow, "Port Control Protocol anycast", "RFC 7723: globally reachable per the registry"),
	row("2001:1::2/128", ruleAllow, "TURN relay anycast", "RFC 8155: globally reachable per the registry"),
	row("2001:1::3/128", ruleAllow, "DNS-SD service registration anycast", "RFC 9665: globally reachable per the registry"),
	row("2001:3::/32", ruleAllow, "AMT", "RFC 7450: globally reachable per the registry"),
	row("2001:4:112::/48", ruleAllow, "AS112-v6", "RFC 7535: globally reachable per the registry"),
	row("2001:20::/28", ruleAllow, "ORCHIDv2", "RFC 7343: globally reachable per the registry"),
	row("2001:30::/28", ruleAllow, "drone remote ID (DET)", "RFC 9374: globally reachable per the registry"),
	row("2001:db8::/32", ruleRefuse, "documentation", "RFC 3849: never a real host"),
	// 6to4 is refused whole, not by its embedded IPv4: it is deprecated
	// (RFC 7526), a packet to it is decapsulated by whichever relay the
	// route finds, and no API is reachable only there (a 6to4 host also
	// has the IPv4 address the proxy can dial instead).
	row("2002::/16", ruleRefuse, "6to4", "RFC 3056/7526: deprecated; relays decapsulate to the embedded IPv4"),
	row("3fff::/20", ruleRefuse, "documentation", "RFC 9637: never a real host"),
	row("4000::/2", ruleRefuse, "not global unicast", "RFC 4291: unallocated; only 2000::/3 is global unicast"),
	row("5f00::/16", ruleRefuse, "segment routing (SRv6) SIDs", "RFC 9602: not globally reachable"),
	row("8000::/1", ruleRefuse, "not global unicast", "RFC 4291: unallocated, unique local, link local, site local and multicast"),
	row("fc00::/7", ruleRefuse, "unique local", "RFC 4193: internal networks"),
	row("fe80::/10", ruleRefuse, "link local", "RFC 4291: the link"),
	row("fec0::/10", ruleRefuse, "site local (deprecated)", "RFC 3879: internal networks on old stacks"),
	row("ff00::/8", ruleRefuse, "multicast", "RFC 4291: not a unicast destination for TCP"),
}

// specialRange returns the most specific row containing a, or nil.
func specialRange(a netip.Addr) *addrRange {
	var best *addrRange
	for i := range specialRanges {
		r := &specialRanges[i]
		if r.prefix.Contains(a) && (best == nil || r.prefix.Bits() > best.prefix.Bits()) {
			best = r
		}
	}
	return best
}

// publicAddr reports whether the proxy may dial a without
// --allow-private-upstreams: a is valid, has no zone (a zone means link
// scope), and the table does not refuse it.
func publicAddr(a netip.Addr) bool {
	if !a.IsValid() || a.Zone() != "" {
		return false
	}
	r := specialRange(a)
	switch {
	case r == nil:
		return true
	case r.rule == ruleAllow:
		return true
	case r.rule == ruleEmbedded:
		b := a.As16()
		return publicAddr(netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]}))
	default:
		return false
	}
}
