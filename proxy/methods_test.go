package proxy

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/codeforge/codeforge/apis"
	"github.com/codeforge/codeforge/internal/testenv"
)

// The method-rule test APIs: "allow" (api.test) lets only GET, HEAD and
// POST through; "deny" (beta.test) refuses DELETE and PUT; "open"
// (other.test) has no method rules at all.
func methodAPIs(t testing.TB) *apis.Set {
	t.Helper()
	dir := t.TempDir()
	writeAPI(t, dir, "allow", map[string]any{
		"domains":         []string{"api.test"},
		"credentials":     map[string]string{"ALLOW_TOKEN": "allow-secret-value-1"},
		"allowed_methods": []string{"GET", "HEAD", "post"},
	})
	writeAPI(t, dir, "deny", map[string]any{
		"domains":            []string{"beta.test"},
		"credentials":        map[string]string{"DENY_TOKEN": "deny-secret-value-2"},
		"restricted_methods": []string{"DELETE", "PUT"},
	})
	writeAPI(t, dir, "open", map[string]any{
		"domains":     []string{"other.test"},
		"credentials": map[string]string{"OPEN_TOKEN": "open-secret-value-3"},
	})
	return loadAPIs(t, dir)
}

func withAPIs(set *apis.Set) proxyOpt { return func(o *Options) { o.APIs = set } }

// send makes one request with exactly these header lines (several values,
// non-canonical names) and body, and returns the answer.
func send(t testing.TB, c *http.Client, method, u string, h http.Header, body []byte) (*http.Response, string) {
	t.Helper()
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, u, r)
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range h {
		req.Header[k] = vs
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

func gzipped(t testing.TB, s string) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	if _, err := io.WriteString(zw, s); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// part is one raw multipart part: its header lines and its content.
type part struct {
	headers []string
	content string
}

func field(name, value string) part {
	return part{headers: []string{`Content-Disposition: form-data; name="` + name + `"`}, content: value}
}

// multipartBody writes parts with boundary and line ending nl; final
// false leaves the closing delimiter off (a body that does not parse).
func multipartBody(boundary, nl string, final bool, parts ...part) []byte {
	var b strings.Builder
	for _, p := range parts {
		b.WriteString("--" + boundary + nl)
		for _, h := range p.headers {
			b.WriteString(h + nl)
		}
		b.WriteString(nl + p.content + nl)
	}
	if final {
		b.WriteString("--" + boundary + "--" + nl)
	}
	return []byte(b.String())
}

func utf16le(s string) []byte {
	out := []byte{0xff, 0xfe}
	for _, r := range s {
		out = append(out, byte(r), 0)
	}
	return out
}

type methodCase struct {
	name   string
	host   string // "api.test" (allow) or "beta.test" (deny)
	method string
	path   string
	header http.Header
	body   []byte
	status int    // the refusal expected
	want   string // in the refusal's body
}

const (
	ctForm = "application/x-www-form-urlencoded"
	ctJSON = "application/json"
	bnd    = "XyZ-boundary-1234"
	ctMP   = "multipart/form-data; boundary=" + bnd
)

func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h[kv[i]] = append(h[kv[i]], kv[i+1])
	}
	return h
}

// methodAttacks are the ways code tries to get a method past the rules.
// Every one must be refused before anything reaches the upstream.
func methodAttacks(t testing.TB) []methodCase {
	big := strings.Repeat("x", maxBodyPeek)
	var cases []methodCase
	for _, host := range []string{"api.test", "beta.test"} {
		add := func(c methodCase) {
			c.name = host + "/" + c.name
			c.host = host
			if c.method == "" {
				c.method = "POST"
			}
			if c.path == "" {
				c.path = "/v1/x"
			}
			if c.status == 0 {
				c.status = http.StatusForbidden
			}
			cases = append(cases, c)
		}
		// Request method and override headers.
		add(methodCase{name: "DELETE", method: "DELETE", want: `"DELETE"`})
		add(methodCase{name: "lower-case delete", method: "delete", want: `"DELETE"`})
		add(methodCase{name: "override header, second line", header: hdr("X-HTTP-Method-Override", "GET", "X-HTTP-Method-Override", "DELETE"), want: "X-Http-Method-Override"})
		add(methodCase{name: "override header, comma list", header: hdr("X-HTTP-Method-Override", "GET,DELETE"), want: `"DELETE"`})
		add(methodCase{name: "override header, white space", header: hdr("X-Method-Override", "GET ,\t delete\t"), want: `"DELETE"`})
		add(methodCase{name: "X-HTTP-Method", header: hdr("X-HTTP-Method", "Delete"), want: `"DELETE"`})
		add(methodCase{name: "override header with underscores (CGI)", header: hdr("X_HTTP_METHOD_OVERRIDE", "DELETE"), want: `"DELETE"`})
		// Query.
		add(methodCase{name: "later _method in query", path: "/v1/x?_method=GET&_method=DELETE", want: "_method query parameter"})
		add(methodCase{name: "_method[] in query", path: "/v1/x?_method%5B%5D=DELETE", want: "_method query parameter"})
		add(methodCase{name: ".method in query (PHP reads it as _method)", path: "/v1/x?.method=DELETE", want: "_method query parameter"})
		// URL-encoded forms.
		add(methodCase{name: "later _method in form", header: hdr("Content-Type", ctForm), body: []byte("_method=GET&a=1&_method=DELETE"), want: "URL-encoded form body"})
		add(methodCase{name: "PHP-mangled form name", header: hdr("Content-Type", ctForm), body: []byte("a=1&%2Emethod=DELETE"), want: "URL-encoded form body"})
		add(methodCase{name: "no Content-Type (Rack reads a form)", body: []byte("a=1&_method=delete"), want: "without Content-Type is read as a form"})
		add(methodCase{name: "gzip form", header: hdr("Content-Type", ctForm, "Content-Encoding", "gzip"), body: gzipped(t, "_method=DELETE"), want: "is compressed (Content-Encoding"})
		add(methodCase{name: "gzip JSON, encoding in a list", header: hdr("Content-Type", ctJSON, "Content-Encoding", "identity, gzip"), body: gzipped(t, `{"_method":"DELETE"}`), want: "is compressed (Content-Encoding"})
		add(methodCase{name: "gzip text/plain", header: hdr("Content-Type", "text/plain", "Content-Encoding", "gzip"), body: gzipped(t, "_method=DELETE"), want: "is compressed (Content-Encoding"})
		add(methodCase{name: "two Content-Type headers", header: hdr("Content-Type", "text/plain", "Content-Type", ctForm), body: []byte("_method=DELETE"), want: "2 Content-Type headers"})
		add(methodCase{name: "unparsable Content-Type", header: hdr("Content-Type", ctForm+", text/plain"), body: []byte("_method=DELETE"), want: "does not parse"})
		add(methodCase{name: "UTF-16 form", header: hdr("Content-Type", ctForm+"; charset=utf-16"), body: utf16le("_method=DELETE"), want: "charset \"utf-16\" is not UTF-8"})
		add(methodCase{name: "form over the peek cap", header: hdr("Content-Type", ctForm), body: []byte("_method=GET&a=" + big), status: http.StatusRequestEntityTooLarge, want: "1 MiB"})
		add(methodCase{name: "no-Content-Type body over the peek cap", body: []byte(big + "&_method=DELETE"), status: http.StatusRequestEntityTooLarge, want: "set the Content-Type"})
		// Multipart.
		add(methodCase{name: "multipart _method", header: hdr("Content-Type", ctMP),
			body: multipartBody(bnd, "\r\n", true, field("a", "1"), field("_method", "DELETE")), want: "a _method part of the multipart body"})
		add(methodCase{name: "multipart later _method", header: hdr("Content-Type", ctMP),
			body: multipartBody(bnd, "\r\n", true, field("_method", "POST"), field("_method", " delete ")), want: "a _method part of the multipart body"})
		add(methodCase{name: "multipart upper-case name", header: hdr("Content-Type", ctMP),
			body: multipartBody(bnd, "\r\n", true, field("_METHOD", "DELETE")), want: "a _method part of the multipart body"})
		add(methodCase{name: "multipart unquoted name, attachment disposition", header: hdr("Content-Type", ctMP),
			body: multipartBody(bnd, "\r\n", true, part{[]string{"Content-Disposition: attachment; name=_method"}, "DELETE"}), want: "a _method part of the multipart body"})
		add(methodCase{name: "multipart RFC 2231 name", header: hdr("Content-Type", ctMP),
			body: multipartBody(bnd, "\r\n", true, part{[]string{"Content-Disposition: form-data; name*=UTF-8''%5Fmethod"}, "DELETE"}), want: "a _method part of the multipart body"})
		add(methodCase{name: "multipart name* hides name", header: hdr("Content-Type", ctMP),
			body: multipartBody(bnd, "\r\n", true, part{[]string{"Content-Disposition: form-data; name*=UTF-8''harmless; name=_method"}, "DELETE"}), want: "a _method part of the multipart body"})
		add(methodCase{name: "multipart duplicate name parameter", header: hdr("Content-Type", ctMP),
			body: multipartBody(bnd, "\r\n", true, part{[]string{`Content-Disposition: form-data; name="a"; name="_method"`}, "DELETE"}), want: "a _method part of the multipart body"})
		add(methodCase{name: "multipart LF line ends", header: hdr("Content-Type", ctMP),
			body: multipartBody(bnd, "\n", true, field("_method", "DELETE")), want: "a _method part of the multipart body"})
		add(methodCase{name: "multipart LF part hidden in a CRLF body (PHP splits lines on LF)", header: hdr("Content-Type", ctMP),
			body: multipartBody(bnd, "\r\n", true, field("a", "x\n--"+bnd+"\nContent-Disposition: form-data; name=\"_method\"\n\nDELETE")), want: "does not read as a part header"})
		add(methodCase{name: "multipart/mixed", header: hdr("Content-Type", "multipart/mixed; boundary="+bnd),
			body: multipartBody(bnd, "\r\n", true, field("_method", "DELETE")), want: "a _method part of the multipart body"})
		add(methodCase{name: "multipart quoted-printable _method", header: hdr("Content-Type", ctMP),
			body: multipartBody(bnd, "\r\n", true, part{[]string{`Content-Disposition: form-data; name="_method"`, "Content-Transfer-Encoding: quoted-printable"}, "DEL=45TE"}), want: "has Content-Transfer-Encoding \"quoted-printable\""})
		add(methodCase{name: "multipart without boundary", header: hdr("Content-Type", "multipart/form-data"),
			body: multipartBody(bnd, "\r\n", true, field("_method", "DELETE")), want: "has no boundary"})
		add(methodCase{name: "multipart two boundaries (PHP takes the first)", header: hdr("Content-Type", "multipart/form-data; xboundary=AAAA; boundary="+bnd),
			body: multipartBody("AAAA", "\r\n", true, field("_method", "DELETE")), want: "names a boundary more than once"})
		add(methodCase{name: "multipart boundary with a comma (Rack cuts it)", header: hdr("Content-Type", `multipart/form-data; boundary="AAAA,BBBB"`),
			body: multipartBody("AAAA", "\r\n", true, field("_method", "DELETE")), want: "boundary \"AAAA,BBBB\" has characters"})
		add(methodCase{name: "multipart that does not parse", header: hdr("Content-Type", ctMP),
			body: multipartBody(bnd, "\r\n", false, field("a", "1")), want: "multipart body does not parse"})
		// JSON.
		add(methodCase{name: "JSON _method", header: hdr("Content-Type", ctJSON), body: []byte(`{"a":1,"_method":"DELETE"}`), want: "top-level _method field of the JSON body"})
		add(methodCase{name: "JSON duplicate keys", header: hdr("Content-Type", ctJSON), body: []byte(`{"_method":"POST","_method":"DELETE"}`), want: "top-level _method field of the JSON body"})
		add(methodCase{name: "JSON escaped key", header: hdr("Content-Type", ctJSON), body: []byte(`{"\u005fmethod":"delete"}`), want: "top-level _method field of the JSON body"})
		add(methodCase{name: "JSON +json type", header: hdr("Content-Type", "application/vnd.api+json"), body: []byte(`{"_method":"DELETE"}`), want: "top-level _method field of the JSON body"})
		add(methodCase{name: "JSON by Laravel's substring rule", header: hdr("Content-Type", `text/plain; x="/json"`), body: []byte(`{"_method":"DELETE"}`), want: "top-level _method field of the JSON body"})
		add(methodCase{name: "JSON _method not a string", header: hdr("Content-Type", ctJSON), body: []byte(`{"_method":["DELETE"]}`), want: "not a string"})
		add(methodCase{name: "JSON that does not parse", header: hdr("Content-Type", ctJSON), body: []byte(`{"_method":"DELETE"`), want: "not valid JSON"})
		add(methodCase{name: "JSON over the peek cap", header: hdr("Content-Type", ctJSON), body: []byte(`{"a":"` + big + `"}`), status: http.StatusRequestEntityTooLarge, want: "1 MiB"})
	}
	// Only allowed_methods refuses what a deny-list does not name.
	for _, c := range []methodCase{
		{name: "PATCH", method: "PATCH", want: `"PATCH"`},
		{name: "OPTIONS", method: "OPTIONS", want: `"OPTIONS"`},
		{name: "override to PATCH", header: hdr("X-HTTP-Method-Override", "PATCH"), want: `"PATCH"`},
		{name: "override to a made-up method", header: hdr("X-HTTP-Method-Override", "PURGE"), want: `"PURGE"`},
		{name: "JSON _method PATCH", header: hdr("Content-Type", ctJSON), body: []byte(`{"_method":"patch"}`), want: `"PATCH"`},
		{name: "multipart _method PATCH", header: hdr("Content-Type", ctMP), body: multipartBody(bnd, "\r\n", true, field("_method", "PATCH")), want: `"PATCH"`},
	} {
		c.name, c.host = "api.test/"+c.name, "api.test"
		if c.method == "" {
			c.method = "POST"
		}
		c.path, c.status = "/v1/x", http.StatusForbidden
		cases = append(cases, c)
	}
	return cases
}

// TestMethodRulesRefuseOverrides drives every known way of asking for a
// method (request line, override headers, _method in the query, in
// URL-encoded, multipart and JSON bodies) and every body the proxy cannot
// read for certain (compressed, ambiguous, unparsable, too large) through
// the real proxy to a real TLS upstream: each is refused, and the upstream
// sees nothing.
func TestMethodRulesRefuseOverrides(t *testing.T) {
	t.Parallel()
	tp := startProxy(t, withAPIs(methodAPIs(t)))
	up := newUpstream(t, nil)
	_, c := tp.open(t)
	for _, tc := range methodAttacks(t) {
		t.Run(tc.name, func(t *testing.T) {
			before := len(up.seen())
			resp, body := send(t, c, tc.method, up.url(tc.host, tc.path), tc.header, tc.body)
			if len(up.seen()) != before {
				t.Errorf("the request reached the upstream (status %d)", resp.StatusCode)
			}
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, body)
			}
			if tc.status == http.StatusForbidden {
				if k := resp.Header.Get(errorHeader); k != "method_restricted" {
					t.Errorf("%s = %q, want method_restricted", errorHeader, k)
				}
				var m map[string]string
				if err := json.Unmarshal([]byte(body), &m); err != nil || m["error"] != "method_restricted" || m["message"] == "" {
					t.Errorf("want a method_restricted JSON answer, got %q (%v)", body, err)
				}
				api, field := "deny", "restricted_methods"
				if tc.host == "api.test" {
					api, field = "allow", "allowed_methods"
				}
				mustContain(t, "answer", body, `"api":"`+api+`"`, field, "apis/"+api+"/config.json")
				body += "\n" + m["message"] // the message unescaped
			}
			mustContain(t, "answer", body, tc.want)
		})
	}
	logs := tp.log.String()
	mustContain(t, "log", logs, "blocked=method_restricted")
}

// upstreamDigest answers with the method, length and SHA-256 of the whole
// body it received, so a test can check bytes past the recorder's limit.
func upstreamDigest(w http.ResponseWriter, r *http.Request) {
	data, _ := io.ReadAll(r.Body)
	fmt.Fprintf(w, "%s %d %x", r.Method, len(data), sha256.Sum256(data))
}

func digest(method string, body []byte) string {
	return fmt.Sprintf("%s %d %x", method, len(body), sha256.Sum256(body))
}

// TestMethodRulesPassLegitimateRequests: what the rules allow goes
// through, with the body the upstream receives exactly the one sent,
// including bodies the proxy had to read to check them.
func TestMethodRulesPassLegitimateRequests(t *testing.T) {
	t.Parallel()
	tp := startProxy(t, withAPIs(methodAPIs(t)))
	up := newUpstream(t, upstreamDigest)
	_, c := tp.open(t)
	binary := make([]byte, 300<<10)
	for i := range binary {
		binary[i] = byte(i*7 + i/251)
	}
	nearCap := []byte("a=" + strings.Repeat("y", maxBodyPeek-2))
	cases := []struct {
		name, host, method string
		header             http.Header
		body               []byte
	}{
		{"GET", "api.test", "GET", nil, nil},
		{"allowed overrides", "api.test", "POST", hdr("X-HTTP-Method-Override", "GET, post", "X-HTTP-Method", "HEAD"), []byte("{}")},
		// Frameworks read _method only at the top level of a JSON body
		// (Laravel: $request->request->get('_method')); a nested one is
		// data, e.g. a stored webhook description.
		{"JSON with a nested _method", "api.test", "POST", hdr("Content-Type", ctJSON), []byte(`{"hook":{"_method":"DELETE","url":"https://x"},"list":[{"_method":"PUT"}]}`)},
		{"JSON array", "api.test", "POST", hdr("Content-Type", ctJSON), []byte(`[{"_method":"DELETE"}]`)},
		{"JSON with an allowed _method", "api.test", "POST", hdr("Content-Type", "application/json; charset=utf-8"), []byte(`{"_method":"GET","payment_method":"card"}`)},
		{"form with an allowed _method", "api.test", "POST", hdr("Content-Type", ctForm), []byte("_method=get&payment_method=card")},
		{"form exactly at the cap", "api.test", "POST", hdr("Content-Type", ctForm), nearCap},
		{"multipart with binary file", "api.test", "POST", hdr("Content-Type", ctMP), multipartBody(bnd, "\r\n", true,
			field("_method", "POST"), field("payment_method", "card"),
			part{[]string{`Content-Disposition: form-data; name="file"; filename="a.bin"`, "Content-Type: application/octet-stream"}, string(binary)})},
		{"identity encoding", "api.test", "POST", hdr("Content-Type", ctForm, "Content-Encoding", "identity"), []byte("a=1")},
		{"deny: _method to an unrestricted method", "beta.test", "POST", hdr("Content-Type", ctJSON), []byte(`{"_method":"PATCH"}`)},
		{"deny: PATCH", "beta.test", "PATCH", hdr("Content-Type", ctForm), []byte("_method=patch")},
		// Rack reads a bare body as a form only on POST, the one method
		// frameworks override.
		{"deny: PATCH without Content-Type, over the cap", "beta.test", "PATCH", nil, []byte("_method=DELETE&" + strings.Repeat("b", 2<<20))},
		// Bodies no framework reads a _method from are not read at all,
		// whatever their size or encoding.
		{"deny: octet-stream over the cap", "beta.test", "POST", hdr("Content-Type", "application/octet-stream"), bytes.Repeat(binary, 4)},
		// An API without method rules is not checked at all.
		{"open: gzip form with _method", "other.test", "POST", hdr("Content-Type", ctForm, "Content-Encoding", "gzip"), gzipped(t, "_method=DELETE")},
		{"open: DELETE", "other.test", "DELETE", nil, nil},
		{"open: form over the cap", "other.test", "POST", hdr("Content-Type", ctForm), []byte("_method=DELETE&a=" + strings.Repeat("z", 2<<20))},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := send(t, c, tc.method, up.url(tc.host, "/v1/x"), tc.header, tc.body)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			if want := digest(tc.method, tc.body); body != want {
				t.Errorf("upstream got %q, want %q (the body sent)", body, want)
			}
		})
	}
}

// TestMethodRulesKeepStreaming: bodies the proxy does not need to read
// (an API without method rules; a content type no framework takes
// _method from) reach the upstream while the client is still sending.
func TestMethodRulesKeepStreaming(t *testing.T) {
	t.Parallel()
	tp := startProxy(t, withAPIs(methodAPIs(t)))
	arrived := make(chan struct{}, 1)
	// Not newUpstream: its recorder reads the body before the handler runs.
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		upstreamDigest(w, r)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{testPKI(t).leaf}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	up := &upstream{srv: srv}
	_, up.port, _ = net.SplitHostPort(srv.Listener.Addr().String())
	_, c := tp.open(t)
	for _, tc := range []struct{ name, host, ct string }{
		{"no method rules", "other.test", ctForm},
		{"method rules, octet-stream", "beta.test", "application/octet-stream"},
	} {
		pr, pw := io.Pipe()
		t.Cleanup(func() { _ = pw.CloseWithError(io.ErrUnexpectedEOF) })
		req, err := http.NewRequest("POST", up.url(tc.host, "/up"), pr)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", tc.ct)
		type result struct {
			body string
			err  error
		}
		done := make(chan result, 1)
		go func() {
			resp, err := c.Do(req)
			if err != nil {
				done <- result{err: err}
				return
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			done <- result{string(b), err}
		}()
		first := []byte("_method=DELETE&a=")
		if _, err := pw.Write(first); err != nil {
			t.Fatal(err)
		}
		select {
		case <-arrived:
		case <-time.After(time.Minute): // a hang guard, not a speed check
			t.Fatalf("%s: the upstream saw nothing while the body was still open: the proxy held it back", tc.name)
		}
		rest := []byte("rest")
		_, _ = pw.Write(rest)
		_ = pw.Close()
		res := <-done
		if res.err != nil {
			t.Fatalf("%s: %v", tc.name, res.err)
		}
		if want := digest("POST", append(first, rest...)); res.body != want {
			t.Errorf("%s: upstream got %q, want %q", tc.name, res.body, want)
		}
	}
}

// TestMethodRulesFromDeno: the overrides as sandbox code writes them with
// fetch() (FormData, URLSearchParams, JSON, a CompressionStream body) are
// refused; a FormData upload without one passes whole.
func TestMethodRulesFromDeno(t *testing.T) {
	t.Parallel()
	deno := testenv.Deno(t)
	tp := startProxy(t, withAPIs(methodAPIs(t)))
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseMultipartForm(1 << 20); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		f, _, err := r.FormFile("file")
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		data, _ := io.ReadAll(f)
		fmt.Fprintf(w, "note=%s file=%d %x", r.FormValue("note"), len(data), sha256.Sum256(data))
	})
	run, _ := tp.open(t, "allow", "deny")
	dir := t.TempDir()
	script := filepath.Join(dir, "main.ts")
	src := `const show = async (name: string, r: Promise<Response>) => {
  const res = await r;
  const body = await res.text();
  console.log(name, res.status, res.headers.get("x-codeforge-proxy-error"), res.status === 403 ? JSON.parse(body).api : body);
};
for (const host of ["api.test", "beta.test"]) {
  const u = "https://" + host + ":` + up.port + `/v1/items/1";
  const fd = new FormData();
  fd.append("note", "hi");
  fd.append("_method", "DELETE");
  await show(host + " formdata", fetch(u, { method: "POST", body: fd }));
  await show(host + " urlsearchparams", fetch(u, { method: "POST", body: new URLSearchParams({ _method: "DELETE" }) }));
  await show(host + " json", fetch(u, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ _method: "DELETE" }) }));
  const gz = new Blob([new TextEncoder().encode("_method=DELETE")]).stream().pipeThrough(new CompressionStream("gzip"));
  await show(host + " gzip", fetch(u, { method: "POST", headers: { "content-type": "application/x-www-form-urlencoded", "content-encoding": "gzip" }, body: new Uint8Array(await new Response(gz).arrayBuffer()) }));
  const ok = new FormData();
  ok.append("note", "keep");
  ok.append("file", new Blob([new Uint8Array(200000).map((_, i) => (i * 7) % 256)]), "a.bin");
  await show(host + " upload", fetch(u, { method: "POST", body: ok }));
}
`
	if err := os.WriteFile(script, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, deno, "run", "--allow-net=api.test,beta.test", "--no-prompt", script)
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "DENO_DIR=" + filepath.Join(dir, "deno"),
		"DENO_NO_UPDATE_CHECK=1", "NO_COLOR=1",
		"HTTPS_PROXY=" + run.ProxyURL(), "DENO_CERT=" + tp.p.CACertFile(),
	}
	outb, err := cmd.CombinedOutput()
	out := string(outb)
	if err != nil {
		t.Fatalf("deno: %v\n%s", err, out)
	}
	file := make([]byte, 200000)
	for i := range file {
		file[i] = byte(i * 7 % 256)
	}
	for _, c := range []struct{ host, api string }{{"api.test", "allow"}, {"beta.test", "deny"}} {
		for _, name := range []string{"formdata", "urlsearchparams", "json", "gzip"} {
			mustContain(t, "deno output", out, fmt.Sprintf("%s %s 403 method_restricted %s\n", c.host, name, c.api))
		}
		mustContain(t, "deno output", out, fmt.Sprintf("%s upload 200 null note=keep file=%d %x\n", c.host, len(file), sha256.Sum256(file)))
	}
	if n := len(up.seen()); n != 2 {
		t.Errorf("upstream saw %d requests, want the 2 uploads", n)
	}
}

// BenchmarkCheckMethod measures what the method rules add per request:
// nothing for an API without them, a header scan for a bodiless request,
// and one read of the body for the kinds frameworks take _method from.
func BenchmarkCheckMethod(b *testing.B) {
	set := methodAPIs(b)
	rules := func(name string) *apiRules {
		for _, a := range set.Active() {
			if a.Name == name {
				return &apiRules{api: a}
			}
		}
		b.Fatalf("no API %q", name)
		return nil
	}
	jsonBody := []byte(`{"amount":1000,"currency":"eur","metadata":{"_method":"x","order":"` + strings.Repeat("o", 900) + `"}}`)
	mp := multipartBody(bnd, "\r\n", true, field("note", "hi"), part{[]string{`Content-Disposition: form-data; name="file"; filename="a.bin"`}, strings.Repeat("z", 64<<10)})
	for _, bc := range []struct {
		name, api, method, ct string
		body                  []byte
	}{
		{"no rules, JSON 1KiB", "open", "POST", ctJSON, jsonBody},
		{"rules, GET", "allow", "GET", "", nil},
		{"rules, JSON 1KiB", "allow", "POST", ctJSON, jsonBody},
		{"rules, form 1KiB", "deny", "POST", ctForm, []byte("a=1&b=" + strings.Repeat("f", 1000))},
		{"rules, multipart 64KiB", "allow", "POST", ctMP, mp},
		{"rules, octet-stream 64KiB", "deny", "POST", "application/octet-stream", mp},
	} {
		b.Run(bc.name, func(b *testing.B) {
			x := &exchange{rules: rules(bc.api), t: &target{scheme: "https", host: "api.test", port: "443"}}
			b.SetBytes(int64(len(bc.body)))
			b.ReportAllocs()
			for b.Loop() {
				req, _ := http.NewRequest(bc.method, "https://api.test/v1/x?a=1", bytes.NewReader(bc.body))
				if bc.ct != "" {
					req.Header.Set("Content-Type", bc.ct)
				}
				x.in = req
				if resp := x.checkMethod(); resp != nil {
					b.Fatalf("refused: %d", resp.StatusCode)
				}
			}
		})
	}
}
