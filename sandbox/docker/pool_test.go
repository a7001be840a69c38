package docker

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/codeforge/codeforge/internal/dockertest"
	"github.com/codeforge/codeforge/internal/testenv"
	"github.com/codeforge/codeforge/sandbox"
)

func waitWarm(t *testing.T, r *Runner, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for r.WarmIdle() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d warm execs after a minute, want %d", r.WarmIdle(), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitNoLeftovers waits up to 30 s for the sandbox to hold nothing of
// any run (the wrapper removes a run's files as its exec ends).
func waitNoLeftovers(t *testing.T, sb *dockertest.Sandbox) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for left := leftovers(t, sb); len(left) > 0; left = leftovers(t, sb) {
		if time.Now().After(deadline) {
			t.Fatalf("left behind after Close: %q", left)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestWarmExecs: with a pool, runs after the first are served by warm
// execs made through the same filter: right answers, each run narrowed
// to its own permissions, a timeout still kills the run, and nothing is
// left in the sandbox once the runner is closed.
func TestWarmExecs(t *testing.T) {
	t.Parallel()
	sb := dockertest.Start(t, dockertest.Options{})
	logs := &testenv.LogBuffer{}
	r := newRunner(t, Options{DockerHost: sb.FilterHost, PoolSize: 2, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	cold := func() int { return strings.Count(logs.String(), "warm=false") }

	mustRun(t, r, sandbox.Request{Code: `console.log(0)`, AllowHosts: []string{"a.test", "b.test"}, ReadPaths: []string{"/ca/ca.pem"}})
	for i := 1; i <= 3; i++ {
		waitWarm(t, r, 1)
		res := mustRun(t, r, sandbox.Request{Code: `console.log(Deno.cwd().startsWith("/tmp/runs/"), [...Deno.readDirSync(".")].length)`,
			AllowHosts: []string{"a.test", "b.test"}, ReadPaths: []string{"/ca/ca.pem"}})
		if res.Stdout != "true 0\n" || res.ExitCode != 0 {
			t.Errorf("warm run %d: %+v", i, res)
		}
	}
	waitWarm(t, r, 1)
	res := mustRun(t, r, sandbox.Request{AllowHosts: []string{"a.test"}, ProxyURL: "http://run-x:secret@proxy.test:3128", Code: `
const q = async (d) => (await Deno.permissions.query(d)).state;
const out = { a: await q({name: "net", host: "a.test"}), b: await q({name: "net", host: "b.test"}),
  ca: await q({name: "read", path: "/ca/ca.pem"}), env: await q({name: "env"}),
  code: await q({name: "read", path: Deno.cwd() + ".deno"}) };
console.log(JSON.stringify(out));`})
	var got map[string]string
	if err := json.Unmarshal([]byte(res.Stdout), &got); err != nil {
		t.Fatalf("narrowed warm run: %+v", res)
	}
	want := map[string]string{"a": "granted", "b": "prompt", "ca": "prompt", "env": "prompt", "code": "prompt"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("narrowed warm run: %s is %q, want %q (prompt: denied without asking)", k, got[k], v)
		}
	}
	waitWarm(t, r, 1)
	res, err := r.Run(context.Background(), sandbox.Request{Code: `console.log("before"); while (true) {}`, Timeout: 3 * time.Second,
		AllowHosts: []string{"a.test"}})
	if err != nil || !res.TimedOut || res.ExitCode != 137 || res.Stdout != "before\n" || res.Stderr != "" {
		t.Errorf("timed-out warm run: %+v %v", res, err)
	}
	if n := cold(); n != 1 {
		t.Errorf("%d runs started cold, want 1:\n%s", n, logs)
	}
	r.Close()
	waitNoLeftovers(t, sb)
}

// TestWarmExecEndings: warm execs serve runs that keep files (the server
// always asks for them), and a run whose code ends by itself is answered
// at its end line with its output, exit code and files; one that ends by
// Deno.exit or an uncaught error is answered when its exec ends. Nothing
// is left in the sandbox afterwards, files or no files.
func TestWarmExecEndings(t *testing.T) {
	t.Parallel()
	sb := dockertest.Start(t, dockertest.Options{})
	logs := &testenv.LogBuffer{}
	r := newRunner(t, Options{DockerHost: sb.FilterHost, PoolSize: 2, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	keep := func(files *map[string]string) func(string, []string) {
		return func(dir string, _ []string) {
			entries, _ := os.ReadDir(dir)
			for _, e := range entries {
				b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
				if *files == nil {
					*files = map[string]string{}
				}
				(*files)[e.Name()] = string(b)
			}
		}
	}
	var none map[string]string
	mustRun(t, r, sandbox.Request{Code: `console.log(0)`, OnOutDir: keep(&none)})
	cases := []struct {
		name, code, stdout string
		exit               int
		early              bool
		files              map[string]string
	}{
		{name: "plain", code: `console.log(1)`, stdout: "1\n", early: true},
		{name: "exit code set", code: `Deno.exitCode = 3; console.log("x")`, stdout: "x\n", exit: 3, early: true},
		{name: "files", code: `await Deno.mkdir("out"); await Deno.writeTextFile("out/a.txt", "hi"); console.log("ok")`, stdout: "ok\n",
			early: true, files: map[string]string{"a.txt": "hi"}},
		{name: "files, then another working directory", code: `await Deno.mkdir("out"); await Deno.writeTextFile("out/a.txt", "hi"); await Deno.mkdir("sub"); Deno.chdir("sub")`,
			early: true, files: map[string]string{"a.txt": "hi"}},
		{name: "Deno.exit", code: `console.log("bye"); Deno.exit(4)`, stdout: "bye\n", exit: 4},
		{name: "uncaught", code: `throw new Error("boom")`, exit: 1},
	}
	for _, tc := range cases {
		waitWarm(t, r, 1)
		var files map[string]string
		res := mustRun(t, r, sandbox.Request{Code: tc.code, OnOutDir: keep(&files)})
		if res.Stdout != tc.stdout || res.ExitCode != tc.exit || fmt.Sprint(files) != fmt.Sprint(tc.files) {
			t.Errorf("%s: exit %d stdout %q stderr %q files %v; want %d %q %v", tc.name, res.ExitCode, res.Stdout, res.Stderr, files, tc.exit, tc.stdout, tc.files)
		}
		lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
		if last := lines[len(lines)-1]; strings.Contains(last, "end_line=true") != tc.early {
			t.Errorf("%s: end line seen = %v, want %v (%s)", tc.name, !tc.early, tc.early, last)
		}
	}
	if n := strings.Count(logs.String(), "warm=false"); n != 1 {
		t.Errorf("%d runs started cold, want 1:\n%s", n, logs)
	}
	r.Close()
	waitNoLeftovers(t, sb)
}

// TestWarmExecEndsAtEndLine: code that has its end line written early
// (it dispatches the events itself) and then keeps running is ended by
// the wrapper at the line: no deno of it is left running in the sandbox
// after the answer (it used to run on until its deadline, outside the
// server's limit on concurrent runs).
func TestWarmExecEndsAtEndLine(t *testing.T) {
	t.Parallel()
	sb := dockertest.Start(t, dockertest.Options{})
	r := newRunner(t, Options{DockerHost: sb.FilterHost, PoolSize: 1})
	mustRun(t, r, sandbox.Request{Code: `console.log(0)`})
	waitWarm(t, r, 1)
	res := mustRun(t, r, sandbox.Request{Code: `console.log("before");
dispatchEvent(new Event("beforeunload"));
dispatchEvent(new Event("unload"));
const t0 = Date.now();
while (Date.now() - t0 < 60000) {}`, Timeout: 2 * time.Minute})
	if res.ExitCode != 0 || res.Stdout != "before\n" {
		t.Errorf("run: %+v", res)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var busy []string
		for _, p := range sb.Processes(t) {
			if f := strings.Fields(p); len(f) >= 3 && strings.HasPrefix(f[1], "R") && strings.Contains(p, "deno") {
				busy = append(busy, p)
			}
		}
		if len(busy) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a deno still runs 10 s after its run was answered: %q", busy)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
