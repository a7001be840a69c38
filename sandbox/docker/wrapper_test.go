package docker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/codeforge/codeforge/internal/dockertest"
	"github.com/codeforge/codeforge/sandbox"
	"github.com/codeforge/codeforge/sandbox/runpolicy"
)

// wrapperExec runs codeforge-run in the sandbox as the sandbox user
// straight through the engine (no filter), so the wrapper's own checks
// are what is tested.
func wrapperExec(t *testing.T, sb *dockertest.Sandbox, env []string, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmdArgs := []string{"exec", "-i", "-u", "10001:10001"}
	for _, e := range env {
		cmdArgs = append(cmdArgs, "-e", e)
	}
	cmdArgs = append(cmdArgs, sb.ID, "/usr/local/bin/codeforge-run")
	cmd := exec.CommandContext(ctx, "docker", append(cmdArgs, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var exitErr *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exitErr):
		code = exitErr.ExitCode()
	default:
		t.Fatalf("docker exec: %v", err)
	}
	return out.String(), errb.String(), code
}

// TestWrapper: codeforge-run checks its environment and arguments again
// (defence in depth behind the filter): anything malformed is refused
// with status 125 and a message, and nothing runs.
func TestWrapper(t *testing.T) {
	t.Parallel()
	sb := dockertest.Start(t, dockertest.Options{NoFilter: true})
	ok := []string{"CODEFORGE_RUN_ID=wrap1", "CODEFORGE_TIMEOUT=10"}
	with := func(extra ...string) []string { return append(slices.Clone(ok), extra...) }

	stdout, stderr, code := wrapperExec(t, sb, ok, `console.log("fine")`)
	if code != 0 || stdout != "fine\n" || stderr != "" {
		t.Fatalf("valid run: %d %q %q", code, stdout, stderr)
	}
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"no env", nil, nil, "CODEFORGE_RUN_ID"},
		{"run id traversal", []string{"CODEFORGE_RUN_ID=../x", "CODEFORGE_TIMEOUT=1"}, nil, "CODEFORGE_RUN_ID"},
		{"run id leading dash", []string{"CODEFORGE_RUN_ID=-x", "CODEFORGE_TIMEOUT=1"}, nil, "CODEFORGE_RUN_ID"},
		{"no timeout", []string{"CODEFORGE_RUN_ID=a"}, nil, "CODEFORGE_TIMEOUT"},
		{"timeout zero", []string{"CODEFORGE_RUN_ID=a", "CODEFORGE_TIMEOUT=0.000"}, nil, "CODEFORGE_TIMEOUT"},
		{"timeout word", []string{"CODEFORGE_RUN_ID=a", "CODEFORGE_TIMEOUT=5s"}, nil, "CODEFORGE_TIMEOUT"},
		{"timeout precision", []string{"CODEFORGE_RUN_ID=a", "CODEFORGE_TIMEOUT=1.2345"}, nil, "CODEFORGE_TIMEOUT"},
		{"memory", with("CODEFORGE_MEMORY_MB=0"), nil, "CODEFORGE_MEMORY_MB"},
		{"net space", with("CODEFORGE_ALLOW_NET=a.test b.test"), nil, "CODEFORGE_ALLOW_NET"},
		{"net empty item", with("CODEFORGE_ALLOW_NET=a.test,,b.test"), nil, "CODEFORGE_ALLOW_NET"},
		{"net flag", with("CODEFORGE_ALLOW_NET=--allow-all"), nil, "CODEFORGE_ALLOW_NET"},
		{"read relative", with("CODEFORGE_READ=etc/passwd"), nil, "CODEFORGE_READ"},
		{"read traversal", with("CODEFORGE_READ=/skills/../etc/passwd"), nil, "CODEFORGE_READ"},
		{"read space", with("CODEFORGE_READ=/a b"), nil, "CODEFORGE_READ"},
		{"proxy scheme", with("HTTPS_PROXY=socks5://proxy:1080"), nil, "HTTPS_PROXY"},
		{"proxy chars", with("HTTP_PROXY=http://proxy:3128/$(id)"), nil, "HTTP_PROXY"},
		{"unknown flag", nil, []string{"--bogus"}, "usage"},
		{"kill without id", nil, []string{"--kill"}, "usage"},
		{"kill bad id", nil, []string{"--kill", "../../x"}, "--kill needs a run ID"},
		{"collect without id", nil, []string{"--collect"}, "usage"},
		{"collect bad id", nil, []string{"--collect", "../../x"}, "--collect needs a run ID"},
		{"keep out value", with("CODEFORGE_KEEP_OUT=yes"), nil, "CODEFORGE_KEEP_OUT"},
		{"check with args", nil, []string{"--check", "192.0.2.1:3128", "x"}, "usage"},
		{"check probe not an address", nil, []string{"--check", "x"}, "IPV4:PORT"},
		{"check probe host name", nil, []string{"--check", "proxy:3128"}, "IPV4:PORT"},
		{"check probe flag", nil, []string{"--check", "--kill"}, "IPV4:PORT"},
		{"check probe no port", nil, []string{"--check", "192.0.2.1:"}, "IPV4:PORT"},
		{"check probe five octets", nil, []string{"--check", "1.2.3.4.5:80"}, "IPV4:PORT"},
	} {
		stdout, stderr, code := wrapperExec(t, sb, tc.env, `console.log("ran")`, tc.args...)
		if code != 125 || !strings.HasPrefix(stderr, "codeforge-run: ") || !strings.Contains(stderr, tc.want) || stdout != "" {
			t.Errorf("%s: exit %d stdout %q stderr %q; want 125 and a message about %s", tc.name, code, stdout, stderr, tc.want)
		}
	}
	// A run ID in use is refused, and the existing directory is untouched.
	sb.Exec(t, "sh", "-c", "mkdir -p /tmp/runs/taken && echo keep >/tmp/runs/taken/f")
	if _, stderr, code := wrapperExec(t, sb, []string{"CODEFORGE_RUN_ID=taken", "CODEFORGE_TIMEOUT=5"}, `console.log(1)`); code != 125 || !strings.Contains(stderr, "reused") {
		t.Errorf("reused run ID: exit %d %q, want 125", code, stderr)
	}
	if got := sb.Exec(t, "cat", "/tmp/runs/taken/f"); got != "keep" {
		t.Errorf("the existing run's file is %q", got)
	}
	// An unknown run (or one that ended) is reported, and the marker that
	// would have stopped it from starting is not left behind.
	if _, stderr, code := wrapperExec(t, sb, nil, "", "--kill", "nosuchrun"); code != 3 || !strings.Contains(stderr, "no run") {
		t.Errorf("--kill of an unknown run: exit %d %q, want 3", code, stderr)
	}
	if out := sb.Exec(t, "sh", "-c", `[ -e /tmp/runs/nosuchrun.killed ] && echo exists || echo gone`); out != "gone" {
		t.Errorf("--kill of an unknown run left its marker: %s", out)
	}
	if _, _, code := wrapperExec(t, sb, nil, "", "--kill", "taken"); code != 0 {
		t.Errorf("--kill of a run directory: exit %d, want 0", code)
	}
	if out := sb.Exec(t, "sh", "-c", `[ -e /tmp/runs/taken ] && echo exists || echo gone`); out != "gone" {
		t.Errorf("--kill left the run directory: %s", out)
	}
	if _, stderr, code := wrapperExec(t, sb, nil, "", "--check"); code != 0 {
		t.Errorf("--check: exit %d %q", code, stderr)
	}
}

// TestRunProcess looks at a live run from outside (through the engine,
// not the filter): deno runs as 10001 with no capabilities and no_new_privs, the
// flags the contract names, and an environment holding nothing but its
// own settings and proxy identity.
func TestRunProcess(t *testing.T) {
	t.Parallel()
	sb := dockertest.Start(t, dockertest.Options{})
	r := newRunner(t, Options{DockerHost: sb.FilterHost})
	proxyURL := "http://run-abc:0123456789abcdef@proxy:3128"
	// proc holds deno's /proc/<pid>/{environ,cmdline,status}, read while
	// it runs.
	got := make(chan map[string]string, 1)
	res := mustRun(t, r, sandbox.Request{
		Code:       `console.log("ready"); await new Promise((r) => setTimeout(r, 60000));`,
		Timeout:    15 * time.Second, // three docker execs must read it first, on a busy machine
		AllowHosts: []string{"api.test"},
		ProxyURL:   proxyURL,
		OnStdoutLine: func(string) {
			script := `for p in /proc/[0-9]*; do if [ "$(cat $p/comm 2>/dev/null)" = deno ]; then exec cat $p/$1; fi; done; exit 1`
			proc := map[string]string{}
			for _, name := range []string{"environ", "cmdline", "status"} {
				out, err := exec.Command("docker", "exec", "-u", "10001:10001", sb.ID, "sh", "-c", script, "sh", name).Output()
				if err != nil {
					t.Errorf("read deno's /proc/%s: %v", name, err)
				}
				proc[name] = string(out)
			}
			got <- proc
		},
	})
	if !res.TimedOut {
		t.Errorf("result %+v, want the run to time out", res)
	}
	proc := <-got
	env := strings.Split(strings.TrimRight(proc["environ"], "\x00"), "\x00")
	scratch := ""
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, "HOME="); ok {
			scratch = v
		}
	}
	id := strings.TrimPrefix(scratch, runpolicy.SandboxRuns+"/")
	spec := runpolicy.Run{ID: id, Hosts: []string{"api.test"}, MemoryMB: DefaultMemoryMB, ProxyURL: proxyURL}.Spec(true)
	if want := runpolicy.Env(spec); !slices.Equal(env, want) {
		t.Errorf("deno's environment:\n%q\nwant:\n%q", env, want)
	}
	args := strings.Split(strings.TrimRight(proc["cmdline"], "\x00"), "\x00")
	if want := append([]string{"deno"}, runpolicy.Args(spec)...); !slices.Equal(args, want) {
		t.Errorf("deno's command line:\n%q\nwant:\n%q", args, want)
	}
	for _, line := range []string{"Uid:\t10001\t10001\t10001\t10001", "Gid:\t10001\t10001\t10001\t10001", "CapEff:\t0000000000000000", "CapPrm:\t0000000000000000", "NoNewPrivs:\t1"} {
		if !strings.Contains(proc["status"], line+"\n") {
			t.Errorf("deno's /proc status lacks %q:\n%s", line, proc["status"])
		}
	}
}

// TestKillRacesStart: a --kill sent while its run is still starting ends
// the run whichever gets there first, and leaves nothing behind.
func TestKillRacesStart(t *testing.T) {
	t.Parallel()
	sb := dockertest.Start(t, dockertest.Options{NoFilter: true})
	for i := range 6 {
		id := fmt.Sprintf("race%d", i)
		done := make(chan string, 1)
		go func() {
			stdout, stderr, code := wrapperExec(t, sb, []string{"CODEFORGE_RUN_ID=" + id, "CODEFORGE_TIMEOUT=60"},
				`await new Promise((r) => setTimeout(r, 15000)); console.log("finished")`)
			t.Log(stderr)
			done <- fmt.Sprintf("exit %d stdout %q", code, stdout)
		}()
		if i%2 == 1 {
			time.Sleep(time.Duration(i) * 20 * time.Millisecond) // vary who wins; not an assertion
		}
		wrapperExec(t, sb, nil, "", "--kill", id)
		if got := <-done; got != `exit 137 stdout ""` {
			t.Errorf("run %s killed while starting: %s, want exit 137 without output", id, got)
		}
	}
	if left := leftovers(t, sb); len(left) > 0 {
		t.Errorf("left behind: %q", left)
	}
}
