//go:build linux

package transparent_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/codeforge/codeforge/proxy/transparent"
)

func TestApplyRefusesBadRulesAndChangesNothing(t *testing.T) {
	t.Parallel()
	ns := newNetns(t)
	before := natRules(t, ns)
	tests := []struct {
		name  string
		rules transparent.Rules
		want  string
	}{
		{"no port", transparent.Rules{}, "proxy port 0"},
		{"port too big", transparent.Rules{ProxyPort: 70000}, "proxy port 70000"},
		{"builtin chain", transparent.Rules{Chain: "PREROUTING", ProxyPort: 3129}, "built-in"},
		{"target as chain", transparent.Rules{Chain: "redirect", ProxyPort: 3129}, "built-in"},
		{"chain with space", transparent.Rules{Chain: "MY CHAIN", ProxyPort: 3129}, "chain \"MY CHAIN\""},
		{"chain too long", transparent.Rules{Chain: strings.Repeat("C", 29), ProxyPort: 3129}, "up to 28"},
		{"bad interface", transparent.Rules{ProxyPort: 3129, InInterface: "eth0; rm -rf /"}, "interface"},
		{"long interface", transparent.Rules{ProxyPort: 3129, InInterface: "a-very-long-interface"}, "interface"},
		{"bad cidr", transparent.Rules{ProxyPort: 3129, SourceCIDR: "10.0.0.0/33"}, "IPv4 CIDR"},
		{"ipv6 cidr", transparent.Rules{ProxyPort: 3129, SourceCIDR: "fd00::/8"}, "IPv4 CIDR"},
		{"empty ports", transparent.Rules{ProxyPort: 3129, Ports: []int{}}, "no ports"},
		{"bad port", transparent.Rules{ProxyPort: 3129, Ports: []int{443, 0}}, "port 0"},
		{"duplicate port", transparent.Rules{ProxyPort: 3129, Ports: []int{443, 443}}, "twice"},
	}
	for _, tt := range tests {
		err := inNetns(ns, tt.rules.Apply)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: Apply = %v; want an error containing %q", tt.name, err, tt.want)
		}
	}
	if err := inNetns(ns, transparent.Rules{Chain: "OUTPUT"}.Clear); err == nil {
		t.Error("Clear of a built-in chain succeeded; want a refusal")
	}
	if after := natRules(t, ns); after != before {
		t.Errorf("refused Rules changed the nat table:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

func TestApplyAndClear(t *testing.T) {
	t.Parallel()
	ns := newNetns(t)
	// Someone else's rules must survive everything we do.
	run(t, "ip", "netns", "exec", ns, "iptables", "-t", "nat", "-A", "PREROUTING", "-p", "udp", "--dport", "53", "-j", "ACCEPT")
	run(t, "ip", "netns", "exec", ns, "iptables", "-t", "nat", "-N", "OTHER")
	foreign := natRules(t, ns)

	r := transparent.Rules{Chain: "CF-TEST", ProxyPort: 3129, InInterface: "veth+", SourceCIDR: "172.18.0.7/16", Ports: []int{443, 80, 8443}}
	if err := inNetns(ns, r.Apply); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"-N CF-TEST",
		"-A PREROUTING -s 172.18.0.0/16 -i veth+ -p tcp -j CF-TEST",
		"-A CF-TEST -p tcp -m tcp --dport 443 -j REDIRECT --to-ports 3129",
		"-A CF-TEST -p tcp -m tcp --dport 80 -j REDIRECT --to-ports 3129",
		"-A CF-TEST -p tcp -m tcp --dport 8443 -j REDIRECT --to-ports 3129",
		"-A PREROUTING -p udp -m udp --dport 53 -j ACCEPT",
		"-N OTHER",
	}
	got := natRules(t, ns)
	for _, line := range want {
		if !strings.Contains(got, line+"\n") {
			t.Errorf("nat table lacks %q:\n%s", line, got)
		}
	}
	// Our jump goes first, before other PREROUTING rules.
	if i, j := strings.Index(got, "-j CF-TEST"), strings.Index(got, "--dport 53"); i > j {
		t.Errorf("jump to CF-TEST is not the first PREROUTING rule:\n%s", got)
	}

	// Applying again changes nothing (no duplicate jump, chain refilled).
	if err := inNetns(ns, r.Apply); err != nil {
		t.Fatal(err)
	}
	if again := natRules(t, ns); again != got {
		t.Errorf("second Apply changed the table:\nfirst:\n%s\nsecond:\n%s", got, again)
	}

	// New matches replace the old jump rather than adding a second one.
	r2 := transparent.Rules{Chain: "CF-TEST", ProxyPort: 3130, InInterface: "eth1"}
	if err := inNetns(ns, r2.Apply); err != nil {
		t.Fatal(err)
	}
	got = natRules(t, ns)
	if n := strings.Count(got, "-j CF-TEST"); n != 1 || !strings.Contains(got, "-A PREROUTING -i eth1 -p tcp -j CF-TEST\n") {
		t.Errorf("after re-Apply with new matches want exactly the new jump, got %d jumps:\n%s", n, got)
	}
	if strings.Contains(got, "8443") || !strings.Contains(got, "--dport 443 -j REDIRECT --to-ports 3130") {
		t.Errorf("chain was not refilled with the new ports:\n%s", got)
	}

	// Clear takes away only what Apply made, from any matches, and is
	// idempotent.
	for range 2 {
		if err := inNetns(ns, transparent.Rules{Chain: "CF-TEST"}.Clear); err != nil {
			t.Fatal(err)
		}
		if after := natRules(t, ns); after != foreign {
			t.Errorf("after Clear the table differs from before Apply:\nbefore:\n%s\nafter:\n%s", foreign, after)
		}
	}
}

func TestDefaultChainAndPorts(t *testing.T) {
	t.Parallel()
	ns := newNetns(t)
	if err := inNetns(ns, transparent.Rules{ProxyPort: 3129}.Apply); err != nil {
		t.Fatal(err)
	}
	got := natRules(t, ns)
	for _, line := range []string{
		"-A PREROUTING -p tcp -j " + transparent.DefaultChain,
		"--dport 80 -j REDIRECT --to-ports 3129",
		"--dport 443 -j REDIRECT --to-ports 3129",
	} {
		if !strings.Contains(got, line) {
			t.Errorf("nat table lacks %q:\n%s", line, got)
		}
	}
	if err := inNetns(ns, transparent.Rules{}.Clear); err != nil {
		t.Fatal(err)
	}
	if got := natRules(t, ns); strings.Contains(got, transparent.DefaultChain) {
		t.Errorf("Clear left the default chain:\n%s", got)
	}
}

// echoDst is a handler that writes the original destination back.
func echoDst(calls *atomic.Int32) func(net.Conn, netip.AddrPort) {
	return func(c net.Conn, dst netip.AddrPort) {
		calls.Add(1)
		fmt.Fprintf(c, "%s\n", dst)
		c.Close()
	}
}

func readAllFrom(t *testing.T, ctx context.Context, ns, addr string) (string, error) {
	t.Helper()
	c, err := dialIn(ctx, ns, addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	b, err := io.ReadAll(c)
	return string(b), err
}

func TestServeReportsOriginalDestination(t *testing.T) {
	t.Parallel()
	tp := newTopology(t)
	ln := listenIn(t, tp.Proxy, "0.0.0.0:0")
	port := ln.Addr().(*net.TCPAddr).Port
	rules := transparent.Rules{Chain: "CF-TEST", ProxyPort: port, InInterface: tp.ProxyIf}
	if err := inNetns(tp.Proxy, rules.Apply); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	var calls atomic.Int32
	served := make(chan error, 1)
	go func() { served <- transparent.Serve(ctx, ln, echoDst(&calls), nil) }()

	for _, dst := range []string{tp.APIAddr + ":443", tp.APIAddr + ":80", tp.ProxyIP + ":443", "10.99.1.2:443"} {
		got, err := readAllFrom(t, ctx, tp.Client, dst)
		if err != nil {
			t.Fatalf("connect to %s through the redirect: %v", dst, err)
		}
		if got != dst+"\n" {
			t.Errorf("handler saw original destination %q; want %q", strings.TrimSpace(got), dst)
		}
	}
	if calls.Load() != 4 {
		t.Fatalf("handler called %d times; want 4", calls.Load())
	}

	// A port not in Ports is not redirected: nothing listens there.
	if _, err := readAllFrom(t, ctx, tp.Client, tp.APIAddr+":8080"); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("port 8080 (not listed): err = %v; want connection refused", err)
	}
	// A client talking to the proxy port directly is not handled: the
	// proxy would otherwise dial itself.
	got, err := readAllFrom(t, ctx, tp.Client, fmt.Sprintf("%s:%d", tp.ProxyIP, port))
	if err != nil || got != "" || calls.Load() != 4 {
		t.Errorf("direct connection: read %q, %v, handler calls %d; want closed unhandled", got, err, calls.Load())
	}

	// Rules narrowed to another source stop the redirect; the jump is
	// replaced, not duplicated.
	other := rules
	other.SourceCIDR = "10.99.0.0/16"
	if err := inNetns(tp.Proxy, other.Apply); err != nil {
		t.Fatal(err)
	}
	if _, err := readAllFrom(t, ctx, tp.Client, tp.APIAddr+":443"); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("client outside SourceCIDR: err = %v; want connection refused (not redirected)", err)
	}
	mine := rules
	mine.SourceCIDR = tp.ClientIP + "/32"
	if err := inNetns(tp.Proxy, mine.Apply); err != nil {
		t.Fatal(err)
	}
	if got, err := readAllFrom(t, ctx, tp.Client, tp.APIAddr+":443"); err != nil || got != tp.APIAddr+":443\n" {
		t.Errorf("client inside SourceCIDR: %q, %v", got, err)
	}

	cancel()
	if err := <-served; err != nil {
		t.Errorf("Serve after cancel = %v; want nil", err)
	}
	if err := inNetns(tp.Proxy, rules.Clear); err != nil {
		t.Fatal(err)
	}
	if got := natRules(t, tp.Proxy); strings.Contains(got, "CF-TEST") {
		t.Errorf("rules left after Clear:\n%s", got)
	}
}

func TestOriginalDstWithoutRedirect(t *testing.T) {
	t.Parallel()
	ns := newNetns(t)
	ln := listenIn(t, ns, "127.0.0.1:0")
	dialed := make(chan net.Conn, 1)
	go func() {
		c, err := dialIn(t.Context(), ns, ln.Addr().String())
		if err != nil {
			t.Error(err)
		}
		dialed <- c
	}()
	conn, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// No NAT rules in this namespace: conntrack is not even loaded, so
	// either there is no entry or it names the proxy's own address.
	dst, err := transparent.OriginalDst(conn.(*net.TCPConn))
	if err == nil && dst.String() != ln.Addr().String() {
		t.Errorf("OriginalDst of an unredirected connection = %s; want an error or the listener's own address", dst)
	}
	if err != nil && !strings.Contains(err.Error(), "original destination") {
		t.Errorf("error %q does not say what failed", err)
	}
	if c := <-dialed; c != nil {
		c.Close()
	}
}

func TestServeReturnsListenerError(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	err = transparent.Serve(t.Context(), ln, func(c net.Conn, _ netip.AddrPort) { c.Close() }, nil)
	if err == nil || !strings.Contains(err.Error(), "accept") {
		t.Errorf("Serve on a closed listener = %v; want an accept error", err)
	}
}
