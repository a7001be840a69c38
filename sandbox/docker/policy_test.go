package docker

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/codeforge/codeforge/internal/dockertest"
	"github.com/codeforge/codeforge/internal/testenv"
	"github.com/codeforge/codeforge/sandbox"
	"github.com/codeforge/codeforge/sandbox/local"
)

// TestBackendsStartDenoAlike runs the same request through the local and
// the Docker backend and reads each live deno's full command line and
// environment from outside (/proc, through the engine for the sandbox).
// Apart from the paths that name each backend's own directories, they
// must be identical, flag for flag and variable for variable: one run
// policy (package runpolicy) serves both.
func TestBackendsStartDenoAlike(t *testing.T) {
	t.Parallel()
	sb := dockertest.Start(t, dockertest.Options{})
	dr := newRunner(t, Options{DockerHost: sb.FilterHost})
	skills := t.TempDir()
	ca := testenv.NewCA(t).WritePEM(t, t.TempDir())
	lr, err := local.New(local.Options{DenoPath: testenv.DenoBinary(t), SkillsDir: skills, ScratchRoot: t.TempDir(),
		CACertFile: ca, MemoryMB: DefaultMemoryMB})
	if err != nil {
		t.Fatal(err)
	}
	req := sandbox.Request{
		Code:       `console.log(Deno.pid); await new Promise((r) => setTimeout(r, 60000));`,
		Timeout:    5 * time.Second,
		AllowHosts: []string{"api.test", "b.test:8443"},
		ProxyURL:   "http://run-abc:0123456789abcdef@proxy.test:3128",
		ReadPaths:  []string{"/apis/a/types.d.ts", "/apis/b/types.d.ts"},
	}
	type proc struct{ args, env []string }
	observe := func(name string, r sandbox.Runner, read func(pid int, file string) ([]byte, error)) proc {
		got := make(chan proc, 1)
		req := req
		req.OnStdoutLine = func(line string) {
			pid, _ := strconv.Atoi(line)
			cmdline, err1 := read(pid, "cmdline")
			environ, err2 := read(pid, "environ")
			if err1 != nil || err2 != nil {
				t.Errorf("%s: read deno's /proc/%d: %v %v", name, pid, err1, err2)
			}
			split := func(b []byte) []string { return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00") }
			got <- proc{split(cmdline), split(environ)}
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := r.Run(ctx, req); err != nil {
			t.Fatalf("%s: Run: %v", name, err)
		}
		select {
		case p := <-got:
			return p
		default:
			t.Fatalf("%s: the run printed no pid", name)
			return proc{}
		}
	}
	lp := observe("local", lr, func(pid int, file string) ([]byte, error) {
		return os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, file))
	})
	dp := observe("docker", dr, func(pid int, file string) ([]byte, error) {
		return exec.Command("docker", "exec", "-u", "10001:10001", sb.ID, "cat", fmt.Sprintf("/proc/%d/%s", pid, file)).Output()
	})

	// Each backend's own directories become placeholders; nothing else
	// may differ.
	normalize := func(p proc, skills, ca string) proc {
		scratch := ""
		for _, e := range p.env {
			if v, ok := strings.CutPrefix(e, "HOME="); ok {
				scratch = v
			}
		}
		if scratch == "" {
			t.Fatalf("deno's environment has no HOME: %q", p.env)
		}
		r := strings.NewReplacer(scratch, "<scratch>", skills, "<skills>", ca, "<ca>")
		out := proc{args: slices.Clone(p.args[1:])} // argv[0] is where each has deno
		for i, a := range out.args {
			out.args[i] = r.Replace(a)
		}
		for _, e := range p.env {
			out.env = append(out.env, r.Replace(e))
		}
		return out
	}
	realSkills, _ := filepath.EvalSymlinks(skills)
	ln := normalize(lp, realSkills, ca)
	dn := normalize(dp, "/skills", "/ca/ca.pem")
	if !slices.Equal(ln.args, dn.args) {
		t.Errorf("deno's command line differs between the backends:\nlocal:  %q\ndocker: %q", ln.args, dn.args)
	}
	if !slices.Equal(ln.env, dn.env) {
		t.Errorf("deno's environment differs between the backends:\nlocal:  %q\ndocker: %q", ln.env, dn.env)
	}
	if !slices.Contains(ln.args, "--allow-net=api.test,b.test:8443") || !slices.Contains(ln.env, "DENO_DIR=<scratch>.deno") {
		t.Errorf("the observed command line or environment is not the run's: %q %q", ln.args, ln.env)
	}
}
