package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codeforge/codeforge/apis"
	"github.com/codeforge/codeforge/internal/testenv"
	"github.com/codeforge/codeforge/proxy/ca"
	"github.com/codeforge/codeforge/settings"
)

// Secrets of the test APIs. alpha owns api.test, beta owns beta.test;
// other.test and b.test belong to no API.
const (
	alphaSecret  = "sk_live_alphaSECRET_4f9a2c7e1b"
	alphaSecret2 = "alpha+second/secret=value"
	betaSecret   = "beta-SECRET-value-0987654321"
)

// testHosts are the names the test resolver maps to loopback.
var testHosts = []string{"api.test", "beta.test", "other.test", "b.test"}

func testResolver(ctx context.Context, host string) ([]netip.Addr, error) {
	if host == "far.test" { // somewhere else entirely; never dialled
		return []netip.Addr{netip.MustParseAddr("192.0.2.1")}, nil
	}
	for _, h := range testHosts {
		if host == h {
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
		}
	}
	return nil, &net.DNSError{Err: "no such host (test resolver)", Name: host, IsNotFound: true}
}

// writeAPIs writes the test API configs into a new directory.
func writeAPIs(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	// alpha takes credentials everywhere; beta keeps the defaults
	// (headers only). Both accept every port a loopback test upstream
	// can get, since the upstreams listen on ephemeral ports.
	writeAPI(t, dir, "alpha", map[string]any{
		"description":        "test API alpha",
		"domains":            []string{"api.test"},
		"credentials":        map[string]string{"ALPHA_TOKEN": alphaSecret, "ALPHA_OTHER": alphaSecret2},
		"restricted_methods": []string{"DELETE", "put"},
		"substitute_in":      []string{"headers", "query", "path", "body"},
		"ports":              upstreamPorts(t),
	})
	writeAPI(t, dir, "beta", map[string]any{
		"description": "test API beta",
		"domains":     []string{"beta.test"},
		"credentials": map[string]string{"BETA_KEY": betaSecret},
		"ports":       upstreamPorts(t),
	})
	return dir
}

// upstreamPorts lists 443 and the machine's ephemeral port range, where
// httptest servers listen.
func upstreamPorts(t testing.TB) []int {
	t.Helper()
	data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		t.Fatal(err)
	}
	var lo, hi int
	if _, err := fmt.Sscan(string(data), &lo, &hi); err != nil || lo < 1024 || hi > 65535 || lo > hi {
		t.Fatalf("ip_local_port_range %q: %v", data, err)
	}
	ports := []int{443}
	for p := lo; p <= hi; p++ {
		ports = append(ports, p)
	}
	return ports
}

func writeAPI(t testing.TB, dir, name string, cfg map[string]any) {
	t.Helper()
	data, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, name), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name, "config.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func loadAPIs(t testing.TB, dir string) *apis.Set {
	t.Helper()
	set, err := apis.Load(dir, func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatalf("load test APIs: %v", err)
	}
	return set
}

// upstreamPKI is a private CA for the test upstream servers, trusted by the
// proxy through Options.UpstreamRoots, and the certificate an upstream
// serves (for its names and 127.0.0.1).
type upstreamPKI struct {
	ca   *testenv.CA
	leaf tls.Certificate
}

func newPKI(t testing.TB, names ...string) *upstreamPKI {
	t.Helper()
	authority := testenv.NewCA(t)
	leaf, _, _ := authority.Leaf(t, append(names, "127.0.0.1")...)
	return &upstreamPKI{ca: authority, leaf: leaf}
}

// sharedPKI is the one upstream PKI of the package's tests: every proxy
// they start trusts it and every upstream serves its certificate.
var sharedPKI struct {
	once sync.Once
	pki  *upstreamPKI
}

// testPKI returns sharedPKI, made by the first test that asks.
func testPKI(t testing.TB) *upstreamPKI {
	t.Helper()
	sharedPKI.once.Do(func() { sharedPKI.pki = newPKI(t, "api.test", "beta.test", "other.test", "b.test", "localhost") })
	if sharedPKI.pki == nil {
		t.Fatal("the shared upstream test PKI could not be made: see the first test that failed")
	}
	return sharedPKI.pki
}

// upstream is a real TLS (or plain) server on loopback that records what
// reached it.
type upstream struct {
	srv  *httptest.Server
	port string
	mu   sync.Mutex
	reqs []seenRequest
}

type seenRequest struct {
	Method string
	Host   string
	URI    string
	Header http.Header
	Body   string
}

func newUpstream(t testing.TB, h http.HandlerFunc) *upstream {
	return startUpstream(t, h, true, testPKI(t).leaf)
}

func startUpstream(t testing.TB, h http.HandlerFunc, useTLS bool, cert tls.Certificate) *upstream {
	t.Helper()
	u := &upstream{}
	u.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		u.mu.Lock()
		u.reqs = append(u.reqs, seenRequest{Method: r.Method, Host: r.Host, URI: r.RequestURI, Header: r.Header.Clone(), Body: string(body)})
		u.mu.Unlock()
		r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(body), r.Body))
		if h != nil {
			h(w, r)
		}
	}))
	if useTLS {
		u.srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
		u.srv.StartTLS()
	} else {
		u.srv.Start()
	}
	t.Cleanup(u.srv.Close)
	_, u.port, _ = net.SplitHostPort(u.srv.Listener.Addr().String())
	return u
}

func (u *upstream) seen() []seenRequest {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]seenRequest(nil), u.reqs...)
}

// url is an address of this upstream under a test host name.
func (u *upstream) url(host, pathQuery string) string {
	scheme := "https"
	if u.srv.TLS == nil {
		scheme = "http"
	}
	return scheme + "://" + host + ":" + u.port + pathQuery
}

// syncBuffer is a log sink safe for concurrent writes.
type syncBuffer = testenv.LogBuffer

// testProxy is a running proxy with its CA and log.
type testProxy struct {
	p    *Proxy
	addr string
	ca   *ca.CA
	log  *syncBuffer
}

type proxyOpt func(*Options)

func withSettings(s settings.Common) proxyOpt { return func(o *Options) { o.Settings = s } }
func noPrivate() proxyOpt                     { return func(o *Options) { o.AllowPrivateUpstreams = false } }

func startProxy(t testing.TB, opts ...proxyOpt) *testProxy {
	t.Helper()
	return startProxyWith(t, nil, opts...)
}

// startProxyWith is startProxy with a hook that may change the proxy
// before it starts serving.
func startProxyWith(t testing.TB, setup func(*Proxy), opts ...proxyOpt) *testProxy {
	t.Helper()
	authority, err := ca.LoadOrCreate(filepath.Join(t.TempDir(), "ca"))
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	o := Options{
		CA:                    authority,
		Logger:                slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Resolver:              testResolver,
		UpstreamRoots:         testPKI(t).ca.Pool(),
		AllowPrivateUpstreams: true,
	}
	for _, f := range opts {
		f(&o)
	}
	if o.APIs == nil {
		o.APIs = loadAPIs(t, writeAPIs(t))
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o.PublicURL = "http://" + l.Addr().String()
	p, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	if setup != nil {
		setup(p)
	}
	go func() { _ = p.Serve(l) }()
	t.Cleanup(func() { _ = p.Close() })
	return &testProxy{p: p, addr: l.Addr().String(), ca: authority, log: logs}
}

// open registers a run and returns it with a client that uses its proxy URL.
func (tp *testProxy) open(t testing.TB, apiNames ...string) (Run, *http.Client) {
	t.Helper()
	r, err := tp.p.Open(context.Background(), RunSpec{APIs: apiNames})
	if err != nil {
		t.Fatal(err)
	}
	return r, tp.client(t, r.ProxyURL())
}

// client trusts only the proxy's CA, never follows redirects and never
// decompresses, so tests see exactly what the proxy sent.
func (tp *testProxy) client(t testing.TB, proxyURL string) *http.Client {
	t.Helper()
	u, err := url.Parse(proxyURL)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(tp.ca.Certificate())
	tr := &http.Transport{
		Proxy:              http.ProxyURL(u),
		TLSClientConfig:    &tls.Config{RootCAs: pool},
		DisableCompression: true,
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{
		Transport:     tr,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Timeout:       2 * time.Minute,
	}
}

func do(t testing.TB, c *http.Client, method, u string, body io.Reader, header map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, u, err)
	}
	return resp, string(data)
}

// tunnel opens a CONNECT tunnel to hostport through the proxy with the
// run's credentials and speaks TLS in it, so a test can write raw requests.
func (tp *testProxy) tunnel(t testing.TB, r Run, hostport, sni string) (*tls.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", tp.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	auth := ""
	if r != nil {
		u, _ := url.Parse(r.ProxyURL())
		pass, _ := u.User.Password()
		auth = "Proxy-Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte(u.User.Username()+":"+pass)) + "\r\n"
	}
	if _, err := io.WriteString(c, "CONNECT "+hostport+" HTTP/1.1\r\nHost: "+hostport+"\r\n"+auth+"\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT %s: %s", hostport, resp.Status)
	}
	pool := x509.NewCertPool()
	pool.AddCert(tp.ca.Certificate())
	tc := tls.Client(&bufConn{Conn: c, r: br}, &tls.Config{ServerName: sni, RootCAs: pool})
	if err := tc.Handshake(); err != nil {
		t.Fatalf("TLS in tunnel: %v", err)
	}
	return tc, bufio.NewReader(tc)
}

type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// rawRoundTrip writes a raw request into a tunnel and reads the answer.
func rawRoundTrip(t testing.TB, w io.Writer, br *bufio.Reader, raw string) (*http.Response, string) {
	t.Helper()
	if _, err := io.WriteString(w, raw); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

func mustContain(t testing.TB, what, s string, subs ...string) {
	t.Helper()
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			t.Errorf("%s: want %q in:\n%s", what, sub, s)
		}
	}
}

func mustNotContain(t testing.TB, what, s string, subs ...string) {
	t.Helper()
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			t.Errorf("%s: must not contain %q:\n%s", what, sub, s)
		}
	}
}
