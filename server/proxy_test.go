package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codeforge/codeforge/apis"
	"github.com/codeforge/codeforge/internal/testenv"
	"github.com/codeforge/codeforge/proxy"
	"github.com/codeforge/codeforge/proxy/ca"
	"github.com/codeforge/codeforge/sandbox/local"
	"github.com/codeforge/codeforge/settings"
)

// gateConfig tunes the in-process proxy of a gated harness.
type gateConfig struct {
	roots    *x509.CertPool
	resolver func(ctx context.Context, host string) ([]netip.Addr, error)
}

// newGatedHarness is newHarness with the in-process egress proxy as the
// gate, as `serve --sandbox local` wires it.
func newGatedHarness(t testing.TB, cfg harnessConfig) *harness {
	return newGatedHarnessWith(t, cfg, gateConfig{})
}

func newGatedHarnessWith(t testing.TB, cfg harnessConfig, gc gateConfig) *harness {
	t.Helper()
	authority, err := ca.LoadOrCreate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	edit := cfg.edit
	var yolo bool
	if edit != nil {
		var probe Options
		edit(&probe)
		yolo = probe.Settings.YOLO
	}
	cfg.caCert = authority.CertFile()
	cfg.gate = func(set *apis.Set) proxy.Gate {
		px, err := proxy.New(proxy.Options{
			APIs:                  set,
			CA:                    authority,
			PublicURL:             "http://" + ln.Addr().String(),
			Resolver:              gc.resolver,
			UpstreamRoots:         gc.roots,
			AllowPrivateUpstreams: true,
			Settings:              settingsWithYOLO(yolo),
		})
		if err != nil {
			t.Fatalf("proxy.New: %v", err)
		}
		go px.Serve(ln)
		t.Cleanup(func() { px.Close() })
		return px
	}
	return newHarness(t, cfg)
}

// TestCredentialThroughExecuteCode is the end-to-end check on the
// local backend: code sends a token NAME to a TLS API through the
// in-process proxy; the API receives the real value; the code only ever
// sees the name; the network log records the injection.
func TestCredentialThroughExecuteCode(t *testing.T) {
	t.Parallel()
	for _, pool := range []int{0, 2} {
		t.Run(fmt.Sprintf("pool %d", pool), func(t *testing.T) {
			t.Parallel()
			testCredentialThroughExecuteCode(t, pool)
		})
	}
}

// testCredentialThroughExecuteCode runs the same call three times: with
// a warm pool the first starts cold and the others are served warm, each
// with its own proxy identity and network log.
func testCredentialThroughExecuteCode(t *testing.T, pool int) {
	const secret = "s3cr3t-value-9f8e7d"
	var (
		mu       sync.Mutex
		received []string
	)
	const host = "api.test"
	testCA := testenv.NewCA(t)
	cert, _, _ := testCA.Leaf(t, host)
	api := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		received = append(received, r.Header.Get("Authorization"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"you_sent": %q, "host": %q}`, r.Header.Get("Authorization"), r.Host)
	}))
	api.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	api.StartTLS()
	defer api.Close()
	_, port, _ := net.SplitHostPort(api.Listener.Addr().String())

	// The API's certificate is trusted through the proxy's UpstreamRoots,
	// and its name is mapped to loopback by the proxy's resolver: no
	// traffic leaves the machine.
	dir := writeAPIs(t, map[string]string{
		"echo": `{"description": "Echo API", "domains": ["` + host + `"], "credentials": {"ECHO_TOKEN": "${ECHO_SECRET}"}, "ports": [` + port + `]}`,
	})
	h := newGatedHarnessWith(t, harnessConfig{
		apisDir:  dir,
		poolSize: pool,
		getenv: func(k string) (string, bool) {
			if k == "ECHO_SECRET" {
				return secret, true
			}
			return "", false
		},
	}, gateConfig{
		roots: testCA.Pool(),
		resolver: func(_ context.Context, name string) ([]netip.Addr, error) {
			if name == host {
				return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
			}
			return nil, fmt.Errorf("test resolver: unknown host %q", name)
		},
	})

	code := fmt.Sprintf(`const r = await fetch("https://%s:%s/v1/whoami", { headers: { Authorization: "Bearer ECHO_TOKEN" } });
console.log(r.status, await r.text());`, host, port)
	for i := range 3 {
		if i > 0 && pool > 0 {
			waitWarm(t, h.local)
		}
		mu.Lock()
		received = nil
		mu.Unlock()
		checkCredentialRun(t, h, code, secret, host, func() []string {
			mu.Lock()
			defer mu.Unlock()
			return append([]string(nil), received...)
		})
	}
	if pool > 0 {
		if cold := strings.Count(h.logText(), "msg=start ") - strings.Count(h.logText(), "warm=true"); cold > 1 {
			t.Errorf("%d of 3 runs started cold, want 1", cold)
		}
	}

	// Without YOLO, a host outside the run's APIs is refused (by Deno's
	// permissions, before the proxy is even asked).
	res := h.run(`try { await fetch("https://other.test/"); console.log("reached") } catch (e) { console.log("refused", e.name) }`, "apis", []string{"echo"})
	if text := allText(res); !strings.Contains(text, "refused") {
		t.Fatalf("fetch to a host outside the allowlist: %q", text)
	}
}

// waitWarm waits until the local runner has a warm process idle.
func waitWarm(t *testing.T, r *local.Runner) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for r.WarmIdle() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no warm process after a minute")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func checkCredentialRun(t *testing.T, h *harness, code, secret, host string, received func() []string) {
	t.Helper()
	res := h.run(code, "apis", []string{"echo"})
	text := allText(res)
	if res.IsError {
		t.Fatalf("run failed: %s", text)
	}
	if strings.Contains(text, secret) {
		t.Fatalf("the secret reached the sandbox's output: %s", text)
	}
	if !strings.Contains(text, `"you_sent": "Bearer ECHO_TOKEN"`) || !strings.HasPrefix(text, "200 ") {
		t.Fatalf("output %q: want the API's echo with the token name", text)
	}
	got := received()
	if len(got) != 1 || got[0] != "Bearer "+secret {
		t.Fatalf("the API received %q, want the real credential", got)
	}
	out := output(t, res)
	if len(out.Network) != 1 {
		t.Fatalf("network log = %+v, want one request", out.Network)
	}
	e := out.Network[0]
	if e.Method != "GET" || (e.Host != host && !strings.HasPrefix(e.Host, host+":")) || e.Path != "/v1/whoami" || e.Status != 200 || !e.Injected || e.Blocked != "" {
		t.Fatalf("network entry = %+v", e)
	}
}

func settingsWithYOLO(yolo bool) settings.Common { return settings.Common{YOLO: yolo} }

// TestNetworkDeniedHint: Deno's "run again with the --allow-net flag" is
// advice the agent cannot follow; the result says which hosts the run may
// reach and how a user adds one. Code that reaches its hosts gets no hint.
func TestNetworkDeniedHint(t *testing.T) {
	t.Parallel()
	h := newGatedHarness(t, harnessConfig{apisDir: writeAPIs(t, map[string]string{
		"alpha": `{"description": "Alpha", "domains": ["alpha.test"]}`,
		"beta":  `{"description": "Beta", "domains": ["beta.test"]}`,
	})})
	res := h.run(`await fetch("https://elsewhere.test/")`)
	text := allText(res)
	for _, want := range []string{`network: elsewhere.test:443 is not a host this run may reach (alpha.test, beta.test)`, "list_apis", "YOLO mode"} {
		if !strings.Contains(text, want) {
			t.Errorf("result lacks %q:\n%s", want, text)
		}
	}
	res = h.run(`await fetch("https://elsewhere.test/")`, "apis", []string{"beta"})
	if text := allText(res); !strings.Contains(text, "(beta.test)") {
		t.Errorf("with apis [beta] the hint should list beta.test only:\n%s", text)
	}
	// Only Deno's own error on stderr counts, not text the code prints.
	res = h.run(`console.log('NotCapable: Requires net access to "elsewhere.test:443"')`)
	if text := allText(res); strings.Contains(text, "not a host this run may reach") {
		t.Errorf("printed text got the hint:\n%s", text)
	}

	off := newHarness(t, harnessConfig{})
	res = off.run(`await fetch("https://elsewhere.test/")`)
	if text := allText(res); !strings.Contains(text, "runs without its egress proxy") {
		t.Errorf("no-network server: hint missing:\n%s", text)
	}
}
