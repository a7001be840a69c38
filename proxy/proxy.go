// Package proxy is CodeForge's egress proxy: the only way out of the
// sandbox. It intercepts TLS with its own CA, lets each sandbox run reach
// only the API hosts that run asked for (any host in YOLO mode), swaps
// credential token names for real values on the way to the API that owns
// them — decided by the host it actually dials, never by a Host header the
// code wrote — and swaps the values back to names in whatever comes back.
// It also applies method restrictions, redaction and the User-Agent
// setting, and keeps a network log per run.
//
// A *Proxy serves explicit HTTP proxy clients (Serve) and connections
// redirected to it by iptables (ServeTransparentConn). It implements Gate:
// every run gets its own identity (Basic credentials in the proxy URL).
package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/elazarl/goproxy"

	"github.com/codeforge/codeforge/apis"
	"github.com/codeforge/codeforge/proxy/ca"
	"github.com/codeforge/codeforge/proxy/rewrite"
	"github.com/codeforge/codeforge/settings"
)

// Options configure a Proxy. APIs and CA are required.
type Options struct {
	// APIs is the initial API set; Reload replaces it.
	APIs *apis.Set
	// CA signs the certificates the proxy shows the sandbox.
	CA *ca.CA
	// Settings holds YOLO_MODE, USER_AGENT, REDACTING_STRINGS and DEBUG_MODE.
	Settings settings.Common
	// Logger receives one line per request, injection, block, redaction and
	// reverse substitution; nil is silent. The proxy tags it
	// component=proxy.
	Logger *slog.Logger
	// PublicURL is the proxy's address as the sandbox sees it, e.g.
	// "http://proxy:3128"; run proxy URLs are built from it. Empty means
	// the address of the first listener given to Serve.
	PublicURL string
	// Resolver resolves upstream host names; nil uses net.DefaultResolver.
	// Tests map names to loopback with it.
	Resolver func(ctx context.Context, host string) ([]netip.Addr, error)
	// UpstreamRoots verifies upstream servers; nil means the system roots.
	UpstreamRoots *x509.CertPool
	// AllowPrivateUpstreams lets the proxy dial loopback, private,
	// link-local and other non-public addresses. Off, such destinations
	// are refused after DNS resolution.
	AllowPrivateUpstreams bool

	// dialControl, when set, vets every upstream socket before it
	// connects. Tests set it to keep traffic on loopback even when a
	// defence under test is broken.
	dialControl func(network, address string, c syscall.RawConn) error
}

// Proxy is the egress proxy. It is safe for concurrent use.
type Proxy struct {
	log       *slog.Logger
	ca        *ca.CA
	set       settings.Common
	redact    *rewrite.Replacer // REDACTING_STRINGS -> REDACTED
	resolve   func(ctx context.Context, host string) ([]netip.Addr, error)
	privateOK bool // Options.AllowPrivateUpstreams: private upstreams may be dialled
	transport *http.Transport
	dialer    net.Dialer
	gp        *goproxy.ProxyHttpServer
	state     atomic.Pointer[state]
	runs      *registry
	// transparent is the identity of connections redirected by iptables.
	transparent *run

	mu        sync.Mutex
	publicURL string
	servers   []*http.Server
	conns     map[net.Conn]struct{}
	closed    bool
}

// ctxKey tags values the proxy keeps in request contexts.
type ctxKey int

const (
	runKey    ctxKey = iota // *run of the authenticated client
	pinnedKey               // []netip.Addr the dial must use (transparent mode)
	connKey                 // the client's net.Conn (a *trackedConn)
)

// New builds a Proxy. It does not listen; call Serve.
func New(opts Options) (*Proxy, error) {
	if opts.CA == nil {
		return nil, errors.New("proxy: Options.CA is required (load one with ca.LoadOrCreate)")
	}
	if opts.APIs == nil {
		return nil, errors.New("proxy: Options.APIs is required (load one with apis.Load)")
	}
	if opts.PublicURL != "" {
		if _, err := parsePublicURL(opts.PublicURL); err != nil {
			return nil, err
		}
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	redact, err := redactor(opts.Settings.RedactingStrings)
	if err != nil {
		return nil, err
	}
	p := &Proxy{
		log:       logger.With("component", "proxy"),
		ca:        opts.CA,
		set:       opts.Settings,
		redact:    redact,
		resolve:   opts.Resolver,
		privateOK: opts.AllowPrivateUpstreams,
		publicURL: opts.PublicURL,
		runs:      newRegistry(),
		conns:     map[net.Conn]struct{}{},
		dialer:    net.Dialer{Control: opts.dialControl},
	}
	if p.resolve == nil {
		p.resolve = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	p.transparent = &run{id: "transparent", ring: true}
	st, err := newState(opts.APIs)
	if err != nil {
		return nil, err
	}
	p.state.Store(st)
	p.warnRedactionOverlap(opts.APIs)
	p.transport = &http.Transport{
		// Never an environment proxy: the proxy is the way out.
		Proxy:       nil,
		DialContext: p.dialContext,
		// Upstream TLS is always verified; the Transport sets ServerName
		// to the host it dials.
		TLSClientConfig:       &tls.Config{RootCAs: opts.UpstreamRoots, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:   15 * time.Second,
		ForceAttemptHTTP2:     true,
		DisableCompression:    true, // the proxy picks Accept-Encoding itself
		MaxIdleConns:          256,
		MaxIdleConnsPerHost:   32,
		IdleConnTimeout:       90 * time.Second,
		ExpectContinueTimeout: time.Second,
		// A client that went away cannot cancel a request inside a tunnel,
		// so an upstream that never answers is given up on.
		ResponseHeaderTimeout: 5 * time.Minute,
	}
	p.gp = p.newGoproxy()
	return p, nil
}

// newGoproxy configures goproxy to accept CONNECT only, for the explicit
// proxy: every accepted tunnel is handed over (acceptTunnel, then
// serveTunnel), which intercepts it with a certificate from our CA (never
// goproxy's built-in one) and sends every inner request through forward;
// goproxy never dials anything. Redirected connections (transparent mode)
// do not go through goproxy.
func (p *Proxy) newGoproxy() *goproxy.ProxyHttpServer {
	gp := goproxy.NewProxyHttpServer()
	gp.Logger = goproxyLogger{p}
	gp.Tr = p.transport
	gp.ConnectDial = func(network, addr string) (net.Conn, error) {
		return nil, errors.New("proxy: raw tunnels are disabled; every tunnel is intercepted")
	}
	gp.ConnectDialWithReq = nil
	gp.NonproxyHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "this is an HTTP proxy: send absolute-form requests or CONNECT", http.StatusBadRequest)
	})
	gp.OnRequest().HandleConnectFunc(p.handleConnect)
	return gp
}

// goproxyLogger sends goproxy's own messages to the debug log, scrubbed of
// any credential value.
type goproxyLogger struct{ p *Proxy }

func (l goproxyLogger) Printf(format string, v ...any) {
	l.p.log.Debug("goproxy", "msg", l.p.scrub(fmt.Sprintf(format, v...)))
}

// Reload swaps in a new API set. Requests already under way finish with
// the set they started with.
func (p *Proxy) Reload(set *apis.Set) error {
	if set == nil {
		return errors.New("proxy: reload: nil API set")
	}
	st, err := newState(set)
	if err != nil {
		return fmt.Errorf("proxy: reload: %w", err)
	}
	p.state.Store(st)
	p.warnRedactionOverlap(set)
	p.log.Info("reload", "apis", len(set.Active()))
	return nil
}

// warnRedactionOverlap warns when redaction, which runs first, would
// break a token name so it is never substituted.
func (p *Proxy) warnRedactionOverlap(set *apis.Set) {
	for _, a := range set.Active() {
		for _, name := range a.TokenNames() {
			if out, n := p.redact.String(name); n > 0 {
				p.log.Warn("a REDACTING_STRINGS entry is part of a token name, which will never be substituted", "api", a.Name, "token", name, "becomes", out)
			}
		}
	}
}

// CACertFile is the path of the CA certificate the sandbox must trust.
func (p *Proxy) CACertFile() string { return p.ca.CertFile() }

// Serve accepts explicit proxy clients on l until Close or Shutdown.
func (p *Proxy) Serve(l net.Listener) error {
	srv := &http.Server{
		Handler: p,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, connKey, c)
		},
		MaxHeaderBytes:    maxHeaderBytes,
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       5 * time.Minute,
		ErrorLog:          slog.NewLogLogger(p.log.Handler(), slog.LevelDebug),
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return http.ErrServerClosed
	}
	if p.publicURL == "" {
		p.publicURL = "http://" + l.Addr().String()
	}
	p.servers = append(p.servers, srv)
	p.mu.Unlock()
	return srv.Serve(&trackingListener{Listener: l, p: p})
}

// Shutdown stops accepting connections, waits for requests in flight until
// ctx ends, then closes every remaining connection, tunnels included.
func (p *Proxy) Shutdown(ctx context.Context) error {
	p.mu.Lock()
	p.closed = true
	servers := p.servers
	p.mu.Unlock()
	var errs []error
	for _, s := range servers {
		if err := s.Shutdown(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	p.closeConns()
	return errors.Join(errs...)
}

// Close stops the proxy at once, closing every connection.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	servers := p.servers
	p.mu.Unlock()
	var errs []error
	for _, s := range servers {
		if err := s.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	p.closeConns()
	return errors.Join(errs...)
}

func (p *Proxy) closeConns() {
	p.mu.Lock()
	conns := p.conns
	p.conns = map[net.Conn]struct{}{}
	p.mu.Unlock()
	for c := range conns {
		_ = c.Close()
	}
	p.transport.CloseIdleConnections()
}

// track registers a client connection so Close can end it even after
// goproxy hijacked it; it returns false when the proxy is closed.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

type trackingListener struct {
	net.Listener
	p *Proxy
}

func (l *trackingListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		tc := &trackedConn{Conn: c, p: l.p}
		if l.p.track(tc) {
			return tc, nil
		}
		_ = c.Close()
	}
}

type trackedConn struct {
	net.Conn
	p    *Proxy
	once sync.Once
	mu   sync.Mutex
	run  *run // the run whose tunnel this is, if any
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.p.untrack(c)
		c.mu.Lock()
		r := c.run
		c.mu.Unlock()
		if r != nil {
			r.dropTunnel(c)
		}
	})
	return c.Conn.Close()
}

// bindRun ties a tunnel to its run so finishing the run closes it. It
// fails when the run has finished or holds max tunnels already.
func (c *trackedConn) bindRun(r *run, max int) error {
	if err := r.addTunnel(c, max); err != nil {
		return err
	}
	c.mu.Lock()
	c.run = r
	c.mu.Unlock()
	return nil
}

// CloseWrite and CloseRead keep half-close working through the wrapper.
func (c *trackedConn) CloseWrite() error {
	if hc, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return hc.CloseWrite()
	}
	return nil
}

func (c *trackedConn) CloseRead() error {
	if hc, ok := c.Conn.(interface{ CloseRead() error }); ok {
		return hc.CloseRead()
	}
	return nil
}

// ServeHTTP authenticates the client, then hands CONNECT to goproxy and
// serves plain proxy requests itself.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rn := p.runs.authenticate(r.Header.Get("Proxy-Authorization"))
	if rn == nil {
		// Nothing goes upstream for an unknown identity.
		p.log.Info("req", "run", "", "method", r.Method, "host", r.Host, "status", http.StatusProxyAuthRequired, "blocked", "unknown_identity")
		w.Header().Set("Proxy-Authenticate", `Basic realm="codeforge"`)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set(errorHeader, "unknown_identity")
		w.WriteHeader(http.StatusProxyAuthRequired)
		_, _ = io.WriteString(w, "codeforge proxy: unknown or missing proxy identity; use the proxy URL (with its credentials) given to this run\n")
		return
	}
	r = r.WithContext(context.WithValue(r.Context(), runKey, rn))
	if r.Method == http.MethodConnect {
		p.gp.ServeHTTP(bufferedHijacker{w}, r)
		return
	}
	p.servePlain(w, r, rn)
}

// servePlain handles an absolute-form request (http://host/path) sent to
// the proxy without a tunnel.
func (p *Proxy) servePlain(w http.ResponseWriter, r *http.Request, rn *run) {
	if !r.URL.IsAbs() || r.URL.Host == "" {
		http.Error(w, "codeforge proxy: this is an HTTP proxy; send absolute-form requests (http://host/path) or CONNECT", http.StatusBadRequest)
		return
	}
	if r.URL.Scheme != "http" {
		http.Error(w, "codeforge proxy: only http:// URLs can be sent without a tunnel; use CONNECT for https", http.StatusBadRequest)
		return
	}
	host, port, err := splitTarget(r.URL.Host, "80")
	if err != nil {
		http.Error(w, "codeforge proxy: "+err.Error(), http.StatusBadRequest)
		return
	}
	p.serveRequest(w, r, &target{run: rn, scheme: "http", host: host, port: port})
}

// handleConnect accepts every authenticated CONNECT for interception,
// within the run's cap on open tunnels: the decisions (allowlist,
// routing, credentials) are made per inner request, so a refused request
// gets a readable answer instead of a failed tunnel.
func (p *Proxy) handleConnect(host string, ctx *goproxy.ProxyCtx) (*goproxy.ConnectAction, string) {
	rn, _ := ctx.Req.Context().Value(runKey).(*run)
	if rn == nil {
		ctx.Resp = textResponse(ctx.Req, http.StatusProxyAuthRequired, "unknown_identity", "codeforge proxy: unknown proxy identity")
		return &goproxy.ConnectAction{Action: goproxy.ConnectReject}, host
	}
	h, port, err := splitTarget(host, "443")
	if err != nil {
		ctx.Resp = textResponse(ctx.Req, http.StatusBadRequest, "bad_target", "codeforge proxy: "+err.Error())
		return &goproxy.ConnectAction{Action: goproxy.ConnectReject}, host
	}
	t := &target{run: rn, host: h, port: port}
	if tc, ok := ctx.Req.Context().Value(connKey).(*trackedConn); ok {
		switch err := tc.bindRun(rn, p.maxTunnels()); {
		case errors.Is(err, errTooManyTunnels):
			ctx.Resp = p.tooManyTunnels(ctx.Req, rn, t)
			return &goproxy.ConnectAction{Action: goproxy.ConnectReject}, host
		case err != nil:
			ctx.Resp = textResponse(ctx.Req, http.StatusForbidden, "run_finished", "codeforge proxy: this run has finished; its proxy identity is revoked")
			return &goproxy.ConnectAction{Action: goproxy.ConnectReject}, host
		}
	}
	return p.hijackTunnel(t), host
}

// tlsConfig is what the sandbox sees when it opens TLS in a tunnel: a leaf
// for the tunnel's host (the CONNECT host, or the checked SNI) from our CA.
func (p *Proxy) tlsConfig(host string) (*tls.Config, error) {
	h, _, err := splitTarget(host, "443")
	if err != nil {
		return nil, err
	}
	leaf, err := p.ca.Leaf(h)
	if err != nil {
		return nil, fmt.Errorf("leaf certificate for %s: %w", h, err)
	}
	return &tls.Config{
		Certificates: []tls.Certificate{*leaf},
		MinVersion:   tls.VersionTLS12,
		NextProtos:   []string{"http/1.1"},
	}, nil
}

func parsePublicURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "http" || u.Host == "" || u.User != nil || (u.Path != "" && u.Path != "/") {
		return nil, fmt.Errorf("proxy: public URL %q: want http://host:port (no credentials or path)", s)
	}
	return u, nil
}

func (p *Proxy) publicBase() (*url.URL, error) {
	p.mu.Lock()
	s := p.publicURL
	p.mu.Unlock()
	if s == "" {
		return nil, errors.New("proxy: no public URL yet: set Options.PublicURL or call Serve first")
	}
	return parsePublicURL(s)
}
