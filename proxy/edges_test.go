package proxy

import (
	"bufio"
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/codeforge/codeforge/settings"
)

// These tests pin the edges of what SECURITY.md promises, each found by
// breaking the code on purpose (mutation testing, see docs/MUTATION.md)
// and seeing no test fail.

// TestUpstreamTLSBelow12Refused: an upstream that speaks only TLS 1.0 or
// 1.1 gets no request (and so no credential), although a client that
// allows those versions reaches it.
func TestUpstreamTLSBelow12Refused(t *testing.T) {
	t.Parallel()
	tp := startProxy(t)
	for _, v := range []uint16{tls.VersionTLS10, tls.VersionTLS11} {
		old := oldTLSUpstream(t, v)
		// Control: the upstream really answers a client that allows old TLS.
		checkOldTLSReachable(t, old, v)

		_, c := tp.open(t)
		resp, body := do(t, c, "GET", old.url("api.test", "/v1"), nil, map[string]string{"Authorization": "Bearer ALPHA_TOKEN"})
		if resp.StatusCode != http.StatusBadGateway {
			t.Errorf("%s upstream: status %d, want 502: %s", tls.VersionName(v), resp.StatusCode, body)
		}
		mustNotContain(t, "502 body", body, alphaSecret)
		if n := len(old.seen()); n != 0 {
			t.Errorf("%s upstream got %d requests; the proxy must refuse anything below TLS 1.2", tls.VersionName(v), n)
		}
	}
}

// oldTLSUpstream is a loopback upstream that speaks TLS v and nothing newer.
func oldTLSUpstream(t *testing.T, v uint16) *upstream {
	t.Helper()
	return startUpstreamTLS(t, nil, &tls.Config{
		Certificates: []tls.Certificate{testPKI(t).leaf},
		MinVersion:   tls.VersionTLS10,
		MaxVersion:   v,
	})
}

// startUpstreamTLS is startUpstream with a TLS config of the test's
// choosing; it records requests the same way.
func startUpstreamTLS(t *testing.T, h http.HandlerFunc, cfg *tls.Config) *upstream {
	t.Helper()
	u := &upstream{}
	u.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 4<<20))
		u.mu.Lock()
		u.reqs = append(u.reqs, seenRequest{Method: r.Method, Host: r.Host, URI: r.RequestURI, Header: r.Header.Clone(), Body: string(body)})
		u.mu.Unlock()
		r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(body), r.Body))
		if h != nil {
			h(w, r)
		}
	}))
	u.srv.TLS = cfg
	u.srv.StartTLS()
	t.Cleanup(u.srv.Close)
	_, u.port, _ = net.SplitHostPort(u.srv.Listener.Addr().String())
	return u
}

func checkOldTLSReachable(t *testing.T, u *upstream, v uint16) {
	t.Helper()
	conn, err := tls.Dial("tcp", "127.0.0.1:"+u.port, &tls.Config{
		RootCAs: testPKI(t).ca.Pool(), ServerName: "api.test",
		MinVersion: tls.VersionTLS10, MaxVersion: v,
	})
	if err != nil {
		t.Fatalf("control: a %s client cannot reach the %s upstream, so the test proves nothing: %v", tls.VersionName(v), tls.VersionName(v), err)
	}
	defer conn.Close()
	if got := conn.ConnectionState().Version; got != v {
		t.Fatalf("control: negotiated %s, want %s", tls.VersionName(got), tls.VersionName(v))
	}
}

// TestSandboxTLSBelow12Refused: inside a tunnel the proxy's own TLS server
// also refuses anything below TLS 1.2.
func TestSandboxTLSBelow12Refused(t *testing.T) {
	t.Parallel()
	tp := startProxy(t)
	up := newUpstream(t, nil)
	r, _ := tp.open(t)
	pool := x509.NewCertPool()
	pool.AddCert(tp.ca.Certificate())
	for _, v := range []uint16{tls.VersionTLS11, tls.VersionTLS12} {
		c, br := connectOnly(t, tp, r, "api.test:"+up.port)
		tc := tls.Client(&bufConn{Conn: c, r: br}, &tls.Config{ServerName: "api.test", RootCAs: pool, MinVersion: tls.VersionTLS10, MaxVersion: v})
		err := tc.Handshake()
		if v < tls.VersionTLS12 && err == nil {
			t.Errorf("a %s client completed a handshake with the proxy", tls.VersionName(v))
		}
		if v == tls.VersionTLS12 && err != nil {
			t.Errorf("control: a TLS 1.2 client cannot talk to the proxy: %v", err)
		}
		c.Close()
	}
}

// connectOnly opens a CONNECT tunnel with the run's identity and returns
// the raw connection, before any TLS.
func connectOnly(t *testing.T, tp *testProxy, r Run, hostport string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", tp.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	u, _ := url.Parse(r.ProxyURL())
	pass, _ := u.User.Password()
	auth := base64.StdEncoding.EncodeToString([]byte(u.User.Username() + ":" + pass))
	if _, err := io.WriteString(c, "CONNECT "+hostport+" HTTP/1.1\r\nHost: "+hostport+"\r\nProxy-Authorization: Basic "+auth+"\r\n\r\n"); err != nil {
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
	return c, br
}

// TestMethodOverrideSpellings: every way of writing an override that a
// framework might read — several header lines, comma lists, spaces and
// tabs, several _method parameters with the restricted one first or
// later, in the query and in a form body — is refused; the same shapes
// naming only allowed methods pass.
func TestMethodOverrideSpellings(t *testing.T) {
	t.Parallel()
	tp := startProxy(t)
	up := newUpstream(t, nil)
	_, c := tp.open(t)
	const form = "application/x-www-form-urlencoded"
	type header struct{ k, v string }
	cases := []struct {
		name    string
		query   string
		headers []header
		body    string // a URL-encoded form when not empty
	}{
		{"two header lines, restricted second", "", []header{{"X-HTTP-Method-Override", "GET"}, {"X-HTTP-Method-Override", "DELETE"}}, ""},
		{"two header lines, restricted first", "", []header{{"X-HTTP-Method-Override", "DELETE"}, {"X-HTTP-Method-Override", "GET"}}, ""},
		{"comma list", "", []header{{"X-HTTP-Method-Override", "GET,DELETE"}}, ""},
		{"comma list with space", "", []header{{"X-HTTP-Method", "GET, DELETE"}}, ""},
		{"comma list with tab", "", []header{{"X-Method-Override", "GET,\tput"}}, ""},
		{"space before comma", "", []header{{"X-HTTP-Method-Override", "Delete , GET"}}, ""},
		{"two override headers", "", []header{{"X-HTTP-Method", "GET"}, {"X-Method-Override", "PUT"}}, ""},
		{"_method twice, restricted later", "?_method=GET&_method=DELETE", nil, ""},
		{"_method twice, restricted first", "?_method=DELETE&_method=GET", nil, ""},
		{"_method padded with spaces", "?_method=%20DELETE%20", nil, ""},
		{"_method padded with plus", "?_method=+put+", nil, ""},
		{"_method key padded", "?%20_method=DELETE", nil, ""},
		{"_method key upper case", "?_METHOD=DELETE", nil, ""},
		{"form _method twice, restricted later", "", nil, "a=1&_method=GET&_method=DELETE"},
		{"form _method twice, restricted first", "", nil, "_method=delete&_method=GET&a=1"},
		{"form _method padded", "", nil, "_method=%09DELETE"},
		{"allowed in query, restricted in form", "?_method=GET", nil, "_method=DELETE"},
	}
	send := func(query string, headers []header, body string) (*http.Response, string) {
		t.Helper()
		var rd io.Reader = strings.NewReader("{}")
		if body != "" {
			rd = strings.NewReader(body)
		}
		req, err := http.NewRequest("POST", up.url("api.test", "/v1/x"+query), rd)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range headers {
			req.Header.Add(h.k, h.v)
		}
		if body != "" {
			req.Header.Set("Content-Type", form)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	for _, tc := range cases {
		resp, body := send(tc.query, tc.headers, tc.body)
		if resp.StatusCode != http.StatusForbidden || resp.Header.Get(errorHeader) != "method_restricted" {
			t.Errorf("%s: status %d (%s), want 403 method_restricted: %s", tc.name, resp.StatusCode, resp.Header.Get(errorHeader), body)
			continue
		}
		mustContain(t, tc.name, body, "permanent")
	}
	if n := len(up.seen()); n != 0 {
		t.Fatalf("upstream saw %d requests with a restricted override: %+v", n, up.seen())
	}
	// Controls: the same shapes with allowed methods only reach the API,
	// so the refusals above are about the restricted method.
	controls := []struct {
		name    string
		query   string
		headers []header
		body    string
	}{
		{"two allowed header lines", "", []header{{"X-HTTP-Method-Override", "GET"}, {"X-HTTP-Method-Override", "PATCH"}}, ""},
		{"allowed comma list", "", []header{{"X-HTTP-Method", "GET, PATCH"}}, ""},
		{"allowed _method twice", "?_method=GET&_method=PATCH", nil, ""},
		{"allowed form _method", "", nil, "_method=get&_method=PATCH&x=DELETE"},
		{"other parameter named like it", "?x_method=DELETE&_methods=PUT", nil, ""},
	}
	for _, tc := range controls {
		if resp, body := send(tc.query, tc.headers, tc.body); resp.StatusCode != http.StatusOK {
			t.Errorf("control %s: status %d, want 200: %s", tc.name, resp.StatusCode, body)
		}
	}
	if n := len(up.seen()); n != len(controls) {
		t.Errorf("upstream saw %d requests, want the %d controls", n, len(controls))
	}
}

// TestSwitchingProtocolsRefused: an API host that answers 101 (a
// WebSocket upgrade) gets the client a 502 instead, because the proxy
// cannot rewrite the stream that would follow; the client's upgrade
// headers never reach the upstream, and nothing the upstream sends after
// the 101 reaches the client.
func TestSwitchingProtocolsRefused(t *testing.T) {
	t.Parallel()
	tp := startProxy(t)
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		defer conn.Close()
		_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
			"Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\nX-Echo: " + alphaSecret + "\r\n\r\nstream " + alphaSecret + "\n")
		_ = brw.Flush()
	})
	r, _ := tp.open(t)
	host := "api.test:" + up.port
	conn, br := tp.tunnel(t, r, host, "api.test")
	resp, body := rawRoundTrip(t, conn, br, "GET /ws HTTP/1.1\r\nHost: "+host+"\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"+
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nAuthorization: Bearer ALPHA_TOKEN\r\n\r\n")
	if resp.StatusCode != http.StatusBadGateway || resp.Header.Get(errorHeader) != "cannot_rewrite" {
		t.Fatalf("101 from an API host: status %d (%s), want 502 cannot_rewrite: %s", resp.StatusCode, resp.Header.Get(errorHeader), body)
	}
	mustContain(t, "502 body", body, "switched protocols")
	mustNotContain(t, "502 answer", headerText(resp.Header)+body, alphaSecret)
	// The tunnel is still usable and nothing of the upgraded stream leaks
	// into the next answer.
	if rest, _ := br.Peek(br.Buffered()); bytes.Contains(rest, []byte(alphaSecret)) {
		t.Errorf("bytes after the 101 reached the client: %q", rest)
	}
	seen := up.seen()
	if len(seen) != 1 {
		t.Fatalf("upstream saw %d requests, want 1", len(seen))
	}
	if h := seen[0].Header; h.Get("Upgrade") != "" || strings.Contains(strings.ToLower(h.Get("Connection")), "upgrade") {
		t.Errorf("the client's upgrade request reached the upstream: Upgrade %q, Connection %q", h.Get("Upgrade"), h.Get("Connection"))
	}
}

// TestFormPeekCap: the proxy reads a URL-encoded form to an API with
// restricted methods up to maxBodyPeek bytes to find _method. A form of
// exactly that size is checked whole (a _method at its very end is
// found); a larger one is refused with 413 rather than passed on
// unchecked. An API without restricted methods gets any size.
func TestFormPeekCap(t *testing.T) {
	t.Parallel()
	tp := startProxy(t)
	up := startUpstreamTLS(t, nil, &tls.Config{Certificates: []tls.Certificate{testPKI(t).leaf}})
	_, c := tp.open(t)
	hdr := map[string]string{"Content-Type": "application/x-www-form-urlencoded"}
	tail := "&_method=DELETE"
	pad := func(n int) string { return "a=" + strings.Repeat("x", n-len("a=")) }

	atCap := pad(maxBodyPeek-len(tail)) + tail
	if len(atCap) != maxBodyPeek {
		t.Fatalf("test bug: %d bytes", len(atCap))
	}
	resp, body := do(t, c, "POST", up.url("api.test", "/v1/form"), strings.NewReader(atCap), hdr)
	if resp.StatusCode != http.StatusForbidden || resp.Header.Get(errorHeader) != "method_restricted" {
		t.Errorf("form of exactly %d bytes ending in _method=DELETE: status %d (%s), want 403 method_restricted: %.200s",
			maxBodyPeek, resp.StatusCode, resp.Header.Get(errorHeader), body)
	}
	overCap := pad(maxBodyPeek) + tail
	resp, body = do(t, c, "POST", up.url("api.test", "/v1/form"), strings.NewReader(overCap), hdr)
	if resp.StatusCode != http.StatusRequestEntityTooLarge || resp.Header.Get(errorHeader) != "body_too_large" {
		t.Errorf("form over %d bytes with a late _method=DELETE: status %d (%s), want 413 body_too_large: %.200s",
			maxBodyPeek, resp.StatusCode, resp.Header.Get(errorHeader), body)
	}
	mustContain(t, "413 body", body, "_method", "restricted_methods")
	oneOver := pad(maxBodyPeek + 1)
	if resp, _ := do(t, c, "POST", up.url("api.test", "/v1/form"), strings.NewReader(oneOver), hdr); resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("form of %d bytes without _method to an API with restricted methods: status %d, want 413", len(oneOver), resp.StatusCode)
	}
	if n := len(up.seen()); n != 0 {
		t.Fatalf("upstream saw %d requests", n)
	}
	// Controls: a form of exactly the cap without _method passes whole, and
	// so does a larger one to an API without restricted methods.
	plain := pad(maxBodyPeek-len("&k=ALPHA_TOKEN")) + "&k=ALPHA_TOKEN"
	if resp, body := do(t, c, "POST", up.url("api.test", "/v1/form"), strings.NewReader(plain), hdr); resp.StatusCode != http.StatusOK {
		t.Errorf("form of exactly %d bytes without _method: status %d: %.200s", maxBodyPeek, resp.StatusCode, body)
	}
	big := pad(2*maxBodyPeek) + tail
	if resp, body := do(t, c, "POST", up.url("beta.test", "/v1/form"), strings.NewReader(big), hdr); resp.StatusCode != http.StatusOK {
		t.Errorf("large form to an API without restricted methods: status %d: %.200s", resp.StatusCode, body)
	}
	seen := up.seen()
	if len(seen) != 2 {
		t.Fatalf("upstream saw %d requests, want the 2 controls", len(seen))
	}
	if want := strings.Replace(plain, "ALPHA_TOKEN", alphaSecret, 1); seen[0].Body != want {
		t.Errorf("form at the cap: upstream got %d bytes, want %d, substituted=%v", len(seen[0].Body), len(want), strings.Contains(seen[0].Body, alphaSecret))
	}
	if seen[1].Body != big {
		t.Errorf("large form to beta: upstream got %d bytes, want %d", len(seen[1].Body), len(big))
	}
}

// TestContentEncodingEdges: raw (non-zlib) deflate, stacked codings in one
// header or in several, in either order, upper case, identity and x-gzip
// are all decoded so the secret in them becomes its name; empty encoded
// bodies are fine; a stack with one coding the proxy cannot decode is
// refused.
func TestContentEncodingEdges(t *testing.T) {
	t.Parallel()
	tp := startProxy(t)
	const plain = "value " + alphaSecret + " and " + alphaSecret2 + " end"
	const want = "value ALPHA_TOKEN and ALPHA_OTHER end"
	gz := func(b []byte) []byte {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		_, _ = zw.Write(b)
		_ = zw.Close()
		return buf.Bytes()
	}
	zl := func(b []byte) []byte {
		var buf bytes.Buffer
		zw := zlib.NewWriter(&buf)
		_, _ = zw.Write(b)
		_ = zw.Close()
		return buf.Bytes()
	}
	raw := func(b []byte) []byte {
		var buf bytes.Buffer
		zw, _ := flate.NewWriter(&buf, flate.BestCompression)
		_, _ = zw.Write(b)
		_ = zw.Close()
		return buf.Bytes()
	}
	p := []byte(plain)
	cases := []struct {
		name      string
		encodings []string // Content-Encoding header lines
		body      []byte
		want      string
	}{
		{"raw deflate", []string{"deflate"}, raw(p), want},
		{"zlib deflate", []string{"deflate"}, zl(p), want},
		{"gzip then deflate", []string{"gzip, deflate"}, zl(gz(p)), want},
		{"deflate then gzip", []string{"deflate,gzip"}, gz(zl(p)), want},
		{"raw deflate then gzip", []string{"deflate", "gzip"}, gz(raw(p)), want},
		{"gzip twice", []string{"gzip", "gzip"}, gz(gz(p)), want},
		{"two header lines", []string{"gzip", "deflate"}, zl(gz(p)), want},
		{"upper case", []string{"GZIP"}, gz(p), want},
		{"identity and x-gzip", []string{"identity, x-gzip"}, gz(p), want},
		{"empty gzip", []string{"gzip"}, nil, ""},
		{"empty deflate", []string{"deflate"}, nil, ""},
	}
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/gzip-br":
			w.Header().Set("Content-Encoding", "gzip, br")
			_, _ = w.Write(gz(p))
			return
		}
		i, err := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/case/"))
		if err != nil || i < 0 || i >= len(cases) {
			http.Error(w, "no such case", http.StatusNotFound)
			return
		}
		tc := cases[i]
		for _, e := range tc.encodings {
			w.Header().Add("Content-Encoding", e)
		}
		_, _ = w.Write(tc.body)
	})
	_, c := tp.open(t)
	for i, tc := range cases {
		resp, body := do(t, c, "GET", up.url("api.test", "/case/"+strconv.Itoa(i)), nil, nil)
		if resp.StatusCode != http.StatusOK || body != tc.want {
			t.Errorf("%s: status %d body %q, want 200 %q", tc.name, resp.StatusCode, body, tc.want)
		}
		if ce := resp.Header.Values("Content-Encoding"); len(ce) != 0 {
			t.Errorf("%s: Content-Encoding %q passed on with a decoded body", tc.name, ce)
		}
	}
	resp, body := do(t, c, "GET", up.url("api.test", "/gzip-br"), nil, nil)
	if resp.StatusCode != http.StatusBadGateway || resp.Header.Get(errorHeader) != "cannot_rewrite" {
		t.Errorf("gzip, br: status %d (%s), want 502 cannot_rewrite", resp.StatusCode, resp.Header.Get(errorHeader))
	}
	mustNotContain(t, "gzip, br", body, alphaSecret)
}

// TestPlacementEdges pins what mutation testing of placement.go found
// unpinned: only a Basic Authorization header is decoded to substitute
// inside it (not a Bearer one that happens to be base64, not another
// header, not at another API's or an unconfigured host), and an escaped
// path reaches the API byte for byte.
func TestPlacementEdges(t *testing.T) {
	t.Parallel()
	tp := startProxy(t, withSettings(settings.Common{YOLO: true}))
	up := newUpstream(t, nil)
	_, c := tp.open(t)
	b64 := base64.StdEncoding.EncodeToString([]byte("ALPHA_TOKEN:"))
	wantBasic := "Basic " + base64.StdEncoding.EncodeToString([]byte(alphaSecret+":"))
	cases := []struct {
		name, host, header, value, want string
	}{
		{"Basic in Authorization (control)", "api.test", "Authorization", "Basic " + b64, wantBasic},
		{"Bearer that is base64", "api.test", "Authorization", "Bearer " + b64, "Bearer " + b64},
		{"Basic in another header", "api.test", "X-Forward-Auth", "Basic " + b64, "Basic " + b64},
		{"Basic at another API's host", "beta.test", "Authorization", "Basic " + b64, "Basic " + b64},
		{"Basic at an unconfigured host", "other.test", "Authorization", "Basic " + b64, "Basic " + b64},
	}
	for i, tc := range cases {
		resp, body := do(t, c, "GET", up.url(tc.host, "/p"+strconv.Itoa(i)), nil, map[string]string{tc.header: tc.value})
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s: status %d: %s", tc.name, resp.StatusCode, body)
			continue
		}
		var got string
		for _, s := range up.seen() {
			if s.URI == "/p"+strconv.Itoa(i) {
				got = s.Header.Get(tc.header)
			}
		}
		if got != tc.want {
			t.Errorf("%s: upstream got %s: %q, want %q", tc.name, tc.header, got, tc.want)
		}
	}
	const escaped = "/v1/files/a%2Fb%3Bc%25d%20e"
	if resp, body := do(t, c, "GET", up.url("api.test", escaped), nil, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("escaped path: status %d: %s", resp.StatusCode, body)
	}
	seen := up.seen()
	if got := seen[len(seen)-1].URI; got != escaped {
		t.Errorf("escaped path reached the API as %q, want %q byte for byte", got, escaped)
	}
}

// TestRedactionIsLoggedWhenItHappens: a request whose header or URL had a
// REDACTING_STRINGS value replaced gets one "redact" line saying where and
// how many; a request with nothing to redact gets none.
func TestRedactionIsLoggedWhenItHappens(t *testing.T) {
	t.Parallel()
	tp := startProxy(t, withSettings(settings.Common{RedactingStrings: []string{"jane@example.org"}}))
	up := newUpstream(t, nil)
	_, c := tp.open(t)
	do(t, c, "GET", up.url("api.test", "/clean"), nil, map[string]string{"X-Mail": "nobody"})
	if logs := tp.log.String(); strings.Contains(logs, "msg=redact") {
		t.Errorf("a request with nothing to redact logged a redact line:\n%s", logs)
	}
	do(t, c, "GET", up.url("api.test", "/u?m=jane@example.org"), nil, map[string]string{"X-Mail": "jane@example.org"})
	logs := tp.log.String()
	if !strings.Contains(logs, "msg=redact") || !strings.Contains(logs, `where=header+url count=2`) {
		t.Errorf("the log lacks the redact line for the header and the query (count=2):\n%s", logs)
	}
	if got := up.seen()[1].Header.Get("X-Mail"); got != "REDACTED" {
		t.Errorf("X-Mail upstream = %q", got)
	}
}
