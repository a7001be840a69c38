package sandbox

import (
	"regexp"
	"testing"
)

func TestNetworkMode(t *testing.T) {
	for _, tc := range []struct {
		req  Request
		want string
	}{
		{Request{}, "none"},
		{Request{AllowHosts: []string{"a.test", "b.test"}}, "a.test,b.test"},
		{Request{AllowAllHosts: true, AllowHosts: []string{"a.test"}}, "all"},
	} {
		if got := tc.req.NetworkMode(); got != tc.want {
			t.Errorf("%+v: got %q, want %q", tc.req, got, tc.want)
		}
	}
}

func TestHasV8OOMMarker(t *testing.T) {
	if !HasV8OOMMarker("<--- Last few GCs --->\nFatal JavaScript out of memory: Reached heap limit\n") {
		t.Error("V8's report not recognised")
	}
	if HasV8OOMMarker("error: Uncaught RangeError: Maximum call stack size exceeded") {
		t.Error("a stack overflow taken for out of memory")
	}
}

func TestNewRunID(t *testing.T) {
	a, err := NewRunID()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewRunID()
	if !regexp.MustCompile(`^[0-9a-f]{16}$`).MatchString(a) || a == b {
		t.Errorf("ids %q, %q; want two different 16-hex-digit ids", a, b)
	}
}
