package server

import (
	"net"
	"strings"
	"testing"
)

// TestHostAndOriginLookalikes tries the Host and Origin values a rebinding
// or cross-site page can send that look like an allowed one — a longer
// name that starts with it, another scheme, another port, a port that
// starts or ends like the real one, credentials in front — and checks
// each is refused with 403 while the real values pass. An allowlist that
// matched by prefix, ignored the port or ignored the scheme fails here.
func TestHostAndOriginLookalikes(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessConfig{noClient: true})
	url := h.hs.URL + "/mcp"
	_, port, _ := net.SplitHostPort(h.hs.Listener.Addr().String())
	other := "1"
	if port == "1" {
		other = "2"
	}

	refusedOrigins := []string{
		"http://localhost:" + port + ".evil.example",
		"http://127.0.0.1:" + port + ".evil.example",
		"http://localhost." + "evil.example:" + port,
		"https://localhost:" + port,
		"ws://localhost:" + port,
		"http://localhost:" + other,
		"http://localhost",
		"http://localhost:" + port + "0",
		"http://localhost:" + port[:len(port)-1],
		"http://localhost:0" + port,
		"http://localhost:" + port + "@evil.example",
		"http://evil.example@localhost:" + port + ".evil.example",
		"http://sub.localhost:" + port,
		"http://127.0.0.10:" + port,
		"http://[::1]:" + other,
		"http://[::1]",
		"http://" + port,
	}
	for _, origin := range refusedOrigins {
		status, body := post(t, url, "", map[string]string{"Origin": origin}, initializeBody)
		if status != 403 || !strings.Contains(body, "Origin") {
			t.Errorf("Origin %q: %d %.120q, want 403 naming the Origin", origin, status, body)
		}
	}
	refusedHosts := []string{
		"localhost:" + port + ".evil.example",
		"localhost.evil.example:" + port,
		"localhost.evil.example",
		"127.0.0.1.evil.example",
		"localhost:" + other,
		"localhost:" + port + "0",
		"localhost:" + port[:len(port)-1],
		"127.0.0.1:0" + port,
		"sub.localhost:" + port,
		"127.0.0.10:" + port,
		"[::1]:" + other,
		"[::2]:" + port,
	}
	for _, host := range refusedHosts {
		status, body := post(t, url, host, nil, initializeBody)
		if status != 403 || !strings.Contains(body, "Host") {
			t.Errorf("Host %q: %d %.120q, want 403 naming the Host", host, status, body)
		}
	}
	// Controls: the real values, in any case, pass.
	allowed := []struct{ host, origin string }{
		{"localhost:" + port, "http://localhost:" + port},
		{"127.0.0.1:" + port, "http://127.0.0.1:" + port},
		{"[::1]:" + port, "http://[::1]:" + port},
		{"LocalHost:" + port, "HTTP://LOCALHOST:" + port},
		{"localhost", ""},
		{"127.0.0.1", ""},
		{"[::1]", ""},
	}
	for _, a := range allowed {
		hdr := map[string]string{}
		if a.origin != "" {
			hdr["Origin"] = a.origin
		}
		if status, body := post(t, url, a.host, hdr, initializeBody); status != 200 {
			t.Errorf("control Host %q Origin %q: %d %q, want 200", a.host, a.origin, status, body)
		}
	}
}

// TestConfiguredLookalikes: with configured hosts and origins (written
// with stray case, spaces and a trailing slash, which are normalised),
// only exact matches pass.
func TestConfiguredLookalikes(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessConfig{edit: func(o *Options) {
		o.AllowedHosts = []string{" CodeForge.Internal:8443 "}
		o.AllowedOrigins = []string{"HTTPS://App.Internal/ "}
	}, noClient: true})
	url := h.hs.URL + "/mcp"
	const host, origin = "codeforge.internal:8443", "https://app.internal"
	if status, body := post(t, url, host, map[string]string{"Origin": origin}, initializeBody); status != 200 {
		t.Fatalf("configured host and origin: %d %q", status, body)
	}
	for _, o := range []string{
		"https://app.internal.evil.example", "http://app.internal", "https://app.internal:8443",
		"https://app.internal:443", "https://evil.app.internal", "https://app.interna",
	} {
		if status, _ := post(t, url, host, map[string]string{"Origin": o}, initializeBody); status != 403 {
			t.Errorf("Origin %q: %d, want 403", o, status)
		}
	}
	for _, hh := range []string{
		"codeforge.internal", "codeforge.internal:84430", "codeforge.internal:844", "codeforge.internal:8443.evil.example",
		"codeforge.internal.evil.example:8443", "evil.codeforge.internal:8443",
	} {
		if status, _ := post(t, url, hh, map[string]string{"Origin": origin}, initializeBody); status != 403 {
			t.Errorf("Host %q: %d, want 403", hh, status)
		}
	}
}

// TestBearerTokenSpellings: the scheme is case-insensitive and spaces
// around the token do not matter; anything else about the token does.
func TestBearerTokenSpellings(t *testing.T) {
	t.Parallel()
	const token = "t0ken-for-spellings"
	h := newHarness(t, harnessConfig{edit: func(o *Options) { o.Token = token }, noClient: true})
	url := h.hs.URL + "/mcp"
	for _, auth := range []string{"bearer " + token, "BEARER " + token, "Bearer   " + token + "  "} {
		if status, body := post(t, url, "", map[string]string{"Authorization": auth}, initializeBody); status != 200 {
			t.Errorf("Authorization %q: %d %q, want 200", auth, status, body)
		}
	}
	for _, auth := range []string{
		"Bearer" + token, "Bearer " + strings.ToUpper(token), "Bearer " + token[:len(token)-1], "Bearer " + token + " x",
		"Bearer", "Bearer ", "Token " + token, "Bearers " + token,
	} {
		if status, _ := post(t, url, "", map[string]string{"Authorization": auth}, initializeBody); status != 401 {
			t.Errorf("Authorization %q: %d, want 401", auth, status)
		}
	}
}
