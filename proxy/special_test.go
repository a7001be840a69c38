package proxy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"syscall"
	"testing"

	"github.com/codeforge/codeforge/settings"
)

// rangeCases is written by hand from the IANA IPv4 and IPv6 Special-Purpose
// Address Registries, independently of specialRanges: for every row of that
// table, an address inside it and the nearest address outside it (where
// that neighbour is itself globally reachable; "" where it is not, e.g.
// because the next range starts right there). An allow row (a globally
// reachable sub-block) is checked the other way round.
var rangeCases = map[string]struct{ in, out string }{
	// IPv4
	"0.0.0.0/8":          {"0.1.2.3", "1.0.0.0"},
	"10.0.0.0/8":         {"10.255.255.255", "11.0.0.0"},
	"100.64.0.0/10":      {"100.127.255.254", "100.128.0.0"},
	"127.0.0.0/8":        {"127.1.2.3", "128.0.0.0"},
	"169.254.0.0/16":     {"169.254.169.254", "169.255.0.0"},
	"172.16.0.0/12":      {"172.31.255.255", "172.32.0.0"},
	"192.0.0.0/24":       {"192.0.0.170", "192.0.1.0"},
	"192.0.0.9/32":       {"192.0.0.9", ""},
	"192.0.0.10/32":      {"192.0.0.10", ""},
	"192.0.2.0/24":       {"192.0.2.1", "192.0.3.0"},
	"192.88.99.0/24":     {"192.88.99.1", "192.88.100.0"},
	"192.168.0.0/16":     {"192.168.1.1", "192.169.0.0"},
	"198.18.0.0/15":      {"198.19.255.255", "198.20.0.0"},
	"198.51.100.0/24":    {"198.51.100.7", "198.51.101.0"},
	"203.0.113.0/24":     {"203.0.113.9", "203.0.114.0"},
	"224.0.0.0/4":        {"239.255.255.250", "223.255.255.255"},
	"240.0.0.0/4":        {"250.1.2.3", ""},
	"255.255.255.255/32": {"255.255.255.255", ""},
	// IPv6
	"::/3":              {"1000::1", "2000::1"},
	"::/128":            {"::", ""},
	"::1/128":           {"::1", ""},
	"::/96":             {"::8.8.8.8", ""},
	"::ffff:0.0.0.0/96": {"::ffff:10.0.0.1", "::ffff:8.8.8.8"},
	"64:ff9b::/96":      {"64:ff9b::a9fe:a9fe", "64:ff9b::808:808"},
	"64:ff9b:1::/48":    {"64:ff9b:1::808:808", ""},
	"100::/64":          {"100::1", ""},
	"100:0:0:1::/64":    {"100:0:0:1::1", ""},
	"2001::/23":         {"2001:2::1", "2001:200::1"},
	"2001::/32":         {"2001:0:4136:e378:8000:63bf:3fff:fdd2", ""},
	"2001:1::1/128":     {"2001:1::1", ""},
	"2001:1::2/128":     {"2001:1::2", ""},
	"2001:1::3/128":     {"2001:1::3", ""},
	"2001:3::/32":       {"2001:3::1", ""},
	"2001:4:112::/48":   {"2001:4:112::1", ""},
	"2001:20::/28":      {"2001:20::1", ""},
	"2001:30::/28":      {"2001:30::1", ""},
	"2001:db8::/32":     {"2001:db8::1", "2001:db9::1"},
	"2002::/16":         {"2002:808:808::1", "2003::1"},
	"3fff::/20":         {"3fff::1", "3fff:1000::1"},
	"4000::/2":          {"5f00::1", "3fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"},
	"5f00::/16":         {"5f00::1", ""},
	"8000::/1":          {"a000::1", ""},
	"fc00::/7":          {"fd12:3456::1", ""},
	"fe80::/10":         {"fe80::1", ""},
	"fec0::/10":         {"fec0::1", ""},
	"ff00::/8":          {"ff02::1", ""},
}

// TestSpecialPurposeRanges checks every row of the refusal table: an
// address inside a refused range is refused and the nearest address
// outside it is allowed; inside a globally reachable sub-block it is
// allowed. Every row must have a hand-written case.
func TestSpecialPurposeRanges(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, row := range specialRanges {
		key := row.prefix.String()
		seen[key] = true
		t.Run(key, func(t *testing.T) {
			tc, ok := rangeCases[key]
			if !ok {
				t.Fatalf("row %s (%s) has no test case in rangeCases", key, row.name)
			}
			in := netip.MustParseAddr(tc.in)
			if !row.prefix.Contains(in) {
				t.Fatalf("case address %s is not inside %s", in, key)
			}
			wantIn := row.rule == ruleAllow
			if row.rule == ruleEmbedded {
				wantIn = false // every inside case embeds a non-public IPv4
			}
			if got := publicAddr(in); got != wantIn {
				t.Errorf("publicAddr(%s) = %v, want %v (%s: %s)", in, got, wantIn, row.name, row.why)
			}
			if tc.out != "" {
				out := netip.MustParseAddr(tc.out)
				if row.prefix.Contains(out) && row.rule != ruleEmbedded {
					t.Fatalf("case address %s is inside %s, want the nearest outside", out, key)
				}
				if !publicAddr(out) {
					t.Errorf("publicAddr(%s) = false, want true: the neighbour of %s is globally reachable", out, key)
				}
			}
		})
	}
	for key := range rangeCases {
		if !seen[key] {
			t.Errorf("rangeCases has %s, which is not a row of specialRanges", key)
		}
	}
}

// TestPublicAddrEdgeCases covers what no single row shows: zones, the
// invalid address, and public addresses in both families.
func TestPublicAddrEdgeCases(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		addr netip.Addr
		want bool
	}{
		{netip.Addr{}, false},
		{netip.MustParseAddr("fe80::1%eth0"), false},
		{netip.MustParseAddr("2606:4700::1111%eth0"), false}, // a zone means link scope
		{netip.MustParseAddr("8.8.8.8"), true},
		{netip.MustParseAddr("2606:4700::1111"), true},
		{netip.MustParseAddr("::ffff:169.254.169.254"), false},
		{netip.MustParseAddr("64:ff9b::7f00:1"), false},
		{netip.MustParseAddr("64:ff9b::c000:209"), false}, // 192.0.2.9, TEST-NET-1
		{netip.MustParseAddr("64:ff9b::808:808"), true},   // 8.8.8.8
	} {
		if got := publicAddr(tc.addr); got != tc.want {
			t.Errorf("publicAddr(%v) = %v, want %v", tc.addr, got, tc.want)
		}
	}
}

// TestPrivateDestinationThroughProxy: a host name that resolves to an
// address of a special-purpose range gets the private_destination refusal
// from the real proxy, and nothing is dialled.
func TestPrivateDestinationThroughProxy(t *testing.T) {
	t.Parallel()
	names := map[string]string{
		"nat64.test":     "64:ff9b::7f00:1",
		"compat.test":    "::7f00:1",
		"sixtofour.test": "2002:7f00:1::1",
		"sitelocal.test": "fec0::1",
		"ietf.test":      "192.0.0.1",
		"bench.test":     "198.18.0.1",
		"reserved.test":  "240.0.0.1",
		"metadata.test":  "169.254.169.254",
	}
	resolver := func(_ context.Context, host string) ([]netip.Addr, error) {
		if a, ok := names[host]; ok {
			return []netip.Addr{netip.MustParseAddr(a)}, nil
		}
		return nil, errors.New("no such host (test resolver)")
	}
	tp := startProxy(t, noPrivate(), withSettings(settings.Common{YOLO: true}), loopbackOnly(t),
		func(o *Options) { o.Resolver = resolver })
	_, c := tp.open(t)
	for host, addr := range names {
		for _, scheme := range []string{"https", "http"} {
			resp, body := do(t, c, http.MethodGet, scheme+"://"+host+"/", nil, nil)
			if resp.StatusCode != http.StatusForbidden || resp.Header.Get(errorHeader) != "private_destination" {
				t.Errorf("%s://%s (%s): status %d %q, want 403 private_destination: %s", scheme, host, addr, resp.StatusCode, resp.Header.Get(errorHeader), body)
			}
		}
	}
}

// loopbackOnly makes the proxy refuse, at the socket, any upstream
// connection that is not to loopback, and fails the test if one is tried:
// a broken defence must not send test traffic off this machine.
func loopbackOnly(t testing.TB) proxyOpt {
	return func(o *Options) {
		o.dialControl = func(network, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil || !ap.Addr().Unmap().IsLoopback() {
				t.Errorf("the proxy tried to dial %s %s, which is not loopback", network, address)
				return fmt.Errorf("test guard: %s is not loopback", address)
			}
			return nil
		}
	}
}
