//go:build linux

package transparent_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/codeforge/codeforge/internal/testenv"
)

// Every test here works in network namespaces it creates and deletes; the
// host's own namespace, its interfaces and its iptables rules are never
// touched. Commands that change a namespace go through "ip -n NS" or run
// on an OS thread locked into that namespace.

// netnsName returns a fresh namespace name with the test prefix.
func netnsName() string {
	b := make([]byte, 4)
	rand.Read(b)
	return "cf-test-" + hex.EncodeToString(b)
}

// run runs a command and fails the test with its output on error.
func run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// newNetns creates a namespace with lo up and deletes it when the test ends.
func newNetns(t testing.TB) string {
	t.Helper()
	testenv.Root(t, "it creates network namespaces and iptables rules")
	ns := netnsName()
	run(t, "ip", "netns", "add", ns)
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
			t.Errorf("delete netns %s: %v\n%s", ns, err, out)
		}
	})
	run(t, "ip", "-n", ns, "link", "set", "lo", "up")
	return ns
}

// inNetns runs fn on an OS thread that has joined namespace ns; processes
// fn starts and sockets fn opens belong to ns. The thread is discarded
// afterwards (the goroutine exits still locked), so no other goroutine
// ever runs in ns by accident.
func inNetns(ns string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		f, err := os.Open("/run/netns/" + ns)
		if err != nil {
			errc <- fmt.Errorf("open netns %s: %w", ns, err)
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("enter netns %s: %w", ns, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// listenIn opens a TCP listener inside ns.
func listenIn(t testing.TB, ns, addr string) net.Listener {
	t.Helper()
	var l net.Listener
	err := inNetns(ns, func() (err error) {
		l, err = net.Listen("tcp", addr)
		return err
	})
	if err != nil {
		t.Fatalf("listen on %s in %s: %v", addr, ns, err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// dialIn dials from inside ns. net.Dialer opens the socket on the calling
// goroutine for a single literal address, so the socket lives in ns.
func dialIn(ctx context.Context, ns, addr string) (net.Conn, error) {
	var c net.Conn
	err := inNetns(ns, func() (err error) {
		var d net.Dialer
		c, err = d.DialContext(ctx, "tcp", addr)
		return err
	})
	return c, err
}

// natRules lists the nat table of ns (iptables -S form).
func natRules(t testing.TB, ns string) string {
	t.Helper()
	return run(t, "ip", "netns", "exec", ns, "iptables", "-t", "nat", "-S")
}

// topology is two namespaces joined by a veth pair: client (10.77.0.1)
// routes everything through proxy (10.77.0.2, interface ProxyIf), which
// also owns the "remote" address APIAddr on its loopback.
type topology struct {
	Client, Proxy string
	ProxyIf       string
	ClientIP      string
	ProxyIP       string
	APIAddr       string
}

func newTopology(t testing.TB) topology {
	t.Helper()
	tp := topology{
		Client:   newNetns(t),
		Proxy:    newNetns(t),
		ProxyIf:  "cfp0",
		ClientIP: "10.77.0.1",
		ProxyIP:  "10.77.0.2",
		APIAddr:  "10.78.0.1",
	}
	run(t, "ip", "-n", tp.Client, "link", "add", "cfc0", "type", "veth", "peer", "name", tp.ProxyIf, "netns", tp.Proxy)
	run(t, "ip", "-n", tp.Client, "addr", "add", tp.ClientIP+"/24", "dev", "cfc0")
	run(t, "ip", "-n", tp.Client, "link", "set", "cfc0", "up")
	run(t, "ip", "-n", tp.Client, "route", "add", "default", "via", tp.ProxyIP)
	run(t, "ip", "-n", tp.Proxy, "addr", "add", tp.ProxyIP+"/24", "dev", tp.ProxyIf)
	run(t, "ip", "-n", tp.Proxy, "link", "set", tp.ProxyIf, "up")
	run(t, "ip", "-n", tp.Proxy, "addr", "add", tp.APIAddr+"/32", "dev", "lo")
	return tp
}
