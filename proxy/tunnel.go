package proxy

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/elazarl/goproxy"
)

const (
	// tunnelHandshakeTimeout bounds how long a new tunnel may take to
	// start speaking (its first byte and, for TLS, the handshake).
	tunnelHandshakeTimeout = 15 * time.Second
	// innerHeaderTimeout bounds how long a request head inside a tunnel
	// may take to arrive; innerIdleTimeout how long a tunnel may sit idle
	// between requests.
	innerHeaderTimeout = 30 * time.Second
	innerIdleTimeout   = 5 * time.Minute
)

// connectOK is the proxy's answer to a CONNECT it accepts. The proxy
// writes it itself: with ConnectHijack, goproxy hands the connection over
// without writing to it (TestGoproxyConnectContract checks that).
const connectOK = "HTTP/1.1 200 OK\r\n\r\n"

// hijackTunnel is the goproxy action for an accepted CONNECT: goproxy
// hands over the client connection and the proxy serves it itself (see
// acceptTunnel), instead of goproxy's own interception loop, which reads
// request heads without a limit and without a timeout.
func (p *Proxy) hijackTunnel(t *target) *goproxy.ConnectAction {
	return &goproxy.ConnectAction{Action: goproxy.ConnectHijack, Hijack: func(_ *http.Request, client net.Conn, _ *goproxy.ProxyCtx) {
		p.acceptTunnel(client, t)
	}}
}

// acceptTunnel answers an accepted CONNECT and serves the tunnel.
func (p *Proxy) acceptTunnel(conn net.Conn, t *target) {
	if _, err := io.WriteString(conn, connectOK); err != nil {
		_ = conn.Close()
		return
	}
	p.serveTunnel(conn, t)
}

// serveTunnel is where both ways in end: a CONNECT the proxy accepted
// (acceptTunnel) and a connection iptables redirected to it
// (ServeTransparentConn). It intercepts TLS with a leaf for the tunnel's
// host (or speaks plain HTTP when the client does), and serves the
// requests inside with net/http's server: request heads capped at
// maxHeaderBytes (431 beyond), a header timeout, an idle timeout. Each
// request goes through serveRequest to the tunnel's own host. It closes
// conn when the tunnel is over.
func (p *Proxy) serveTunnel(conn net.Conn, t *target) {
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(tunnelHandshakeTimeout))
	var first [1]byte
	if _, err := io.ReadFull(conn, first[:]); err != nil {
		return
	}
	inner := net.Conn(&prefixedConn{Conn: conn, r: io.MultiReader(bytes.NewReader(first[:]), conn)})
	scheme := "http"
	if first[0] == 0x16 { // a TLS handshake record
		cfg, err := p.tlsConfig(t.hostport())
		if err != nil {
			p.log.Info("tunnel", "run", t.run.id, "host", t.hostport(), "err", err.Error())
			return
		}
		tc := tls.Server(inner, cfg)
		if err := tc.Handshake(); err != nil {
			p.log.Debug("tunnel handshake", "run", t.run.id, "host", t.hostport(), "err", err.Error())
			return
		}
		inner, scheme = tc, "https"
	}
	_ = conn.SetReadDeadline(time.Time{})

	l := &tunnelListener{conn: inner, done: make(chan struct{})}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			tt := *t
			tt.scheme = scheme
			p.serveRequest(w, r, &tt)
		}),
		MaxHeaderBytes:    maxHeaderBytes,
		ReadHeaderTimeout: innerHeaderTimeout,
		IdleTimeout:       innerIdleTimeout,
		// HTTP/1.1 only: the leaf offers no other protocol.
		TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){},
		ErrorLog:     slog.NewLogLogger(p.log.Handler(), slog.LevelDebug),
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateClosed || s == http.StateHijacked {
				l.Close()
			}
		},
	}
	_ = srv.Serve(l)
}

// serveRequest runs one request of a run through the proxy, within the
// run's cap on requests in flight, and writes the answer.
func (p *Proxy) serveRequest(w http.ResponseWriter, r *http.Request, t *target) {
	if t.run != p.transparent {
		if !t.run.startRequest(p.maxRequests()) {
			p.tooManyRequests(w, r, t)
			return
		}
		defer t.run.endRequest()
	}
	resp := p.forward(r, t)
	writeResponse(w, r, resp)
}

// writeResponse sends resp to the client as it is, flushing every read so
// server-sent events and chunked responses arrive as they come. Trailers
// are not passed on.
func writeResponse(w http.ResponseWriter, r *http.Request, resp *http.Response) {
	defer resp.Body.Close()
	if resp.StatusCode < 200 {
		// Upgrades are never asked for (Upgrade is a hop-by-hop header), so
		// a 101 is an upstream forcing one: nothing the proxy can rewrite.
		h := w.Header()
		h.Set("Content-Type", "text/plain; charset=utf-8")
		h.Set(errorHeader, "cannot_rewrite")
		w.WriteHeader(http.StatusBadGateway)
		_, _ = fmt.Fprintf(w, "codeforge proxy: the upstream answered %d (a protocol switch), which the proxy does not pass on\n", resp.StatusCode)
		return
	}
	h := w.Header()
	for k, vs := range resp.Header {
		h[k] = vs
	}
	if _, ok := h["Content-Type"]; !ok {
		h["Content-Type"] = nil // pass the upstream's headers as they are: no sniffing
	}
	if resp.ContentLength >= 0 && resp.Body != http.NoBody {
		h.Set("Content-Length", fmt.Sprint(resp.ContentLength))
	}
	w.WriteHeader(resp.StatusCode)
	if resp.Body == http.NoBody || r.Method == http.MethodHead {
		return
	}
	rc := http.NewResponseController(w)
	buf := make([]byte, 32<<10)
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				panic(http.ErrAbortHandler)
			}
			_ = rc.Flush()
		}
		if rerr == io.EOF {
			return
		}
		if rerr != nil {
			// Abort the connection so the client sees a broken body, not a
			// complete one.
			panic(http.ErrAbortHandler)
		}
	}
}

// tunnelListener hands one connection to an http.Server, then blocks
// until it is closed, so Serve returns once the tunnel is over.
type tunnelListener struct {
	conn      net.Conn
	taken     bool
	mu        sync.Mutex
	done      chan struct{}
	closeOnce sync.Once
}

func (l *tunnelListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	taken := l.taken
	l.taken = true
	l.mu.Unlock()
	if !taken {
		return l.conn, nil
	}
	<-l.done
	return nil, net.ErrClosed
}

func (l *tunnelListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return nil
}

func (l *tunnelListener) Addr() net.Addr { return l.conn.LocalAddr() }

// prefixedConn reads from r (bytes already read from the connection, then
// the connection) and writes to the connection.
type prefixedConn struct {
	net.Conn
	r io.Reader
}

func (c *prefixedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// bufferedHijacker keeps the bytes net/http buffered after a CONNECT head
// (a client may send its TLS ClientHello without waiting for the 200):
// the hijacked connection replays them first.
type bufferedHijacker struct{ http.ResponseWriter }

func (h bufferedHijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	hj, ok := h.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("proxy: connection cannot be hijacked")
	}
	c, rw, err := hj.Hijack()
	if err != nil {
		return nil, nil, err
	}
	if rw.Reader.Buffered() > 0 {
		c = &prefixedConn{Conn: c, r: rw.Reader}
	}
	return c, bufio.NewReadWriter(bufio.NewReader(strings.NewReader("")), bufio.NewWriter(c)), nil
}
