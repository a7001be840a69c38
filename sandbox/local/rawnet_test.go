package local

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/codeforge/codeforge/sandbox"
)

// TestNoRawTCPToLoopback: run code tries what a hijacked agent would, to
// reach a service on the server's own machine around the proxy:
// Deno.connect to a loopback listener the test made, by address, by name,
// in IPv4-mapped form and over IPv6. With an API allowlist Deno refuses
// every one; unrestricted network (YOLO mode) is refused before Deno
// starts, because --allow-net would let them all through (a cloud
// machine's credential service at 169.254.169.254 the same way). The
// listener must see no connection.
func TestNoRawTCPToLoopback(t *testing.T) {
	t.Parallel()
	var reached atomic.Int64
	listen := func(network, addr string) (net.Listener, bool) {
		l, err := net.Listen(network, addr)
		if err != nil {
			return nil, false
		}
		t.Cleanup(func() { l.Close() })
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				reached.Add(1)
				c.Close()
			}
		}()
		return l, true
	}
	l4, _ := listen("tcp4", "127.0.0.1:0")
	port := l4.Addr().(*net.TCPAddr).Port
	probes := map[string]string{
		"127.0.0.1": fmt.Sprintf(`(await Deno.connect({ hostname: "127.0.0.1", port: %d })).close()`, port),
		"localhost": fmt.Sprintf(`(await Deno.connect({ hostname: "localhost", port: %d })).close()`, port),
		"127.1":     fmt.Sprintf(`(await Deno.connect({ hostname: "127.1", port: %d })).close()`, port),
		"mapped":    fmt.Sprintf(`(await Deno.connect({ hostname: "::ffff:127.0.0.1", port: %d })).close()`, port),
		"fetch":     fmt.Sprintf(`await fetch("http://127.0.0.1:%d/")`, port),
	}
	if l6, ok := listen("tcp6", "[::1]:0"); ok {
		probes["::1"] = fmt.Sprintf(`(await Deno.connect({ hostname: "::1", port: %d })).close()`, l6.Addr().(*net.TCPAddr).Port)
	}
	r := newRunner(t, nil)

	t.Run("API allowlist", func(t *testing.T) {
		got := runProbes(t, r, sandbox.Request{
			AllowHosts: []string{"api.codeforge.test"},
			ProxyURL:   "http://run-a:secret@127.0.0.1:9/",
		}, probes)
		for name := range probes {
			if got[name] == "allowed" {
				t.Errorf("%s: run code reached the loopback listener", name)
			}
		}
	})
	t.Run("YOLO", func(t *testing.T) {
		req := sandbox.Request{AllowAllHosts: true, ProxyURL: "http://run-b:secret@127.0.0.1:9/", Code: probeCode(probes)}
		req.Timeout = 60e9
		res, err := r.Run(t.Context(), req)
		if err == nil {
			t.Fatalf("a run with unrestricted network was started: exit %d, stdout %s, stderr %s", res.ExitCode, res.Stdout, res.Stderr)
		}
		if !errors.Is(err, ErrAllHosts) {
			t.Errorf("error %v; want ErrAllHosts", err)
		}
		for _, want := range []string{"YOLO_MODE", "Deno.connect", "169.254.169.254", "Docker"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not mention %q", err, want)
			}
		}
	})
	if n := reached.Load(); n != 0 {
		t.Errorf("the loopback listener saw %d connections from run code", n)
	}
}
