//go:build linux

package transparent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/codeforge/codeforge/internal/testenv"
	"github.com/codeforge/codeforge/proxy/transparent"
)

// The sandbox user of these tests, and the group a proxy sharing its uid
// runs with (docker-compose's transparent override does the same).
const (
	sandboxUID = 10001
	sandboxGID = 10001
	proxyGID   = 10002
)

// filterRules lists a filter table of ns (iptables -S or ip6tables -S).
func filterRules(t testing.TB, ns, bin string) string {
	t.Helper()
	return run(t, "ip", "netns", "exec", ns, bin, "-S")
}

// dialAs dials from inside ns with a socket owned by uid:gid, as far as
// iptables' owner match can tell: it reads the file system uid and gid of
// the thread that creates the socket, set here on a throwaway thread.
func dialAs(ctx context.Context, ns string, uid, gid int, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := inNetns(ns, func() (err error) {
		if err := unix.Setfsgid(gid); err != nil {
			return err
		}
		if err := unix.Setfsuid(uid); err != nil {
			return err
		}
		var d net.Dialer
		c, err = d.DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// readAs connects as uid:gid and reads what the other side sends.
func readAs(t *testing.T, ns string, uid, gid int, addr string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c, err := dialAs(ctx, ns, uid, gid, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	b, err := io.ReadAll(c)
	return string(b), err
}

// askUDP sends one datagram as uid:gid and returns the answer.
func askUDP(t *testing.T, ns string, uid, gid int, addr string) (string, error) {
	t.Helper()
	c, err := dialAs(t.Context(), ns, uid, gid, "udp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("query")); err != nil {
		return "", err
	}
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	return string(buf[:n]), err
}

// serveText answers every connection on l with text.
func serveText(l net.Listener, text string) {
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			io.WriteString(c, text)
			c.Close()
		}
	}()
}

// serveUDPEcho answers every datagram on addr inside ns with "answer from
// addr".
func serveUDPEcho(t *testing.T, ns, addr string) {
	t.Helper()
	var pc net.PacketConn
	if err := inNetns(ns, func() (err error) {
		pc, err = net.ListenPacket("udp", addr)
		return err
	}); err != nil {
		t.Fatalf("listen udp %s in %s: %v", addr, ns, err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 512)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			_ = n
			pc.WriteTo([]byte("answer from "+addr), from)
		}
	}()
}

func TestLocalModeRefusesBadRulesAndChangesNothing(t *testing.T) {
	t.Parallel()
	ns := newNetns(t)
	nat, filter := natRules(t, ns), filterRules(t, ns, "iptables")
	tests := []struct {
		name  string
		rules transparent.Rules
		want  string
	}{
		{"negative uid", transparent.Rules{ProxyPort: 3128, UIDOwner: -1}, "owner uid -1"},
		{"negative gid", transparent.Rules{ProxyPort: 3128, UIDOwner: sandboxUID, GIDOwner: -5}, "owner gid -5"},
		{"gid without uid", transparent.Rules{ProxyPort: 3128, GIDOwner: sandboxGID}, "need an owner uid"},
		{"dns without uid", transparent.Rules{ProxyPort: 3128, AllowDNS: []string{"127.0.0.11"}}, "need an owner uid"},
		{"uid and interface", transparent.Rules{ProxyPort: 3128, UIDOwner: sandboxUID, InInterface: "eth0"}, "one or the other"},
		{"uid and source", transparent.Rules{ProxyPort: 3128, UIDOwner: sandboxUID, SourceCIDR: "10.0.0.0/8"}, "one or the other"},
		{"dns name", transparent.Rules{ProxyPort: 3128, UIDOwner: sandboxUID, AllowDNS: []string{"dns.local"}}, `resolver "dns.local"`},
		{"dns ipv6", transparent.Rules{ProxyPort: 3128, UIDOwner: sandboxUID, AllowDNS: []string{"::1"}}, "IPv4 address"},
		{"dns twice", transparent.Rules{ProxyPort: 3128, UIDOwner: sandboxUID, AllowDNS: []string{"127.0.0.11", "127.0.0.11"}}, "twice"},
		{"no port", transparent.Rules{UIDOwner: sandboxUID}, "proxy port 0"},
	}
	for _, tt := range tests {
		err := inNetns(ns, tt.rules.Apply)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: Apply = %v; want an error containing %q", tt.name, err, tt.want)
		}
	}
	if got := natRules(t, ns); got != nat {
		t.Errorf("refused Rules changed the nat table:\nbefore:\n%s\nafter:\n%s", nat, got)
	}
	if got := filterRules(t, ns, "iptables"); got != filter {
		t.Errorf("refused Rules changed the filter table:\nbefore:\n%s\nafter:\n%s", filter, got)
	}
}

func TestLocalModeApplyAndClear(t *testing.T) {
	t.Parallel()
	ns := newNetns(t)
	// Someone else's rules (Docker's own, say) must survive everything.
	run(t, "ip", "netns", "exec", ns, "iptables", "-t", "nat", "-A", "OUTPUT", "-d", "127.0.0.11", "-j", "ACCEPT")
	run(t, "ip", "netns", "exec", ns, "iptables", "-A", "OUTPUT", "-p", "icmp", "-j", "ACCEPT")
	run(t, "ip", "netns", "exec", ns, "ip6tables", "-A", "OUTPUT", "-p", "tcp", "--dport", "22", "-j", "ACCEPT")
	foreign := [3]string{natRules(t, ns), filterRules(t, ns, "iptables"), filterRules(t, ns, "ip6tables")}

	r := transparent.Rules{Chain: "CF-LOCAL", ProxyPort: 3128, UIDOwner: sandboxUID, GIDOwner: sandboxGID, AllowDNS: []string{"127.0.0.11"}}
	if err := inNetns(ns, r.Apply); err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"nat": {
			"-A OUTPUT -p tcp -m owner --uid-owner 10001 --gid-owner 10001 -j CF-LOCAL",
			"-A CF-LOCAL -p tcp -m tcp --dport 80 -j REDIRECT --to-ports 3128",
			"-A CF-LOCAL -p tcp -m tcp --dport 443 -j REDIRECT --to-ports 3128",
		},
		"iptables": {
			"-A OUTPUT -m owner --uid-owner 10001 --gid-owner 10001 -j CF-LOCAL",
			"-A CF-LOCAL -d 127.0.0.1/32 -p tcp -m tcp --dport 3128 -m conntrack --ctstate DNAT -j ACCEPT",
			"-A CF-LOCAL -p udp -m conntrack --ctorigdst 127.0.0.11 --ctorigdstport 53 -j ACCEPT",
			"-A CF-LOCAL -p tcp -m conntrack --ctorigdst 127.0.0.11 --ctorigdstport 53 -j ACCEPT",
			"-A CF-LOCAL -p tcp -j REJECT --reject-with tcp-reset",
			"-A CF-LOCAL -j REJECT --reject-with icmp-admin-prohibited",
		},
		"ip6tables": {
			"-A OUTPUT -m owner --uid-owner 10001 --gid-owner 10001 -j CF-LOCAL",
			"-A CF-LOCAL -p tcp -j REJECT --reject-with tcp-reset",
			"-A CF-LOCAL -j REJECT --reject-with icmp6-adm-prohibited",
		},
	}
	tables := func() map[string]string {
		return map[string]string{"nat": natRules(t, ns), "iptables": filterRules(t, ns, "iptables"), "ip6tables": filterRules(t, ns, "ip6tables")}
	}
	got := tables()
	for table, lines := range want {
		for _, line := range lines {
			if !strings.Contains(got[table], line+"\n") {
				t.Errorf("%s lacks %q:\n%s", table, line, got[table])
			}
		}
		// Our jump goes first, before the foreign rules.
		if !strings.Contains(got[table], "-P OUTPUT ACCEPT\n"+lines[0]) && !strings.Contains(got[table], "\n"+lines[0]+"\n-A OUTPUT") {
			t.Errorf("%s: the jump to CF-LOCAL is not the first OUTPUT rule:\n%s", table, got[table])
		}
	}

	// Applying again changes nothing.
	if err := inNetns(ns, r.Apply); err != nil {
		t.Fatal(err)
	}
	if again := tables(); fmt.Sprint(again) != fmt.Sprint(got) {
		t.Errorf("second Apply changed the tables:\nfirst:\n%v\nsecond:\n%v", got, again)
	}

	// Another user, port and no DNS: jumps replaced, chains refilled.
	r2 := transparent.Rules{Chain: "CF-LOCAL", ProxyPort: 3130, UIDOwner: 20002}
	if err := inNetns(ns, r2.Apply); err != nil {
		t.Fatal(err)
	}
	got = tables()
	for _, table := range []string{"nat", "iptables", "ip6tables"} {
		if n := strings.Count(got[table], "-j CF-LOCAL"); n != 1 || !strings.Contains(got[table], "--uid-owner 20002 -j CF-LOCAL\n") || strings.Contains(got[table], "10001") {
			t.Errorf("%s after re-Apply for uid 20002: want exactly the new jump, got %d:\n%s", table, n, got[table])
		}
	}
	if strings.Contains(got["iptables"], "--ctorigdstport 53") || !strings.Contains(got["iptables"], "--dport 3130 -m conntrack") {
		t.Errorf("the lockdown chain was not refilled:\n%s", got["iptables"])
	}

	// Back to router mode with the same chain: the lockdown goes.
	r3 := transparent.Rules{Chain: "CF-LOCAL", ProxyPort: 3130, InInterface: "eth0"}
	if err := inNetns(ns, r3.Apply); err != nil {
		t.Fatal(err)
	}
	got = tables()
	if strings.Contains(got["iptables"], "CF-LOCAL") || strings.Contains(got["ip6tables"], "CF-LOCAL") ||
		strings.Contains(got["nat"], "-A OUTPUT -p tcp -m owner") || !strings.Contains(got["nat"], "-A PREROUTING -i eth0 -p tcp -j CF-LOCAL\n") {
		t.Errorf("after switching to router mode:\n%v", got)
	}

	// Clear takes away everything Apply made in either mode, idempotently.
	if err := inNetns(ns, r.Apply); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := inNetns(ns, transparent.Rules{Chain: "CF-LOCAL"}.Clear); err != nil {
			t.Fatal(err)
		}
		after := [3]string{natRules(t, ns), filterRules(t, ns, "iptables"), filterRules(t, ns, "ip6tables")}
		if after != foreign {
			t.Errorf("after Clear the tables differ from before Apply:\nbefore:\n%v\nafter:\n%v", foreign, after)
		}
	}
}

// TestLocalModeRedirectsAndLocksDown checks the rules with real traffic:
// in one namespace, the sandbox user's HTTP(S) connections reach the proxy
// with their original destination, and nothing else of the user gets out
// (other ports, the proxy port dialled directly, other DNS servers, IPv6),
// while root and the proxy (same uid, other group) are untouched. DNS goes
// through a DNAT like Docker's embedded resolver.
func TestLocalModeRedirectsAndLocksDown(t *testing.T) {
	t.Parallel()
	ns := newNetns(t)
	const api = "10.78.0.1"
	run(t, "ip", "-n", ns, "addr", "add", api+"/32", "dev", "lo")
	// A default route into a veth pair that leads nowhere: packets to the
	// rest of the world are routable, and vanish unless the rules act on
	// them first.
	run(t, "ip", "-n", ns, "link", "add", "cfd0", "type", "veth", "peer", "name", "cfd1")
	run(t, "ip", "-n", ns, "addr", "add", "10.79.0.1/24", "dev", "cfd0")
	run(t, "ip", "-n", ns, "link", "set", "cfd0", "up")
	run(t, "ip", "-n", ns, "link", "set", "cfd1", "up")
	run(t, "ip", "-n", ns, "route", "add", "default", "dev", "cfd0")
	// Docker's resolver: 127.0.0.11:53 is a DNAT to another port.
	run(t, "ip", "netns", "exec", ns, "iptables", "-t", "nat", "-A", "OUTPUT", "-d", "127.0.0.11", "-p", "udp", "--dport", "53",
		"-j", "DNAT", "--to-destination", "127.0.0.11:5353")
	serveUDPEcho(t, ns, "127.0.0.11:5353")
	serveUDPEcho(t, ns, "127.0.0.12:53")
	serveText(listenIn(t, ns, api+":443"), "api\n")
	serveText(listenIn(t, ns, api+":3129"), "control\n")
	v6 := listenIn(t, ns, "[::1]:0")
	serveText(v6, "v6\n")

	ln := listenIn(t, ns, "127.0.0.1:0")
	port := ln.Addr().(*net.TCPAddr).Port
	rules := transparent.Rules{Chain: "CF-LOCAL", ProxyPort: port, UIDOwner: sandboxUID, GIDOwner: sandboxGID, AllowDNS: []string{"127.0.0.11"}}
	if err := inNetns(ns, rules.Apply); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var calls atomic.Int32
	served := make(chan error, 1)
	go func() { served <- transparent.Serve(ctx, ln, echoDst(&calls), nil) }()

	// The sandbox user: HTTP(S) ports go to the proxy, which learns where
	// they were headed.
	for _, dst := range []string{api + ":443", api + ":80", "10.99.1.2:443"} {
		if got, err := readAs(t, ns, sandboxUID, sandboxGID, dst); err != nil || got != dst+"\n" {
			t.Errorf("sandbox user to %s: got %q, %v; want the proxy reporting %s", dst, got, err, dst)
		}
	}
	// Everything else is refused at once.
	refused := []struct{ what, addr string }{
		{"another port of a host with a listener", api + ":3129"},
		{"another port of a remote host", "10.99.1.2:22"},
		{"the proxy port dialled directly", fmt.Sprintf("127.0.0.1:%d", port)},
		{"IPv6 loopback", v6.Addr().String()},
	}
	for _, r := range refused {
		if got, err := readAs(t, ns, sandboxUID, sandboxGID, r.addr); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("sandbox user to %s (%s): got %q, %v; want connection refused", r.what, r.addr, got, err)
		}
	}
	if n := calls.Load(); n != 3 {
		t.Errorf("the proxy handled %d connections; want the 3 redirected ones", n)
	}
	// DNS: only to the allowed resolver.
	if got, err := askUDP(t, ns, sandboxUID, sandboxGID, "127.0.0.11:53"); err != nil || got != "answer from 127.0.0.11:5353" {
		t.Errorf("sandbox user's DNS query to 127.0.0.11: %q, %v; want an answer", got, err)
	}
	if got, err := askUDP(t, ns, sandboxUID, sandboxGID, "127.0.0.12:53"); err == nil {
		t.Errorf("sandbox user's DNS query to 127.0.0.12 was answered: %q", got)
	}

	// Root and the proxy's user (same uid, its own group) are not touched.
	for _, who := range []struct {
		name     string
		uid, gid int
	}{{"root", 0, 0}, {"the proxy", sandboxUID, proxyGID}} {
		if got, err := readAs(t, ns, who.uid, who.gid, api+":443"); err != nil || got != "api\n" {
			t.Errorf("%s to %s:443: %q, %v; want the API itself", who.name, api, got, err)
		}
		if got, err := readAs(t, ns, who.uid, who.gid, api+":3129"); err != nil || got != "control\n" {
			t.Errorf("%s to %s:3129: %q, %v; want it reached", who.name, api, got, err)
		}
		if got, err := askUDP(t, ns, who.uid, who.gid, "127.0.0.12:53"); err != nil || got != "answer from 127.0.0.12:53" {
			t.Errorf("%s's DNS query to 127.0.0.12: %q, %v", who.name, got, err)
		}
	}

	// With the proxy gone but the rules kept, the user still gets nowhere.
	cancel()
	if err := <-served; err != nil {
		t.Errorf("Serve after cancel = %v", err)
	}
	// Refused, or (when the closing listener's queue still took the SYN)
	// reset: either way nothing answers.
	if got, err := readAs(t, ns, sandboxUID, sandboxGID, api+":443"); !errors.Is(err, syscall.ECONNREFUSED) && !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("with the proxy stopped, sandbox user to %s:443: %q, %v; want connection refused", api, got, err)
	}
	if _, err := readAs(t, ns, sandboxUID, sandboxGID, api+":3129"); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("with the proxy stopped, sandbox user to %s:3129: %v; want connection refused", api, err)
	}
}

// dropHelperEnv makes the test binary drop privileges and report (see
// TestMain and dropHelper).
const dropHelperEnv = "CODEFORGE_DROP_HELPER"

type dropReport struct {
	Err       string
	UID, GID  int
	Groups    []int
	CapEff    string
	SetuidErr string // trying to get root back
}

// dropHelper runs DropPrivileges(uid, gid) from the environment and
// reports on stdout what the process is afterwards.
func dropHelper(spec string) int {
	var uid, gid int
	if _, err := fmt.Sscanf(spec, "%d:%d", &uid, &gid); err != nil {
		fmt.Fprintln(os.Stderr, "drop helper:", err)
		return 2
	}
	var rep dropReport
	if err := transparent.DropPrivileges(uid, gid); err != nil {
		rep.Err = err.Error()
	}
	rep.UID, rep.GID = os.Getuid(), os.Getgid()
	rep.Groups, _ = os.Getgroups()
	status, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			rep.CapEff = strings.TrimSpace(v)
		}
	}
	if err := syscall.Setuid(0); err != nil {
		rep.SetuidErr = err.Error()
	}
	json.NewEncoder(os.Stdout).Encode(rep)
	return 0
}

func runDropHelper(t *testing.T, spec string) dropReport {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), dropHelperEnv+"="+spec)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("drop helper %s: %v\n%s", spec, err, out)
	}
	var rep dropReport
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("drop helper %s: %v: %s", spec, err, out)
	}
	return rep
}

func TestDropPrivileges(t *testing.T) {
	t.Parallel()
	testenv.Root(t, "it drops privileges from root, as the proxy does")
	rep := runDropHelper(t, fmt.Sprintf("%d:%d", sandboxUID, proxyGID))
	if rep.Err != "" || rep.UID != sandboxUID || rep.GID != proxyGID || len(rep.Groups) != 0 {
		t.Errorf("after DropPrivileges(%d, %d): %+v", sandboxUID, proxyGID, rep)
	}
	if rep.CapEff != "0000000000000000" {
		t.Errorf("capabilities left after the drop: CapEff %s", rep.CapEff)
	}
	if rep.SetuidErr == "" {
		t.Error("the process got root back with setuid(0) after the drop")
	}
	for _, spec := range []string{"0:10001", "10001:0", "-1:5"} {
		if rep := runDropHelper(t, spec); !strings.Contains(rep.Err, "want a uid and gid above 0") || rep.UID != 0 {
			t.Errorf("DropPrivileges(%s): %+v; want a refusal that keeps the process as it was", spec, rep)
		}
	}
}
