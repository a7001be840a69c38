package server

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

const initializeBody = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"curl","version":"1"}}}`

// post sends an initialize request as a plain HTTP client would, with
// extra headers, and returns the status and body.
func post(t *testing.T, url, host string, headers map[string]string, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if host != "" {
		req.Host = host
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestHostAndOriginChecks(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessConfig{})
	url := h.hs.URL + "/mcp"
	_, port, _ := net.SplitHostPort(h.hs.Listener.Addr().String())

	cases := []struct {
		name    string
		host    string
		headers map[string]string
		status  int
		want    string
	}{
		{"loopback IP with port", "127.0.0.1:" + port, nil, 200, "event: message"},
		{"localhost with port", "localhost:" + port, nil, 200, "event: message"},
		{"localhost without port", "localhost", nil, 200, "event: message"},
		{"IPv6 loopback", "[::1]:" + port, nil, 200, "event: message"},
		{"rebinding name", "evil.example:" + port, nil, 403, "CODEFORGE_ALLOWED_HOSTS"},
		{"other port", "localhost:1", nil, 403, `Host "localhost:1" is not allowed`},
		{"allowed origin", "", map[string]string{"Origin": "http://localhost:" + port}, 200, "event: message"},
		{"foreign origin", "", map[string]string{"Origin": "http://evil.example"}, 403, "CODEFORGE_ALLOWED_ORIGINS"},
		{"null origin", "", map[string]string{"Origin": "null"}, 403, `Origin "null" is not allowed`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			status, body := post(t, url, tc.host, tc.headers, initializeBody)
			if status != tc.status || !strings.Contains(body, tc.want) {
				t.Fatalf("status %d body %q, want %d containing %q", status, body, tc.status, tc.want)
			}
		})
	}
	// /health is behind the Host check too (a rebinding page must not probe it).
	req, _ := http.NewRequest(http.MethodGet, h.hs.URL+"/health", nil)
	req.Host = "evil.example"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 403 {
		t.Fatalf("/health with a foreign Host: %d", resp.StatusCode)
	}
}

func TestConfiguredHostsAndOrigins(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessConfig{edit: func(o *Options) {
		o.AllowedHosts = []string{"codeforge.internal:8443"}
		o.AllowedOrigins = []string{"https://app.internal"}
	}, noClient: true})
	url := h.hs.URL + "/mcp"
	if status, body := post(t, url, "CodeForge.Internal:8443", map[string]string{"Origin": "https://app.internal"}, initializeBody); status != 200 {
		t.Fatalf("configured host and origin: %d %q", status, body)
	}
	if status, _ := post(t, url, "", nil, initializeBody); status != 403 {
		t.Fatalf("default localhost Host once hosts are configured: %d, want 403", status)
	}
	if status, _ := post(t, url, "codeforge.internal:8443", map[string]string{"Origin": "http://localhost"}, initializeBody); status != 403 {
		t.Fatalf("unlisted origin: %d, want 403", status)
	}
}

func TestBearerToken(t *testing.T) {
	t.Parallel()
	const token = "t0ken-for-tests"
	h := newHarnessWithToken(t, token)
	url := h.hs.URL + "/mcp"
	for _, auth := range []string{"", "Bearer wrong", "Bearer " + token + "x", "Basic " + token, token} {
		status, body := post(t, url, "", map[string]string{"Authorization": auth}, initializeBody)
		if status != 401 || !strings.Contains(body, "CODEFORGE_TOKEN") {
			t.Errorf("Authorization %q: %d %q, want 401 naming CODEFORGE_TOKEN", auth, status, body)
		}
	}
	if status, body := post(t, url, "", map[string]string{"Authorization": "Bearer " + token}, initializeBody); status != 200 {
		t.Fatalf("right token: %d %q", status, body)
	}
	// /health stays open without the token.
	resp, err := http.Get(h.hs.URL + "/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("/health without token: %d", resp.StatusCode)
	}
	// The go-sdk client works with the token.
	cs := h.connectWithToken(token)
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "execute_code", Arguments: map[string]any{"code": "console.log(7)"}})
	if err != nil || allText(res) != "7\n" {
		t.Fatalf("call with token: %v %v", err, res)
	}
}

func TestRequestBodyCap(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessConfig{edit: func(o *Options) { o.MaxCodeBytes = 1024; o.MaxBodyBytes = 64 << 10 }})
	huge := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"` +
		strings.Repeat("x", 100<<10) + `","version":"1"}}}`
	status, body := post(t, h.hs.URL+"/mcp", "", nil, huge)
	if status != http.StatusRequestEntityTooLarge {
		t.Fatalf("oversized body: %d %q", status, body)
	}
	if _, err := New(Options{Runner: h.runner, APIs: h.srv.opts.APIs, Skills: h.srv.opts.Skills, MaxCodeBytes: 1 << 20, MaxBodyBytes: 1 << 20}); err == nil {
		t.Fatal("New accepted a body cap no larger than the code cap")
	}
}

func TestHealth(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessConfig{})
	get := func() (int, map[string]string) {
		resp, err := http.Get(h.hs.URL + "/health")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]string
		if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, m
	}
	if status, m := get(); status != 200 || m["status"] != "ok" {
		t.Fatalf("/health: %d %v", status, m)
	}
	h.local.Close() // the runner now refuses runs: not ready
	if status, m := get(); status != 503 || m["status"] != "starting" || !strings.Contains(m["reason"], "closed") {
		t.Fatalf("/health with a closed runner: %d %v", status, m)
	}
	resp, err := http.Post(h.hs.URL+"/health", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("POST /health: %d", resp.StatusCode)
	}
}

// newHarnessWithToken is a harness whose server requires token; its
// default session carries it.
func newHarnessWithToken(t *testing.T, token string) *harness {
	t.Helper()
	return newHarness(t, harnessConfig{edit: func(o *Options) { o.Token = token }, clientToken: token})
}

// bearer adds an Authorization header to every request.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

func (h *harness) connectWithToken(token string) *mcp.ClientSession {
	h.t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "codeforge-test", Version: "1"}, nil)
	cs, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{
		Endpoint:   h.hs.URL + "/mcp",
		HTTPClient: &http.Client{Transport: bearer{token, http.DefaultTransport}},
	}, nil)
	if err != nil {
		h.t.Fatalf("connect with token: %v", err)
	}
	h.t.Cleanup(func() { cs.Close() })
	return cs
}
