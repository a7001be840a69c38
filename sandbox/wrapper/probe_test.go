//go:build linux

package wrapper

import (
	"net"
	"os"
	"strings"
	"testing"

	"github.com/codeforge/codeforge/sandbox/runpolicy"
)

// TestProbe: --check IPV4:PORT's connection to the proxy (the part that
// needs no sandbox): a listener on loopback is reached (exit 0, nothing
// said); with nothing listening the wrapper exits with ExitNetworkDown and
// says which address it could not reach and why, in the words the Docker
// backend turns into sandbox.ErrNetworkDown. The whole --check path runs
// in the sandbox container in sandbox/docker: TestWrapper,
// TestReadyProbesProxyPath.
func TestProbe(t *testing.T) {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	up := l.Addr().String()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	gone, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := gone.Addr().String()
	gone.Close()
	defer l.Close()

	probe := func(addr string) (int, string) {
		f, err := os.CreateTemp(t.TempDir(), "stderr")
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		code := (&wrapper{stderr: f}).probe(addr)
		b, err := os.ReadFile(f.Name())
		if err != nil {
			t.Fatal(err)
		}
		return code, string(b)
	}
	if code, msg := probe(up); code != 0 || msg != "" {
		t.Errorf("probe of a listening proxy: exit %d, %q; want 0 and nothing", code, msg)
	}
	code, msg := probe(down)
	want := "codeforge-run: network: the sandbox cannot reach the proxy at " + down + " (Connection refused)\n"
	if code != runpolicy.ExitNetworkDown || msg != want {
		t.Errorf("probe with nothing listening: exit %d, %q; want %d, %q", code, msg, runpolicy.ExitNetworkDown, want)
	}
	for _, bad := range []string{"proxy:3128", "192.0.2.1", "192.0.2.1:", "1.2.3.4.5:80", "192.0.2.256:80", "--kill", "[::1]:80"} {
		if err := runpolicy.CheckProbeAddr(bad); err == nil || !strings.Contains(err.Error(), "IPV4:PORT") {
			t.Errorf("CheckProbeAddr(%q) = %v; want a refusal naming IPV4:PORT", bad, err)
		}
	}
}
