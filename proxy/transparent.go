package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"time"
)

// peekTimeout bounds how long a redirected connection may take to send its
// ClientHello or request head.
const peekTimeout = 15 * time.Second

// ServeTransparentConn serves one connection that iptables redirected to
// the proxy; origDst is where the sandbox meant to go. The proxy reads the
// TLS server name (or, for plain HTTP, the Host header), checks that the
// name resolves to origDst's address, and then serves the connection as a
// tunnel to name:origDst.Port() with the code an accepted CONNECT ends in
// (serveTunnel), dialling only origDst's address. goproxy is not involved:
// no CONNECT is forged and nothing is written before the client's own
// bytes are answered. Such connections carry the "transparent" identity: every active
// API, logged under run id "transparent" (see TransparentLog).
func (p *Proxy) ServeTransparentConn(conn net.Conn, origDst netip.AddrPort) {
	tc := &trackedConn{Conn: conn, p: p}
	if !p.track(tc) {
		_ = conn.Close()
		return
	}
	_ = conn.SetReadDeadline(time.Now().Add(peekTimeout))
	br := bufio.NewReaderSize(conn, 16<<10)
	first, err := br.Peek(1)
	if err != nil {
		_ = tc.Close()
		return
	}
	// The peek reads at most one capped request head (a ClientHello is far
	// smaller), so the recording is bounded too.
	rec := &recorder{r: &headLimit{r: br, left: maxHeaderBytes}}
	var name string
	isTLS := first[0] == 0x16 // TLS handshake record
	if isTLS {
		name, err = peekSNI(rec)
	} else {
		name, err = peekHost(rec)
	}
	_ = conn.SetReadDeadline(time.Time{})
	log := p.log.With("run", p.transparent.id, "dst", origDst.String())
	if errors.Is(err, errHeadTooLarge) {
		log.Info("req", "status", http.StatusRequestHeaderFieldsTooLarge, "blocked", "head_too_large")
		if !isTLS {
			resp := textResponse(nil, http.StatusRequestHeaderFieldsTooLarge, "head_too_large", "codeforge proxy: request head over 1 MiB")
			resp.Close = true
			_ = resp.Write(tc)
		}
		_ = tc.Close()
		return
	}
	if err != nil {
		log.Info("req", "status", 0, "blocked", "unreadable", "err", err.Error())
		_ = tc.Close()
		return
	}
	host, _, err := splitTarget(name, fmt.Sprint(origDst.Port()))
	if err == nil {
		err = p.checkNameMatches(host, origDst.Addr())
	}
	if err != nil {
		log.Info("req", "host", name, "status", http.StatusMisdirectedRequest, "blocked", "name_mismatch", "err", err.Error())
		if !isTLS {
			resp := textResponse(nil, http.StatusMisdirectedRequest, "name_mismatch", "codeforge proxy: "+err.Error())
			_ = resp.Write(tc)
		}
		_ = tc.Close()
		return
	}
	t := &target{run: p.transparent, host: host, port: fmt.Sprint(origDst.Port()), pinned: []netip.Addr{origDst.Addr().Unmap()}}
	// The client sent no CONNECT, so none is answered: the tunnel starts
	// with the bytes the peek read, then the rest of the connection.
	p.serveTunnel(&prefixedConn{Conn: tc, r: io.MultiReader(bytes.NewReader(rec.buf.Bytes()), br)}, t)
}

// checkNameMatches refuses a server name that does not resolve to the
// address the sandbox actually connected to, so a forged SNI or Host cannot
// route the connection (and a credential) somewhere else.
func (p *Proxy) checkNameMatches(host string, dst netip.Addr) error {
	dst = dst.Unmap()
	if ip, err := netip.ParseAddr(host); err == nil {
		if ip.Unmap() == dst {
			return nil
		}
		return fmt.Errorf("the connection went to %s but names %s", dst, host)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	addrs, err := p.resolve(ctx, host)
	if err != nil {
		return fmt.Errorf("resolve %s: %w", host, err)
	}
	for _, a := range addrs {
		if a.Unmap() == dst {
			return nil
		}
	}
	return fmt.Errorf("the connection went to %s, which is not an address of %s", dst, host)
}

// recorder keeps every byte read through it, so the peeked start of a
// connection can be replayed.
type recorder struct {
	r   io.Reader
	buf bytes.Buffer
}

func (r *recorder) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.buf.Write(p[:n])
	return n, err
}

var errPeeked = errors.New("client hello read")

// peekSNI reads a TLS ClientHello and returns its server name.
func peekSNI(r io.Reader) (string, error) {
	var name string
	var seen bool
	cfg := &tls.Config{GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		name, seen = h.ServerName, true
		return nil, errPeeked
	}}
	err := tls.Server(readOnlyConn{r: r}, cfg).Handshake()
	if !seen {
		return "", fmt.Errorf("read TLS client hello: %w", err)
	}
	if name == "" {
		return "", errors.New("TLS client hello without a server name (SNI)")
	}
	return name, nil
}

// peekHost reads a plain HTTP request head and returns its Host.
func peekHost(r io.Reader) (string, error) {
	req, err := http.ReadRequest(bufio.NewReader(r))
	if err != nil {
		return "", fmt.Errorf("read HTTP request: %w", err)
	}
	if req.Host == "" {
		return "", errors.New("HTTP request without a Host header")
	}
	return req.Host, nil
}

// readOnlyConn feeds a TLS server the recorded bytes and drops its replies
// (the alert it sends when the peek stops the handshake).
type readOnlyConn struct {
	net.Conn
	r io.Reader
}

func (c readOnlyConn) Read(p []byte) (int, error)  { return c.r.Read(p) }
func (c readOnlyConn) Write(p []byte) (int, error) { return len(p), nil }
func (c readOnlyConn) Close() error                { return nil }
func (c readOnlyConn) LocalAddr() net.Addr         { return &net.TCPAddr{} }
func (c readOnlyConn) RemoteAddr() net.Addr        { return &net.TCPAddr{} }
func (c readOnlyConn) SetDeadline(time.Time) error { return nil }
func (c readOnlyConn) SetReadDeadline(time.Time) error {
	return nil
}
func (c readOnlyConn) SetWriteDeadline(time.Time) error { return nil }
