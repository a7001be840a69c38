package proxy

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// connectFirstConn is a client's side of a connection to the proxy: its
// first Write sends the CONNECT head together with what the TLS client
// writes (the ClientHello), the way clients that do not wait for the
// proxy's answer do; its first Read checks that the answer to the CONNECT
// is exactly want and that a TLS handshake record follows it.
type connectFirstConn struct {
	net.Conn
	head, want string
	br         *bufio.Reader
	sent, read bool
}

func (c *connectFirstConn) Write(p []byte) (int, error) {
	if c.sent {
		return c.Conn.Write(p)
	}
	c.sent = true
	if _, err := c.Conn.Write(append([]byte(c.head), p...)); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (c *connectFirstConn) Read(p []byte) (int, error) {
	if !c.read {
		c.read = true
		got := make([]byte, len(c.want))
		if n, err := io.ReadFull(c.br, got); err != nil {
			return 0, fmt.Errorf("answer to CONNECT: got %q, then %w", got[:n], err)
		}
		if string(got) != c.want {
			rest, _ := c.br.Peek(min(c.br.Buffered(), 64))
			return 0, fmt.Errorf("answer to CONNECT starts %q (then %q...); want exactly %q", got, rest, c.want)
		}
		next, err := c.br.Peek(1)
		if err != nil {
			return 0, fmt.Errorf("after the answer to CONNECT: %w", err)
		}
		if next[0] != 0x16 {
			rest, _ := c.br.Peek(min(c.br.Buffered(), 64))
			return 0, fmt.Errorf("after the answer to CONNECT came %q..., not a TLS handshake record", rest)
		}
	}
	return c.br.Read(p)
}

// TestGoproxyConnectContract pins what the explicit proxy relies on in
// goproxy, which still accepts CONNECT for it: handed a ConnectHijack
// action, goproxy writes nothing to the client and passes on the
// connection the proxy's Hijacker returned (with the bytes the client sent
// right after its CONNECT head), so the client sees exactly the proxy's
// own "HTTP/1.1 200 OK" and then the TLS handshake; and for a
// ConnectReject it writes the proxy's answer as it is. If a goproxy
// upgrade writes its own status line, writes anything more, or drops early
// bytes, this test fails instead of tunnels breaking in the field.
// (Transparent mode does not go through goproxy at all:
// TestTransparentIntakeBypassesGoproxy.)
func TestGoproxyConnectContract(t *testing.T) {
	t.Parallel()
	tp := startProxy(t)
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "through "+r.URL.Path)
	})
	r, _ := tp.open(t)
	auth := proxyAuth(t, r)

	t.Run("accept", func(t *testing.T) {
		t.Parallel()
		c, err := net.Dial("tcp", tp.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(time.Minute))
		hostport := "api.test:" + up.port
		cc := &connectFirstConn{
			Conn: c,
			head: "CONNECT " + hostport + " HTTP/1.1\r\nHost: " + hostport + "\r\n" + auth + "\r\n",
			want: "HTTP/1.1 200 OK\r\n\r\n",
			br:   bufio.NewReader(c),
		}
		pool := x509.NewCertPool()
		pool.AddCert(tp.ca.Certificate())
		tc := tls.Client(cc, &tls.Config{ServerName: "api.test", RootCAs: pool})
		if err := tc.Handshake(); err != nil {
			t.Fatalf("CONNECT with the ClientHello right behind it: %v", err)
		}
		resp, body := rawRoundTrip(t, tc, bufio.NewReader(tc), "GET /c HTTP/1.1\r\nHost: "+hostport+"\r\n\r\n")
		if resp.StatusCode != 200 || body != "through /c" {
			t.Errorf("request in the tunnel: %d %q", resp.StatusCode, body)
		}
	})

	t.Run("reject", func(t *testing.T) {
		t.Parallel()
		// Port 0 passes net/http but not the proxy: goproxy writes the
		// proxy's 400 for a ConnectReject.
		c, br, resp, err := rawConnect(t, tp.addr, auth, "api.test:0")
		if err != nil {
			t.Fatalf("CONNECT api.test:0: %v", err)
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusBadRequest || resp.Header.Get(errorHeader) != "bad_target" || !strings.Contains(string(body), "bad port") {
			t.Errorf("refused CONNECT: %d %s=%q %q; want 400 bad_target", resp.StatusCode, errorHeader, resp.Header.Get(errorHeader), body)
		}
		_ = c.SetReadDeadline(time.Now().Add(time.Minute))
		if rest, err := io.ReadAll(br); len(rest) > 0 || err != nil && !errors.Is(err, io.EOF) {
			t.Errorf("after the refusal: %q, %v; want the connection closed with nothing more", rest, err)
		}
	})
}
