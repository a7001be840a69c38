package runpolicy

import (
	"slices"
	"strings"
	"testing"
)

// TestCovers: a warm process serves a run only when its permissions are
// a superset of the run's, and the claim revokes exactly the difference.
func TestCovers(t *testing.T) {
	warm := Spec{Skills: "/s", MemoryMB: 256, CACert: "/ca.pem", Hosts: []string{"a.test", "b.test"}, ReadPaths: []string{"/t/a", "/t/b"}}
	run := warm
	run.Hosts, run.ReadPaths, run.ProxyURL = []string{"a.test"}, []string{"/t/b"}, "http://u:p@proxy:1"
	c, ok := Covers(warm, run)
	if !ok || !slices.Equal(c.RevokeHosts, []string{"b.test"}) || !slices.Equal(c.RevokeRead, []string{"/t/a"}) || c.NoNet || c.Proxy != run.ProxyURL {
		t.Errorf("narrower run: %+v %v", c, ok)
	}
	run.Hosts = nil
	if c, ok := Covers(warm, run); !ok || !c.NoNet {
		t.Errorf("run without network: %+v %v, want NoNet", c, ok)
	}
	for name, mod := range map[string]func(*Spec){
		"another host":      func(s *Spec) { s.Hosts = []string{"c.test"} },
		"another read path": func(s *Spec) { s.ReadPaths = []string{"/t/c"} },
		"all hosts":         func(s *Spec) { s.AllHosts, s.Hosts = true, nil },
		"memory":            func(s *Spec) { s.MemoryMB = 512 },
		"ca":                func(s *Spec) { s.CACert = "" },
		"skills":            func(s *Spec) { s.Skills = "/other" },
	} {
		r := warm
		mod(&r)
		if _, ok := Covers(warm, r); ok {
			t.Errorf("%s: covered, want a cold start", name)
		}
	}
}

// TestWarmArgs: a warm process's command line is a run's, but for the
// proxy variables it may set, its cache it may read until the code
// starts, and the bootstrap instead of stdin.
func TestWarmArgs(t *testing.T) {
	s := Spec{Scratch: "/r/x", Skills: "/s", MemoryMB: 256, Hosts: []string{"a.test"}}
	cold, warm := Args(s), WarmArgs(s)
	if len(cold) != len(warm) {
		t.Fatalf("cold %q, warm %q", cold, warm)
	}
	for i := range cold {
		switch {
		case cold[i] == warm[i]:
		case cold[i] == "--deny-env" && warm[i] == "--allow-env="+strings.Join(ProxyEnvKeys, ","):
		case cold[i] == "--allow-read=/r/x,/s" && warm[i] == "--allow-read=/r/x,/s,/r/x.deno":
		case cold[i] == "-" && warm[i] == "/r/x.deno/"+BootstrapName:
		default:
			t.Errorf("argument %d: cold %q, warm %q", i, cold[i], warm[i])
		}
	}
}
