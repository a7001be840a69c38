package proxy

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"encoding/base64"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/codeforge/codeforge/settings"
)

func TestSubstitutionOnTheWayOut(t *testing.T) {
	t.Parallel()
	tp := startProxy(t)
	up := newUpstream(t, nil)
	_, c := tp.open(t)

	// Header, query and a small body (kept with an exact Content-Length).
	resp, _ := do(t, c, "POST", up.url("api.test", "/v1/charges?key=ALPHA_TOKEN&other=ALPHA_OTHER&plain=1"),
		strings.NewReader(`{"token":"ALPHA_TOKEN","n":1}`),
		map[string]string{"Authorization": "Bearer ALPHA_TOKEN", "X-Both": "ALPHA_TOKEN/ALPHA_OTHER", "Content-Type": "application/json"})
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	// Basic credentials are substituted inside the base64 too.
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("ALPHA_TOKEN:"))
	do(t, c, "GET", up.url("api.test", "/basic"), nil, map[string]string{"Authorization": basic})
	// A large body of unknown length streams through, substituted.
	big := strings.Repeat("x", 200<<10) + "ALPHA_TOKEN" + strings.Repeat("y", 100)
	do(t, c, "POST", up.url("api.test", "/big"), io.MultiReader(strings.NewReader(big)), nil)

	seen := up.seen()
	if len(seen) != 3 {
		t.Fatalf("upstream saw %d requests, want 3", len(seen))
	}
	s := seen[0]
	if got := s.Header.Get("Authorization"); got != "Bearer "+alphaSecret {
		t.Errorf("Authorization upstream = %q, want the real value", got)
	}
	if got := s.Header.Get("X-Both"); got != alphaSecret+"/"+alphaSecret2 {
		t.Errorf("X-Both upstream = %q", got)
	}
	q, err := url.ParseQuery(strings.SplitN(s.URI, "?", 2)[1])
	if err != nil {
		t.Fatal(err)
	}
	if q.Get("key") != alphaSecret || q.Get("other") != alphaSecret2 || q.Get("plain") != "1" {
		t.Errorf("query upstream = %q", s.URI)
	}
	if s.Body != `{"token":"`+alphaSecret+`","n":1}` {
		t.Errorf("body upstream = %q", s.Body)
	}
	if got := s.Header.Get("Content-Length"); got != "" && got != strconv.Itoa(len(s.Body)) {
		t.Errorf("Content-Length upstream %s for a body of %d bytes", got, len(s.Body))
	}
	wantBasic := "Basic " + base64.StdEncoding.EncodeToString([]byte(alphaSecret+":"))
	if got := seen[1].Header.Get("Authorization"); got != wantBasic {
		t.Errorf("basic upstream = %q, want %q", got, wantBasic)
	}
	if want := strings.Replace(big, "ALPHA_TOKEN", alphaSecret, 1); seen[2].Body != want {
		t.Errorf("big body upstream: %d bytes, substituted=%v", len(seen[2].Body), strings.Contains(seen[2].Body, alphaSecret))
	}
	for _, s := range seen {
		mustNotContain(t, "upstream request", s.URI+s.Body+headerText(s.Header), "ALPHA_TOKEN", "ALPHA_OTHER")
	}
}

func headerText(h http.Header) string {
	var b strings.Builder
	_ = h.Write(&b)
	return b.String()
}

func TestReverseSubstitution(t *testing.T) {
	t.Parallel()
	tp := startProxy(t)
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		switch r.URL.Path {
		case "/headers":
			h.Set("X-Echo", "key="+alphaSecret)
			h.Set("Location", "https://api.test/next?key="+url.QueryEscape(alphaSecret2)+"&k2="+alphaSecret)
			h.Set("Set-Cookie", "session="+alphaSecret+"; Path=/")
			h.Set("WWW-Authenticate", `Bearer realm="`+alphaSecret+`"`)
			w.WriteHeader(http.StatusFound)
		case "/gzip":
			if !strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
				http.Error(w, "proxy did not ask for gzip: "+r.Header.Get("Accept-Encoding"), 400)
				return
			}
			h.Set("Content-Encoding", "gzip")
			zw := gzip.NewWriter(w)
			_, _ = io.WriteString(zw, "token is "+alphaSecret+" and "+alphaSecret2)
			_ = zw.Close()
		case "/deflate":
			h.Set("Content-Encoding", "deflate")
			zw := zlib.NewWriter(w)
			_, _ = io.WriteString(zw, "deflated "+alphaSecret)
			_ = zw.Close()
		case "/split":
			// Chunked, with the value split across two flushes.
			h.Set("Content-Type", "text/plain")
			half := len(alphaSecret) / 2
			_, _ = io.WriteString(w, "start "+alphaSecret[:half])
			w.(http.Flusher).Flush()
			_, _ = io.WriteString(w, alphaSecret[half:]+" end")
		}
	})
	_, c := tp.open(t)

	resp, _ := do(t, c, "GET", up.url("api.test", "/headers"), nil, nil)
	if resp.StatusCode != http.StatusFound {
		t.Fatalf("status %d, want 302 passed through (redirects are not followed)", resp.StatusCode)
	}
	checks := map[string]string{
		"X-Echo":           "key=ALPHA_TOKEN",
		"Location":         "https://api.test/next?key=ALPHA_OTHER&k2=ALPHA_TOKEN",
		"Set-Cookie":       "session=ALPHA_TOKEN; Path=/",
		"Www-Authenticate": `Bearer realm="ALPHA_TOKEN"`,
	}
	for k, want := range checks {
		if got := resp.Header.Get(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	mustNotContain(t, "response headers", headerText(resp.Header), alphaSecret, url.QueryEscape(alphaSecret2))

	resp, body := do(t, c, "GET", up.url("api.test", "/gzip"), nil, map[string]string{"Accept-Encoding": "br"})
	if body != "token is ALPHA_TOKEN and ALPHA_OTHER" {
		t.Errorf("gzip body = %q", body)
	}
	if ce := resp.Header.Get("Content-Encoding"); ce != "" {
		t.Errorf("Content-Encoding %q passed on for a decoded body", ce)
	}
	_, body = do(t, c, "GET", up.url("api.test", "/deflate"), nil, nil)
	if body != "deflated ALPHA_TOKEN" {
		t.Errorf("deflate body = %q", body)
	}
	_, body = do(t, c, "GET", up.url("api.test", "/split"), nil, nil)
	if body != "start ALPHA_TOKEN end" {
		t.Errorf("split body = %q", body)
	}
}

// TestReverseSubstitutionSplitAcrossReads holds the second half of a value
// back until the client has received everything before it, so the halves
// certainly reach the proxy in different reads.
func TestReverseSubstitutionSplitAcrossReads(t *testing.T) {
	t.Parallel()
	tp := startProxy(t)
	release := make(chan struct{})
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		half := len(alphaSecret) / 2
		_, _ = io.WriteString(w, "before\n"+alphaSecret[:half])
		w.(http.Flusher).Flush()
		<-release
		_, _ = io.WriteString(w, alphaSecret[half:]+" after")
	})
	_, c := tp.open(t)
	resp, err := c.Get(up.url("api.test", "/stream"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got := make([]byte, len("before\n"))
	if _, err := io.ReadFull(resp.Body, got); err != nil {
		t.Fatalf("first part did not stream through: %v", err)
	}
	close(release)
	rest, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if all := string(got) + string(rest); all != "before\nALPHA_TOKEN after" {
		t.Errorf("body = %q", all)
	}
}

func TestCredentialsStayWithTheirAPI(t *testing.T) {
	t.Parallel()
	for _, yolo := range []bool{false, true} {
		tp := startProxy(t, withSettings(settings.Common{YOLO: yolo}))
		up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
			// An unconfigured host's response is not rewritten.
			_, _ = io.WriteString(w, "echo "+r.Header.Get("Authorization"))
		})
		_, c := tp.open(t)
		// alpha's token sent to beta's host arrives unchanged.
		_, body := do(t, c, "POST", up.url("beta.test", "/x?k=ALPHA_TOKEN"), strings.NewReader("ALPHA_TOKEN"),
			map[string]string{"Authorization": "Bearer ALPHA_TOKEN BETA_KEY"})
		s := up.seen()[0]
		if got := s.Header.Get("Authorization"); got != "Bearer ALPHA_TOKEN "+betaSecret {
			t.Errorf("yolo=%v: Authorization at beta.test = %q, want alpha's name untouched and beta's value", yolo, got)
		}
		if s.URI != "/x?k=ALPHA_TOKEN" || s.Body != "ALPHA_TOKEN" {
			t.Errorf("yolo=%v: beta.test saw %q %q", yolo, s.URI, s.Body)
		}
		if body != "echo Bearer ALPHA_TOKEN BETA_KEY" {
			t.Errorf("yolo=%v: response = %q", yolo, body)
		}
		if !yolo {
			continue
		}
		// In YOLO mode an unconfigured host is reachable but gets nothing.
		resp, body := do(t, c, "POST", up.url("other.test", "/y?k=ALPHA_TOKEN"), strings.NewReader("BETA_KEY ALPHA_TOKEN"),
			map[string]string{"Authorization": "Bearer ALPHA_TOKEN"})
		if resp.StatusCode != 200 {
			t.Fatalf("YOLO other.test: status %d: %s", resp.StatusCode, body)
		}
		s = up.seen()[1]
		if s.Header.Get("Authorization") != "Bearer ALPHA_TOKEN" || s.URI != "/y?k=ALPHA_TOKEN" || s.Body != "BETA_KEY ALPHA_TOKEN" {
			t.Errorf("YOLO other.test saw %q %q %q", s.Header.Get("Authorization"), s.URI, s.Body)
		}
	}
}

func TestRunAllowlist(t *testing.T) {
	t.Parallel()
	tp := startProxy(t)
	up := newUpstream(t, nil)
	_, c := tp.open(t, "beta")
	resp, body := do(t, c, "GET", up.url("api.test", "/"), nil, map[string]string{"Authorization": "Bearer ALPHA_TOKEN"})
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("api.test from a beta-only run: status %d, want 403", resp.StatusCode)
	}
	mustContain(t, "403 body", body, `"alpha"`, "apis")
	if resp, _ := do(t, c, "GET", up.url("beta.test", "/"), nil, nil); resp.StatusCode != 200 {
		t.Errorf("beta.test: status %d", resp.StatusCode)
	}
	if n := len(up.seen()); n != 1 {
		t.Errorf("upstream saw %d requests, want only the beta one", n)
	}

	// With YOLO the host is reachable, but alpha's credential is not
	// substituted for a run that did not select alpha.
	ty := startProxy(t, withSettings(settings.Common{YOLO: true}))
	_, cy := ty.open(t, "beta")
	if resp, _ := do(t, cy, "GET", up.url("api.test", "/y"), nil, map[string]string{"Authorization": "Bearer ALPHA_TOKEN"}); resp.StatusCode != 200 {
		t.Fatalf("YOLO api.test: status %d", resp.StatusCode)
	}
	if got := up.seen()[1].Header.Get("Authorization"); got != "Bearer ALPHA_TOKEN" {
		t.Errorf("YOLO beta-only run: api.test got %q, want no substitution", got)
	}

	if _, err := tp.p.Open(t.Context(), RunSpec{APIs: []string{"gamma"}}); err == nil {
		t.Error("Open with an unknown API: no error")
	} else {
		mustContain(t, "Open error", err.Error(), "gamma", "alpha", "beta")
	}
}

func TestRedactionAndUserAgent(t *testing.T) {
	t.Parallel()
	tp := startProxy(t, withSettings(settings.Common{RedactingStrings: []string{"jane@example.org", "555-1234"}, UserAgent: "codeforge-test/1"}))
	up := newUpstream(t, nil)
	_, c := tp.open(t)
	do(t, c, "POST", up.url("other.test", "/u/jane@example.org?phone=555-1234"), strings.NewReader("mail jane@example.org"),
		map[string]string{"X-Contact": "jane@example.org", "User-Agent": "Deno/2"})
	// other.test is not configured, so the request is refused without YOLO;
	// redaction is checked against a configured host.
	do(t, c, "POST", up.url("api.test", "/u/jane@example.org?phone=555-1234&k=ALPHA_TOKEN"), strings.NewReader("mail jane@example.org ALPHA_TOKEN"),
		map[string]string{"X-Contact": "jane@example.org", "User-Agent": "Deno/2"})
	seen := up.seen()
	if len(seen) != 1 {
		t.Fatalf("upstream saw %d requests, want 1", len(seen))
	}
	s := seen[0]
	if s.URI != "/u/REDACTED?phone=REDACTED&k="+url.QueryEscape(alphaSecret) {
		t.Errorf("URI = %q", s.URI)
	}
	if s.Body != "mail REDACTED "+alphaSecret {
		t.Errorf("body = %q", s.Body)
	}
	if s.Header.Get("X-Contact") != "REDACTED" {
		t.Errorf("X-Contact = %q", s.Header.Get("X-Contact"))
	}
	if s.Header.Get("User-Agent") != "codeforge-test/1" {
		t.Errorf("User-Agent = %q", s.Header.Get("User-Agent"))
	}
}

func TestRestrictedMethods(t *testing.T) {
	t.Parallel()
	tp := startProxy(t)
	up := newUpstream(t, nil)
	_, c := tp.open(t)
	cases := []struct {
		name, method, path string
		header             map[string]string
	}{
		{"plain", "DELETE", "/v1/x", nil},
		{"plain lower-case config", "PUT", "/v1/x", nil},
		{"X-HTTP-Method-Override", "POST", "/v1/x", map[string]string{"X-HTTP-Method-Override": "DELETE"}},
		{"X-HTTP-Method", "POST", "/v1/x", map[string]string{"X-HTTP-Method": "delete"}},
		{"X-Method-Override", "POST", "/v1/x", map[string]string{"X-Method-Override": "Delete"}},
		{"_method query", "POST", "/v1/x?_method=DELETE", nil},
		{"_method query put", "GET", "/v1/x?a=1&_method=put", nil},
		{"_method after ;", "POST", "/v1/x?a=1;_method=DELETE", nil},
		{"_method escaped", "POST", "/v1/x?%5Fmethod=DEL%45TE", nil},
		{"_method form field", "POST", "/v1/x", map[string]string{"Content-Type": "application/x-www-form-urlencoded; charset=utf-8"}},
	}
	for _, tc := range cases {
		body := "{}"
		if tc.header["Content-Type"] != "" {
			body = "name=x&_method=delete"
		}
		resp, body := do(t, c, tc.method, up.url("api.test", tc.path), strings.NewReader(body), tc.header)
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s: status %d, want 403", tc.name, resp.StatusCode)
			continue
		}
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s: Content-Type %q", tc.name, ct)
		}
		mustContain(t, tc.name, body, `"method_restricted"`, "permanent", `"alpha"`)
	}
	if n := len(up.seen()); n != 0 {
		t.Fatalf("upstream saw %d restricted requests", n)
	}
	// Unrestricted methods and other APIs' hosts pass.
	if resp, _ := do(t, c, "POST", up.url("api.test", "/v1/x"), strings.NewReader("{}"), nil); resp.StatusCode != 200 {
		t.Errorf("POST: status %d", resp.StatusCode)
	}
	// A form without an override passes whole.
	form := "a=ALPHA_TOKEN&b=" + strings.Repeat("x", 100<<10)
	resp, _ := do(t, c, "POST", up.url("api.test", "/v1/form"), strings.NewReader(form), map[string]string{"Content-Type": "application/x-www-form-urlencoded"})
	if resp.StatusCode != 200 {
		t.Errorf("form POST: status %d", resp.StatusCode)
	} else if got := up.seen()[1].Body; got != strings.Replace(form, "ALPHA_TOKEN", alphaSecret, 1) {
		t.Errorf("form POST: upstream got %d bytes, substituted=%v", len(got), strings.Contains(got, alphaSecret))
	}
	if resp, _ := do(t, c, "DELETE", up.url("beta.test", "/v1/x"), nil, nil); resp.StatusCode != 200 {
		t.Errorf("DELETE on beta: status %d", resp.StatusCode)
	}
}

func TestUnconfiguredAndPrivateDestinations(t *testing.T) {
	t.Parallel()
	tp := startProxy(t)
	up := newUpstream(t, nil)
	_, c := tp.open(t)
	resp, body := do(t, c, "GET", up.url("other.test", "/"), nil, nil)
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("unconfigured host: status %d", resp.StatusCode)
	}
	mustContain(t, "403 body", body, "other.test", "not configured", `"domains"`, "config.json", "YOLO_MODE")

	// Plain http to an unconfigured host is refused the same way.
	plain := startUpstream(t, nil, false, testPKI(t).leaf)
	resp, _ = do(t, c, "GET", plain.url("other.test", "/"), nil, nil)
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("plain http unconfigured host: status %d", resp.StatusCode)
	}

	// A configured host resolving to loopback is refused without the flag.
	tn := startProxy(t, noPrivate())
	_, cn := tn.open(t)
	resp, body = do(t, cn, "GET", up.url("api.test", "/"), nil, map[string]string{"Authorization": "Bearer ALPHA_TOKEN"})
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("private destination: status %d: %s", resp.StatusCode, body)
	}
	mustContain(t, "private body", body, "127.0.0.1", "--allow-private-upstreams")
	// An IP literal is checked the same way.
	resp, _ = do(t, cn, "GET", "https://127.0.0.1:"+up.port+"/", nil, nil)
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("loopback literal: status %d", resp.StatusCode)
	}
	if n := len(up.seen()) + len(plain.seen()); n != 0 {
		t.Errorf("upstreams saw %d requests", n)
	}
}

func TestMisdirectedRequests(t *testing.T) {
	t.Parallel()
	tp := startProxy(t, withSettings(settings.Common{YOLO: true}))
	a := newUpstream(t, nil)
	b := newUpstream(t, nil)
	r, _ := tp.open(t)
	aHost := "api.test:" + a.port
	conn, br := tp.tunnel(t, r, aHost, "api.test")

	cases := []string{
		// Host header names another host.
		"GET /v1 HTTP/1.1\r\nHost: b.test:" + b.port + "\r\nAuthorization: Bearer ALPHA_TOKEN\r\n\r\n",
		// Same host name, another port.
		"GET /v1 HTTP/1.1\r\nHost: api.test:" + b.port + "\r\nAuthorization: Bearer ALPHA_TOKEN\r\n\r\n",
		// Absolute-form naming another host inside A's tunnel.
		"GET https://b.test:" + b.port + "/v1 HTTP/1.1\r\nHost: " + aHost + "\r\nAuthorization: Bearer ALPHA_TOKEN\r\n\r\n",
	}
	for i, raw := range cases {
		resp, body := rawRoundTrip(t, conn, br, raw)
		if resp.StatusCode != http.StatusMisdirectedRequest {
			t.Errorf("case %d: status %d, want 421: %s", i, resp.StatusCode, body)
		}
	}
	// The tunnel still works for its own host.
	resp, _ := rawRoundTrip(t, conn, br, "GET /ok HTTP/1.1\r\nHost: "+aHost+"\r\n\r\n")
	if resp.StatusCode != 200 {
		t.Errorf("own host: status %d", resp.StatusCode)
	}
	if n := len(b.seen()); n != 0 {
		t.Errorf("B saw %d requests", n)
	}
	if seen := a.seen(); len(seen) != 1 || seen[0].URI != "/ok" {
		t.Errorf("A saw %+v", seen)
	}
}

func TestUnknownIdentityRefused(t *testing.T) {
	t.Parallel()
	tp := startProxy(t)
	up := newUpstream(t, nil)
	plain := startUpstream(t, nil, false, testPKI(t).leaf)
	r, _ := tp.open(t)
	good, _ := url.Parse(r.ProxyURL())
	pass, _ := good.User.Password()
	for name, u := range map[string]string{
		"none":           "http://" + tp.addr,
		"wrong password": "http://" + good.User.Username() + ":" + strings.Repeat("0", len(pass)) + "@" + tp.addr,
		"unknown user":   "http://run-0000000000000000:" + pass + "@" + tp.addr,
	} {
		c := tp.client(t, u)
		_, err := c.Get(up.url("api.test", "/"))
		if err == nil || !strings.Contains(err.Error(), "Proxy Authentication Required") {
			t.Errorf("%s: CONNECT: err = %v, want 407", name, err)
		}
		resp, err := c.Get(plain.url("api.test", "/"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusProxyAuthRequired {
			t.Errorf("%s: plain: status %d, want 407", name, resp.StatusCode)
		}
	}
	// A finished run's identity is refused too, also inside a tunnel it
	// opened before finishing.
	conn, br := tp.tunnel(t, r, "api.test:"+up.port, "api.test")
	if _, err := r.Finish(t.Context()); err != nil {
		t.Fatal(err)
	}
	c := tp.client(t, r.ProxyURL())
	if _, err := c.Get(up.url("api.test", "/")); err == nil {
		t.Error("finished run: CONNECT accepted")
	}
	// The tunnel the run opened before finishing is closed with it.
	_, _ = io.WriteString(conn, "GET / HTTP/1.1\r\nHost: api.test:"+up.port+"\r\n\r\n")
	if resp, err := http.ReadResponse(br, nil); err == nil {
		t.Errorf("old tunnel after finish still answers: status %d", resp.StatusCode)
	}
	if n := len(up.seen()) + len(plain.seen()); n != 0 {
		t.Errorf("upstreams saw %d requests", n)
	}
}

func TestUnrewritableResponsesRefused(t *testing.T) {
	t.Parallel()
	tp := startProxy(t, withSettings(settings.Common{YOLO: true}))
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/br":
			w.Header().Set("Content-Encoding", "br")
			_, _ = w.Write([]byte("\x1b\x00not really brotli " + alphaSecret))
		case "/badgzip":
			w.Header().Set("Content-Encoding", "gzip")
			_, _ = io.WriteString(w, "plain "+alphaSecret)
		}
	})
	_, c := tp.open(t)
	for _, path := range []string{"/br", "/badgzip"} {
		resp, body := do(t, c, "GET", up.url("api.test", path), nil, nil)
		if resp.StatusCode != http.StatusBadGateway {
			t.Errorf("%s: status %d, want 502", path, resp.StatusCode)
		}
		mustNotContain(t, path, body, alphaSecret)
	}
	// On an unconfigured host too: a secret stored through an API could
	// come back from anywhere, so nothing passes unscrubbed.
	resp, body := do(t, c, "GET", up.url("other.test", "/br"), nil, nil)
	if resp.StatusCode != http.StatusBadGateway || resp.Header.Get(errorHeader) != "cannot_rewrite" {
		t.Errorf("other.test br: %d %q, want 502 cannot_rewrite", resp.StatusCode, resp.Header.Get(errorHeader))
	}
	mustNotContain(t, "other.test br", body, alphaSecret)
}

func TestUpstreamTLSAlwaysVerified(t *testing.T) {
	t.Parallel()
	tp := startProxy(t, withSettings(settings.Common{YOLO: true}))
	// A server whose certificate comes from a CA the proxy does not trust.
	rogue := startUpstream(t, nil, true, newPKI(t, "api.test").leaf)
	_, c := tp.open(t)
	resp, body := do(t, c, "GET", rogue.url("api.test", "/"), nil, map[string]string{"Authorization": "Bearer ALPHA_TOKEN"})
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("untrusted upstream: status %d", resp.StatusCode)
	}
	mustContain(t, "body", body, "could not be verified")
	// A certificate from a trusted CA but for another name fails too: the
	// proxy verifies against the host it dials.
	other := newPKI(t, "b.test")
	roots := testPKI(t).ca.Pool()
	roots.AddCert(other.ca.Cert)
	tp2 := startProxy(t, withSettings(settings.Common{YOLO: true}), func(o *Options) { o.UpstreamRoots = roots })
	up := startUpstream(t, nil, true, other.leaf)
	_, c2 := tp2.open(t)
	if resp, _ := do(t, c2, "GET", up.url("b.test", "/"), nil, nil); resp.StatusCode != 200 {
		t.Fatalf("b.test with its own trusted certificate: status %d", resp.StatusCode)
	}
	resp, body = do(t, c2, "GET", up.url("api.test", "/"), nil, map[string]string{"Authorization": "Bearer ALPHA_TOKEN"})
	if resp.StatusCode != http.StatusBadGateway {
		t.Errorf("name mismatch: status %d: %s", resp.StatusCode, body)
	}
	if n := len(up.seen()); n != 1 {
		t.Errorf("upstream with a certificate for another name got %d requests, want only the b.test one", n)
	}
	if n := len(rogue.seen()); n != 0 {
		t.Errorf("unverified upstream got %d requests", n)
	}
}

// TestCleartextGetsNoCredential is the cleartext attack: a token name
// sent to an API host over plain http (any port) is refused, never
// substituted; a request without one passes, and its response is still
// scrubbed.
func TestCleartextGetsNoCredential(t *testing.T) {
	t.Parallel()
	tp := startProxy(t)
	up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Echo", r.Header.Get("Authorization"))
		_, _ = io.WriteString(w, "got "+r.URL.RawQuery+" "+alphaSecret)
	}, false, testPKI(t).leaf)
	_, c := tp.open(t)
	for name, req := range map[string]struct {
		path   string
		header map[string]string
		body   string
	}{
		"header": {"/p", map[string]string{"Authorization": "Bearer ALPHA_TOKEN"}, ""},
		"query":  {"/p?k=ALPHA_TOKEN", nil, ""},
		"path":   {"/p/ALPHA_OTHER", nil, ""},
		"basic":  {"/p", map[string]string{"Authorization": "Basic " + base64.StdEncoding.EncodeToString([]byte("u:ALPHA_TOKEN"))}, ""},
		"body":   {"/p", map[string]string{"Content-Type": "application/json"}, `{"k":"ALPHA_TOKEN"}`},
	} {
		var body io.Reader
		if req.body != "" {
			body = strings.NewReader(req.body)
		}
		resp, text := do(t, c, "POST", up.url("api.test", req.path), body, req.header)
		if resp.StatusCode != http.StatusForbidden || resp.Header.Get(errorHeader) != "credential_not_sent" {
			t.Errorf("%s over http: status %d %q, want 403 credential_not_sent", name, resp.StatusCode, resp.Header.Get(errorHeader))
		}
		mustContain(t, name, text, "only sent over HTTPS", "https://api.test:"+up.port)
	}
	// A body too big to buffer is cut before the token name and refused.
	big := io.MultiReader(strings.NewReader(strings.Repeat("x", 300<<10)), strings.NewReader("ALPHA_TOKEN"))
	resp, text := do(t, c, "POST", up.url("api.test", "/big"), big, nil)
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(text, "only sent over HTTPS") {
		t.Errorf("streamed body over http: status %d: %s", resp.StatusCode, text)
	}
	for _, s := range up.seen() {
		mustNotContain(t, "upstream over http", s.URI+s.Body+headerText(s.Header), alphaSecret, alphaSecret2)
	}
	// Without a token name the request passes, and what comes back is
	// scrubbed like any response.
	resp, text = do(t, c, "GET", up.url("api.test", "/p?plain=1"), nil, nil)
	if resp.StatusCode != 200 || text != "got plain=1 ALPHA_TOKEN" {
		t.Errorf("plain request: %d %q", resp.StatusCode, text)
	}
}

// TestStreamingResponses proves events reach the client before the
// upstream sends the next one, through a tunnel and through plain http.
func TestStreamingResponses(t *testing.T) {
	t.Parallel()
	tp := startProxy(t)
	handler := func(release chan struct{}) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, "data: one\n\n")
			w.(http.Flusher).Flush()
			<-release
			_, _ = io.WriteString(w, "data: two\n\n")
		}
	}
	for _, useTLS := range []bool{true, false} {
		release := make(chan struct{})
		up := startUpstream(t, handler(release), useTLS, testPKI(t).leaf)
		_, c := tp.open(t)
		resp, err := c.Get(up.url("api.test", "/events"))
		if err != nil {
			t.Fatal(err)
		}
		first := make([]byte, len("data: one\n\n"))
		if _, err := io.ReadFull(resp.Body, first); err != nil {
			t.Fatalf("tls=%v: first event: %v", useTLS, err)
		}
		close(release)
		rest, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(first)+string(rest) != "data: one\n\ndata: two\n\n" {
			t.Errorf("tls=%v: got %q", useTLS, string(first)+string(rest))
		}
	}
}

func TestNetworkLog(t *testing.T) {
	t.Parallel()
	tp := startProxy(t)
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "hello "+alphaSecret)
	})
	r, c := tp.open(t)
	do(t, c, "POST", up.url("api.test", "/v1/items?secret=ALPHA_TOKEN"), bytes.NewReader([]byte("abc")), map[string]string{"Authorization": "Bearer ALPHA_TOKEN"})
	do(t, c, "GET", up.url("beta.test", "/plain"), nil, nil)
	do(t, c, "DELETE", up.url("api.test", "/v1/items/1"), nil, nil)
	do(t, c, "GET", up.url("other.test", "/x"), nil, nil)
	entries, err := r.Finish(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 4 {
		t.Fatalf("entries = %+v", entries)
	}
	e := entries[0]
	wantHost := "api.test:" + up.port
	if e.Method != "POST" || e.Host != wantHost || e.Path != "/v1/items" || e.Status != 200 || !e.Injected ||
		e.BytesOut != 3 || e.BytesIn != int64(len("hello ALPHA_TOKEN")) || e.Blocked != "" {
		t.Errorf("entry 0 = %+v", e)
	}
	if e := entries[1]; e.Injected || e.Status != 200 || e.Host != "beta.test:"+up.port {
		t.Errorf("entry 1 = %+v", e)
	}
	if e := entries[2]; e.Status != 403 || e.Blocked != "method_restricted" {
		t.Errorf("entry 2 = %+v", e)
	}
	if e := entries[3]; e.Status != 403 || e.Blocked != "host_not_allowed" {
		t.Errorf("entry 3 = %+v", e)
	}
	for _, e := range entries {
		mustNotContain(t, "entry", e.Path+e.Host, alphaSecret, "?")
	}
	if _, err := r.Finish(t.Context()); err == nil {
		t.Error("second Finish: no error")
	}
}
