package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/elazarl/goproxy"
)

// transparentFront accepts connections the way transparent.Serve would and
// hands each to ServeTransparentConn with dst as the original destination.
func transparentFront(t *testing.T, tp *testProxy, dst netip.AddrPort) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go tp.p.ServeTransparentConn(c, dst)
		}
	}()
	return l.Addr().String()
}

// redirectedClient connects every request to front, as iptables would.
func redirectedClient(t *testing.T, tp *testProxy, front string) *http.Client {
	pool := x509.NewCertPool()
	pool.AddCert(tp.ca.Certificate())
	tr := &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, front)
		},
		TLSClientConfig:    &tls.Config{RootCAs: pool},
		DisableCompression: true,
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

func TestServeTransparentConn(t *testing.T) {
	t.Parallel()
	tp := startProxy(t)
	echo := func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "auth="+r.Header.Get("Authorization"))
	}
	up := newUpstream(t, echo)
	plain := startUpstream(t, echo, false, testPKI(t).leaf)

	for _, u := range []*upstream{up, plain} {
		dst := netip.MustParseAddrPort(u.srv.Listener.Addr().String())
		c := redirectedClient(t, tp, transparentFront(t, tp, dst))
		resp, body := do(t, c, "GET", u.url("api.test", "/t?k=ALPHA_TOKEN"), nil, map[string]string{"Authorization": "Bearer ALPHA_TOKEN"})
		if u == plain {
			// Cleartext never carries a credential: refused, nothing sent.
			if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "only sent over HTTPS") {
				t.Errorf("%s: %d %q, want 403 (cleartext)", u.url("api.test", ""), resp.StatusCode, body)
			}
			resp, body = do(t, c, "GET", u.url("api.test", "/t"), nil, nil)
			if resp.StatusCode != 200 || body != "auth=" {
				t.Errorf("%s without a token: %d %q", u.url("api.test", ""), resp.StatusCode, body)
			}
		} else {
			if resp.StatusCode != 200 || body != "auth=Bearer ALPHA_TOKEN" {
				t.Errorf("%s: %d %q", u.url("api.test", ""), resp.StatusCode, body)
			}
			if s := u.seen(); len(s) != 1 || s[0].Header.Get("Authorization") != "Bearer "+alphaSecret {
				t.Errorf("upstream saw %+v", s)
			}
		}
		// Same connection, another Host: refused.
		resp, _ = do(t, c, "GET", u.url("other.test", "/"), nil, nil)
		if resp.StatusCode != http.StatusMisdirectedRequest && resp.StatusCode != http.StatusForbidden {
			t.Errorf("other host on a redirected connection: status %d", resp.StatusCode)
		}
		// A name that does not resolve to where the connection went: refused
		// before anything is read further or dialled.
		if resp, err := c.Get(u.url("far.test", "/")); err == nil {
			resp.Body.Close()
			if u == up || resp.StatusCode != http.StatusMisdirectedRequest {
				t.Errorf("far.test on a connection to %s: status %d", dst, resp.StatusCode)
			}
		}
		if n := len(u.seen()); n != 1 {
			t.Errorf("upstream saw %d requests, want 1", n)
		}
	}
	log := tp.p.TransparentLog()
	injected := 0
	for _, e := range log {
		if e.Injected && e.Status == 200 && strings.HasPrefix(e.Host, "api.test:") && e.Path == "/t" {
			injected++
		}
	}
	if injected != 1 {
		t.Errorf("transparent log = %+v", log)
	}
}

// TestTransparentIntakeBypassesGoproxy: a redirected connection goes
// straight to the proxy's own tunnel code, never through goproxy's CONNECT
// handling (a forged CONNECT would make transparent mode depend on what
// goproxy writes and when). With goproxy's CONNECT handler replaced by one
// that counts and refuses, transparent intake still works, over TLS and
// plain HTTP, and the handler is never called; an explicit CONNECT does
// reach it, so the count is live.
func TestTransparentIntakeBypassesGoproxy(t *testing.T) {
	t.Parallel()
	var connects atomic.Int32
	tp := startProxyWith(t, func(p *Proxy) {
		gp := goproxy.NewProxyHttpServer()
		gp.Logger = goproxyLogger{p}
		gp.OnRequest().HandleConnectFunc(func(host string, _ *goproxy.ProxyCtx) (*goproxy.ConnectAction, string) {
			connects.Add(1)
			return goproxy.RejectConnect, host
		})
		p.gp = gp
	})
	echo := func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "auth="+r.Header.Get("Authorization"))
	}
	up := newUpstream(t, echo)
	plain := startUpstream(t, echo, false, testPKI(t).leaf)

	for _, u := range []*upstream{up, plain} {
		dst := netip.MustParseAddrPort(u.srv.Listener.Addr().String())
		c := redirectedClient(t, tp, transparentFront(t, tp, dst))
		want, header := "auth=", map[string]string(nil)
		if u == up {
			want, header = "auth=Bearer "+alphaSecret, map[string]string{"Authorization": "Bearer ALPHA_TOKEN"}
		}
		resp, body := do(t, c, "GET", u.url("api.test", "/t"), nil, header)
		if resp.StatusCode != 200 || body != strings.ReplaceAll(want, alphaSecret, "ALPHA_TOKEN") {
			t.Errorf("%s through transparent intake: %d %q", u.url("api.test", "/t"), resp.StatusCode, body)
		}
		if s := u.seen(); len(s) != 1 || "auth="+s[0].Header.Get("Authorization") != want {
			t.Errorf("%s: upstream saw %+v", u.url("api.test", "/t"), s)
		}
	}
	if n := connects.Load(); n != 0 {
		t.Errorf("transparent intake went through goproxy's CONNECT handler %d times; want 0", n)
	}
	if n := len(tp.p.TransparentLog()); n != 2 {
		t.Errorf("transparent log has %d entries, want 2: %+v", n, tp.p.TransparentLog())
	}

	_, c := tp.open(t)
	if resp, err := c.Get(up.url("api.test", "/")); err == nil {
		resp.Body.Close()
		t.Errorf("explicit CONNECT with goproxy refusing: status %d, want a refused tunnel", resp.StatusCode)
	}
	if n := connects.Load(); n != 1 {
		t.Errorf("an explicit CONNECT reached goproxy's CONNECT handler %d times; want 1 (the replacement is not in use)", n)
	}
}
