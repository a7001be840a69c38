package proxy

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"testing"
	"time"
)

// firstWriteConn records the first write made to it.
type firstWriteConn struct {
	net.Conn
	first chan []byte
}

func (c *firstWriteConn) Write(p []byte) (int, error) {
	select {
	case c.first <- append([]byte(nil), p...):
	default:
	}
	return c.Conn.Write(p)
}

// TestGoproxyConnectReplyContract pins what transparent mode relies on in
// goproxy today: handed a forged, already hijacked CONNECT that it
// intercepts, goproxy's first write to the connection is the whole status
// line "HTTP/1.1 200 OK\r\n\r\n" in one Write, which replayConn swallows
// (the redirected client never sent a CONNECT). If a goproxy upgrade
// writes it another way (split, another line, through WriteHeader, or not
// at all), this test fails instead of transparent mode breaking silently.
func TestGoproxyConnectReplyContract(t *testing.T) {
	t.Parallel()
	tp := startProxy(t)
	proxySide, clientSide := net.Pipe()
	defer clientSide.Close()
	rec := &firstWriteConn{Conn: proxySide, first: make(chan []byte, 1)}
	hostport := "api.test:443"
	ctx := context.WithValue(context.Background(), runKey, tp.p.transparent)
	ctx = context.WithValue(ctx, pinnedKey, []netip.Addr{netip.MustParseAddr("127.0.0.1")})
	req := (&http.Request{
		Method: http.MethodConnect, URL: &url.URL{Host: hostport}, Host: hostport,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: http.Header{}, RemoteAddr: "127.0.0.1:1",
	}).WithContext(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tp.p.gp.ServeHTTP(&hijackWriter{conn: rec}, req)
	}()
	// net.Pipe is synchronous: read what goproxy writes so it can go on.
	go func() {
		buf := make([]byte, 4096)
		for {
			if _, err := clientSide.Read(buf); err != nil {
				return
			}
		}
	}()
	select {
	case first := <-rec.first:
		if string(first) != "HTTP/1.1 200 OK\r\n\r\n" {
			t.Fatalf("goproxy's first write to a hijacked CONNECT is %q; transparent mode's replayConn swallows exactly one "+
				"\"HTTP/1.x ...\" write: adapt proxy/transparent.go to the new goproxy before upgrading", first)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("goproxy wrote nothing to the hijacked CONNECT; transparent mode expects its 200 line")
	}
	clientSide.Close()
	proxySide.Close()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Error("goproxy did not return after the connection closed")
	}
}
