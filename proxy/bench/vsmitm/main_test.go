package main

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

// These tests need no mitmproxy: they cover the flags, the embedded addon,
// the counting and the Go side of the bench (API, CodeForge proxy, the
// substitution checks) for real.

func TestParseFlags(t *testing.T) {
	t.Parallel()
	cfg, err := parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if want := (config{n: 2000, conc: 16, duration: 5 * time.Second, sizeMiB: 64}); cfg != want {
		t.Errorf("defaults = %+v; want %+v", cfg, want)
	}
	cfg, err = parseFlags([]string{"-n", "10", "-c", "2", "-duration", "300ms", "-size", "3"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if want := (config{n: 10, conc: 2, duration: 300 * time.Millisecond, sizeMiB: 3}); cfg != want {
		t.Errorf("parsed = %+v; want %+v", cfg, want)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-n", "0"}, "-n 0: want 1 to"},
		{[]string{"-c", "0"}, "-c 0: want 1 to"},
		{[]string{"-c", "9999"}, "-c 9999: want 1 to"},
		{[]string{"-duration", "1ms"}, "-duration 1ms: want"},
		{[]string{"-size", "0"}, "-size 0: want 1 to"},
		{[]string{"-size", "100000"}, "-size 100000: want 1 to"},
		{[]string{"extra"}, `unexpected argument "extra"`},
		{[]string{"-n", "many"}, "invalid value"},
		{[]string{"-x"}, "flag provided but not defined"},
	} {
		_, err := parseFlags(tc.args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseFlags(%q) = %v; want an error with %q", tc.args, err, tc.want)
		}
	}
}

func TestAddonEmbedded(t *testing.T) {
	t.Parallel()
	for _, want := range []string{
		"def server_connect(", "def request(", "def response(",
		"cf_host", "cf_token", "cf_secret", "addons = [Substitute()]",
	} {
		if !strings.Contains(addonScript, want) {
			t.Errorf("embedded substitute.py lacks %q", want)
		}
	}
}

func TestMissingMitmdump(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	err := run(t.Context(), nil, io.Discard, io.Discard)
	if !errors.Is(err, errNoMitmdump) || err.Error() != "mitmdump not found: apt-get install -y mitmproxy" {
		t.Fatalf("run without mitmdump = %v; want %q", err, errNoMitmdump)
	}
}

// TestCounter writes a stream with a known number of matches cut at every
// position and in tiny pieces.
func TestCounter(t *testing.T) {
	t.Parallel()
	pat := []byte(secret)
	var data []byte
	for i := range 5 {
		data = append(data, bytes.Repeat([]byte("x"), i*7)...)
		data = append(data, pat...)
	}
	data = append(data, pat[:len(pat)-1]...) // a partial match at the end
	for cut := range len(data) + 1 {
		c := &counter{pat: pat}
		c.Write(data[:cut])
		c.Write(data[cut:])
		if c.n != 5 {
			t.Fatalf("cut at %d: counted %d; want 5", cut, c.n)
		}
	}
	for step := 1; step < len(pat)+2; step++ {
		c := &counter{pat: pat}
		for i := 0; i < len(data); i += step {
			c.Write(data[i:min(i+step, len(data))])
		}
		if c.n != 5 {
			t.Fatalf("writes of %d bytes: counted %d; want 5", step, c.n)
		}
	}
}

func TestLoopbackDialRefusesOtherAddresses(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{"10.0.0.1:443", "example.invalid:443", "[2001:db8::1]:443"} {
		c, err := loopbackDial(t.Context(), "tcp", addr)
		if err == nil {
			c.Close()
			t.Fatalf("loopbackDial(%s) connected; want a refusal", addr)
		}
		if !strings.Contains(err.Error(), "loopback addresses only") {
			t.Errorf("loopbackDial(%s) = %v; want the loopback-only refusal", addr, err)
		}
	}
}

// TestGoPaths runs the checks the bench makes on the direct and CodeForge
// paths, and shows they fail when substitution is missing.
func TestGoPaths(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a, err := startAPI(dir + "/api")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.close)
	cf, err := startCodeForge(t.Context(), dir+"/codeforge", a)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cf.close)
	const size = 16 * streamChunk
	for _, p := range []*path{a.directPath(2), cf.path(a, 2)} {
		if _, err := p.small(t.Context()); err != nil {
			t.Errorf("%s: small: %v", p.name, err)
		}
		lat, _, err := p.concurrent(t.Context(), 2, 50*time.Millisecond)
		if err != nil || len(lat) == 0 {
			t.Errorf("%s: concurrent: %d requests, %v", p.name, len(lat), err)
		}
		if _, err := p.download(t.Context(), size); err != nil {
			t.Errorf("%s: download: %v", p.name, err)
		}
	}

	// Straight to the API with the token name: no proxy substituted it.
	bad := a.directPath(1)
	bad.cred = token
	if _, err := bad.small(t.Context()); err == nil || !strings.Contains(err.Error(), "status 401") {
		t.Errorf("small with the token name sent directly = %v; want status 401", err)
	}
	if _, err := bad.download(t.Context(), size); err == nil || !strings.Contains(err.Error(), "secrets reached the client") {
		t.Errorf("download with no reverse substitution = %v; want the secrets caught", err)
	}
}
