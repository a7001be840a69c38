package server

import "testing"

// TestProbeAddr: the sandbox → proxy probe goes to the proxy's IPv4
// address and port as runs reach it, to the redirected port in transparent
// mode, and nowhere when the proxy URL names a host (the compose sandbox
// has no DNS to look it up).
func TestProbeAddr(t *testing.T) {
	for _, tc := range []struct {
		url         string
		transparent bool
		want        string
	}{
		{"http://192.0.2.1:3128", false, "192.0.2.1:3128"},
		{"http://192.0.2.1", false, "192.0.2.1:80"},
		{"http://proxy:3128", false, ""},
		{"http://[2001:db8::1]:3128", false, ""},
		{"http://proxy-control:3129", true, transparentProbeAddr},
	} {
		if got := probeAddr(tc.url, tc.transparent); got != tc.want {
			t.Errorf("probeAddr(%q, %v) = %q, want %q", tc.url, tc.transparent, got, tc.want)
		}
	}
}
