package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/codeforge/codeforge/apis"
	"github.com/codeforge/codeforge/proxy"
	"github.com/codeforge/codeforge/proxy/ca"
)

// addonScript is the mitmproxy addon that does the substitution.
//
//go:embed substitute.py
var addonScript string

const (
	// apiHost is the API's name. Every dialer here maps it to 127.0.0.1;
	// nothing is ever resolved through DNS.
	apiHost = "api.test"
	token   = "BENCH_API_TOKEN"
	secret  = "sk_live_bench_9f8e7d6c5b4a3210"
	// streamChunk is the unit the download endpoint sends; each chunk
	// carries the secret once.
	streamChunk = 64 << 10

	smallTimeout   = 30 * time.Second
	mitmStartLimit = 60 * time.Second
	mitmStopGrace  = 5 * time.Second
)

// path is one way from the client to the API.
type path struct {
	name   string
	base   string // the API's URL
	client *http.Client
	// cred is what the client writes in Authorization after "Bearer ":
	// the secret when direct, the token name through a proxy.
	cred string
	// diag, when set, describes the path's state for an error message.
	diag func() string
}

// proxied reports whether the path substitutes (the client sends names).
func (p *path) proxied() bool { return p.cred != secret }

// loopbackDial dials only loopback addresses; apiHost means 127.0.0.1.
func loopbackDial(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	if host == apiHost {
		host = "127.0.0.1"
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("vsmitm dials loopback addresses only, not %q", addr)
	}
	var d net.Dialer
	return d.DialContext(ctx, network, net.JoinHostPort(host, port))
}

// newClient builds an HTTP/1.1 client (the same for every path) that
// trusts roots and goes through proxyURL when it is not nil. It keeps
// enough idle connections for conc clients.
func newClient(roots *x509.CertPool, proxyURL *url.URL, conc int) *http.Client {
	var protos http.Protocols
	protos.SetHTTP1(true)
	tr := &http.Transport{
		DialContext:         loopbackDial,
		TLSClientConfig:     &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout: 15 * time.Second,
		DisableCompression:  true,
		MaxIdleConnsPerHost: conc + 1,
		IdleConnTimeout:     90 * time.Second,
		Protocols:           &protos,
	}
	if proxyURL != nil {
		tr.Proxy = http.ProxyURL(proxyURL)
	}
	return &http.Client{Transport: tr}
}

func certPool(certs ...*x509.Certificate) *x509.CertPool {
	p := x509.NewCertPool()
	for _, c := range certs {
		p.AddCert(c)
	}
	return p
}

// api is the loopback TLS API. /small answers only a request that carries
// the secret and echoes its Authorization header in the body (so a proxy
// has something to substitute back); /stream?bytes=N sends N bytes (a
// multiple of streamChunk) with the secret once per chunk.
type api struct {
	ca   *ca.CA
	port string
	url  string // https://api.test:PORT
	srv  *http.Server
}

func startAPI(dir string) (*api, error) {
	upstream, err := ca.LoadOrCreate(filepath.Join(dir, "ca"))
	if err != nil {
		return nil, err
	}
	leaf, err := upstream.Leaf(apiHost)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/small", func(w http.ResponseWriter, r *http.Request) {
		auth := r.Header.Get("Authorization")
		if auth != "Bearer "+secret {
			http.Error(w, "Authorization must carry the credential value", http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"ok":true,"authorization":%q}`, auth)
	})
	chunk := chunkWith(secret)
	mux.HandleFunc("/stream", func(w http.ResponseWriter, r *http.Request) {
		total, err := strconv.ParseInt(r.URL.Query().Get("bytes"), 10, 64)
		if err != nil || total < 0 || total%streamChunk != 0 {
			http.Error(w, "bytes must be a multiple of 65536", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		for sent := int64(0); sent < total; sent += streamChunk {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	a := &api{
		ca:   upstream,
		port: strconv.Itoa(ln.Addr().(*net.TCPAddr).Port),
		srv: &http.Server{
			Handler:           mux,
			ReadHeaderTimeout: 10 * time.Second,
			TLSConfig:         &tls.Config{Certificates: []tls.Certificate{*leaf}},
		},
	}
	a.url = "https://" + net.JoinHostPort(apiHost, a.port)
	go a.srv.ServeTLS(ln, "", "")
	return a, nil
}

func (a *api) close() { a.srv.Close() }

func (a *api) directPath(conc int) *path {
	return &path{name: "direct", base: a.url, client: newClient(certPool(a.ca.Certificate()), nil, conc), cred: secret}
}

// chunkWith returns streamChunk bytes of JSON lines with cred once, near
// the middle.
func chunkWith(cred string) []byte {
	line := []byte(`{"id":"ch_1","object":"charge","amount":2000,"currency":"usd","status":"succeeded"}` + "\n")
	b := bytes.Repeat(line, streamChunk/len(line)+1)[:streamChunk]
	copy(b[streamChunk/2:], cred)
	return b
}

// codeforge is the CodeForge proxy, in-process, with one run identity.
type codeforge struct {
	p   *proxy.Proxy
	ca  *ca.CA
	run proxy.Run
	url *url.URL
}

func startCodeForge(ctx context.Context, dir string, a *api) (*codeforge, error) {
	apiDir := filepath.Join(dir, "apis", "bench")
	if err := os.MkdirAll(apiDir, 0o700); err != nil {
		return nil, err
	}
	cfg, err := json.Marshal(map[string]any{
		"description": "vsmitm benchmark API",
		"domains":     []string{apiHost},
		"credentials": map[string]string{token: secret},
		"ports":       []json.Number{json.Number(a.port)},
		"active":      true,
	})
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(apiDir, "config.json"), cfg, 0o600); err != nil {
		return nil, err
	}
	set, err := apis.Load(filepath.Join(dir, "apis"), func(string) (string, bool) { return "", false })
	if err != nil {
		return nil, err
	}
	proxyCA, err := ca.LoadOrCreate(filepath.Join(dir, "ca"))
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p, err := proxy.New(proxy.Options{
		APIs:      set,
		CA:        proxyCA,
		PublicURL: "http://" + ln.Addr().String(),
		Resolver: func(_ context.Context, host string) ([]netip.Addr, error) {
			if host == apiHost {
				return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
			}
			return nil, fmt.Errorf("vsmitm resolver: only %s is known, not %q", apiHost, host)
		},
		UpstreamRoots:         certPool(a.ca.Certificate()),
		AllowPrivateUpstreams: true,
	})
	if err != nil {
		ln.Close()
		return nil, err
	}
	go p.Serve(ln)
	cf := &codeforge{p: p, ca: proxyCA}
	if cf.run, err = p.Open(ctx, proxy.RunSpec{}); err != nil {
		p.Close()
		return nil, err
	}
	if cf.url, err = url.Parse(cf.run.ProxyURL()); err != nil {
		cf.close()
		return nil, err
	}
	return cf, nil
}

func (cf *codeforge) close() {
	if cf.run != nil {
		cf.run.Finish(context.Background())
	}
	cf.p.Close()
}

func (cf *codeforge) path(a *api, conc int) *path {
	return &path{name: "codeforge", base: a.url, client: newClient(certPool(cf.ca.Certificate()), cf.url, conc), cred: token}
}

// mitmdumpVersion returns `mitmdump --version`, one line per component
// joined with " / ".
func mitmdumpVersion(ctx context.Context, bin string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "--version").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s --version: %w: %s", bin, err, bytes.TrimSpace(out))
	}
	var parts []string
	for _, l := range strings.Split(string(out), "\n") {
		if l = strings.Join(strings.Fields(l), " "); l != "" {
			parts = append(parts, l)
		}
	}
	return strings.Join(parts, " / "), nil
}

// mitmdump is a running mitmdump process with the addon loaded.
type mitmdump struct {
	cmd      *exec.Cmd
	out      *tailBuffer
	exited   chan struct{} // closed once the process is reaped
	waitErr  error         // valid after exited is closed
	stopOnce sync.Once
	url      *url.URL
	roots    *x509.CertPool
}

// startMitmdump runs mitmdump on a free 127.0.0.1 port with its own
// confdir (and so its own CA) under dir, upstream certificates checked
// against the API's CA, and the addon. It returns once the proxy accepts
// connections.
func startMitmdump(ctx context.Context, bin, dir string, a *api) (*mitmdump, error) {
	confdir := filepath.Join(dir, "conf")
	if err := os.MkdirAll(confdir, 0o700); err != nil {
		return nil, err
	}
	script := filepath.Join(dir, "substitute.py")
	if err := os.WriteFile(script, []byte(addonScript), 0o600); err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort("127.0.0.1", port)
	m := &mitmdump{out: &tailBuffer{max: 16 << 10}, exited: make(chan struct{})}
	m.cmd = exec.Command(bin,
		"--quiet", // no per-flow console output (the CodeForge proxy logs nothing either)
		"--listen-host", "127.0.0.1",
		"--listen-port", port,
		"--set", "confdir="+confdir,
		"--set", "ssl_verify_upstream_trusted_ca="+a.ca.CertFile(),
		"-s", script,
		"--set", "cf_host="+apiHost,
		"--set", "cf_token="+token,
		"--set", "cf_secret="+secret,
	)
	m.cmd.Dir = dir
	m.cmd.Stdout = m.out
	m.cmd.Stderr = m.out
	// If vsmitm dies without running its cleanup, the kernel kills mitmdump.
	m.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := m.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		m.waitErr = m.cmd.Wait()
		close(m.exited)
	}()
	if err := m.waitReady(ctx, addr, filepath.Join(confdir, "mitmproxy-ca-cert.pem")); err != nil {
		m.stop()
		return nil, fmt.Errorf("%w\n%s", err, m.describe())
	}
	m.url = &url.URL{Scheme: "http", Host: addr}
	return m, nil
}

// waitReady polls until mitmdump has written its CA and accepts TCP
// connections, it exits, ctx ends, or mitmStartLimit passes.
func (m *mitmdump) waitReady(ctx context.Context, addr, caFile string) error {
	deadline := time.Now().Add(mitmStartLimit)
	for {
		if pem, err := os.ReadFile(caFile); err == nil {
			if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
				c.Close()
				roots := x509.NewCertPool()
				if !roots.AppendCertsFromPEM(pem) {
					return fmt.Errorf("no certificate in %s", caFile)
				}
				m.roots = roots
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not listening on %s after %s", addr, mitmStartLimit)
		}
		select {
		case <-m.exited:
			return fmt.Errorf("exited while starting: %v", m.waitErr)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// stop asks mitmdump to quit (SIGTERM), kills it after mitmStopGrace, and
// waits for it. It is safe to call more than once.
func (m *mitmdump) stop() {
	m.stopOnce.Do(func() {
		select {
		case <-m.exited:
			return
		default:
		}
		m.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-m.exited:
		case <-time.After(mitmStopGrace):
			m.cmd.Process.Kill()
			<-m.exited
		}
	})
}

// describe says whether mitmdump is still running and shows the end of
// its output.
func (m *mitmdump) describe() string {
	state := "mitmdump is running"
	select {
	case <-m.exited:
		state = fmt.Sprintf("mitmdump exited: %v", m.waitErr)
	default:
	}
	return state + "; its output ends with:\n" + m.out.String()
}

func (m *mitmdump) path(a *api, conc int) *path {
	return &path{name: "mitmdump", base: a.url, client: newClient(m.roots, m.url, conc), cred: token, diag: m.describe}
}

// freePort returns a TCP port that was free on 127.0.0.1 a moment ago.
func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port), nil
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

var _ io.Writer = (*tailBuffer)(nil)

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.buf) == 0 {
		return "(no output)"
	}
	return string(t.buf)
}

// errNoMitmdump is what run returns when mitmdump is not on PATH.
var errNoMitmdump = errors.New("mitmdump not found: apt-get install -y mitmproxy")
