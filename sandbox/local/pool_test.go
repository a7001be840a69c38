package local

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/codeforge/codeforge/internal/testenv"
	"github.com/codeforge/codeforge/sandbox"
)

// warmRunner is a runner with a warm pool whose logs the test can read.
func warmRunner(t *testing.T, mod func(*Options)) (*Runner, *testenv.LogBuffer) {
	t.Helper()
	logs := &testenv.LogBuffer{}
	r := newRunner(t, func(o *Options) {
		o.PoolSize = 2
		o.Logger = slog.New(slog.NewTextHandler(logs, nil))
		if mod != nil {
			mod(o)
		}
	})
	return r, logs
}

// waitWarm waits until the pool holds n idle processes.
func waitWarm(t *testing.T, r *Runner, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for r.WarmIdle() < n {
		if time.Now().After(deadline) {
			t.Fatalf("the pool has %d warm processes after a minute, want %d", r.WarmIdle(), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// coldRuns counts the runs the logs say started cold.
func coldRuns(logs *testenv.LogBuffer) int {
	n := 0
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "msg=start ") && !strings.Contains(l, "warm=true") {
			n++
		}
	}
	return n
}

// TestWarmPoolServesRuns: after the first (cold) run, runs are served by
// warm processes, each once: every answer is right, no run sees another's
// files, and once the runner is closed nothing is left in the scratch root.
func TestWarmPoolServesRuns(t *testing.T) {
	t.Parallel()
	r, logs := warmRunner(t, nil)
	code := `
const seen = [];
for await (const e of Deno.readDir(".")) seen.push(e.name);
await Deno.writeTextFile("mine.txt", "%d");
console.log(%d, JSON.stringify(seen));`
	for i := range 6 {
		if i > 0 {
			waitWarm(t, r, 1)
		}
		res := run(t, r, sandbox.Request{Code: fmt.Sprintf(code, i, i)})
		if want := fmt.Sprintf("%d []\n", i); res.Stdout != want || res.ExitCode != 0 {
			t.Errorf("run %d: exit %d stdout %q stderr %q, want %q", i, res.ExitCode, res.Stdout, res.Stderr, want)
		}
	}
	if cold := coldRuns(logs); cold != 1 {
		t.Errorf("%d of 6 runs started cold, want only the first:\n%s", cold, logs)
	}
	r.Close()
	assertNoRunDirs(t, r)
}

// TestWarmClaimNarrowsPermissions: a warm process started for more hosts
// and read paths than a run may have serves that run with exactly the
// run's: the rest is revoked before its code starts, env stays denied,
// and its network goes through the run's own proxy identity.
func TestWarmClaimNarrowsPermissions(t *testing.T) {
	t.Parallel()
	ca := testenv.NewCA(t)
	cert, _, _ := ca.Leaf(t, "a.codeforge.test", "b.codeforge.test")
	caFile := ca.WritePEM(t, t.TempDir())
	api := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "api ok "+r.Host)
	}))
	api.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	api.Config.ErrorLog = log.New(io.Discard, "", 0)
	api.StartTLS()
	t.Cleanup(api.Close)
	proxy := newConnectProxy(t, api.Listener.Addr().String())
	typesDir := t.TempDir()
	typesA, typesB := filepath.Join(typesDir, "a.d.ts"), filepath.Join(typesDir, "b.d.ts")
	for _, f := range []string{typesA, typesB} {
		if err := os.WriteFile(f, []byte("export {};\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r, logs := warmRunner(t, func(o *Options) { o.CACertFile = caFile })

	// The first run teaches the pool both hosts and both files.
	both := sandbox.Request{
		Code:       `console.log("warming")`,
		AllowHosts: []string{"a.codeforge.test", "b.codeforge.test"},
		ReadPaths:  []string{typesA, typesB},
		ProxyURL:   proxy.url("run-w", "secret-w"),
	}
	run(t, r, both)
	waitWarm(t, r, 2)

	probes := map[string]string{
		"fetch a":      `if ((await (await fetch("https://a.codeforge.test/")).text()) !== "api ok a.codeforge.test") throw new Error("wrong answer")`,
		"fetch b":      `await fetch("https://b.codeforge.test/")`,
		"read a":       fmt.Sprintf(`await Deno.readTextFile(%q)`, typesA),
		"read b":       fmt.Sprintf(`await Deno.readTextFile(%q)`, typesB),
		"env proxy":    `Deno.env.get("HTTPS_PROXY")`,
		"env set":      `Deno.env.set("HTTPS_PROXY", "http://evil.test:1")`,
		"request b":    `if ((await Deno.permissions.request({name: "net", host: "b.codeforge.test"})).state !== "granted") throw new Deno.errors.NotCapable("no")`,
		"read code":    `await Deno.readTextFile(Deno.cwd() + ".deno/main.ts")`,
		"read scratch": `for await (const _ of Deno.readDir(".")) {}`,
	}
	got := runProbes(t, r, sandbox.Request{
		AllowHosts: []string{"a.codeforge.test"},
		ReadPaths:  []string{typesA},
		ProxyURL:   proxy.url("run-n", "secret-n"),
	}, probes)
	want := map[string]string{
		"fetch a": "allowed", "fetch b": "denied", "read a": "allowed", "read b": "denied",
		"env proxy": "denied", "env set": "denied", "request b": "denied", "read code": "denied", "read scratch": "allowed",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %q, want %q", k, got[k], v)
		}
	}
	if !proxy.saw("a.codeforge.test:443", "run-n", "secret-n") {
		t.Errorf("the run's fetch did not go through its own proxy identity; the proxy saw %q", proxy.all())
	}
	if cold := coldRuns(logs); cold != 1 {
		t.Errorf("%d runs started cold, want only the first:\n%s", cold, logs)
	}

	// No network at all: everything revoked, nothing goes to the proxy.
	waitWarm(t, r, 1)
	before := len(proxy.all())
	got = runProbes(t, r, sandbox.Request{}, map[string]string{"fetch a": probes["fetch a"], "read a": probes["read a"]})
	if got["fetch a"] != "denied" || got["read a"] != "denied" {
		t.Errorf("a run without network or types got %v, want both denied", got)
	}
	if len(proxy.all()) != before {
		t.Errorf("a run without network reached the proxy: %q", proxy.all()[before:])
	}
	if cold := coldRuns(logs); cold != 1 {
		t.Errorf("%d runs started cold, want only the first:\n%s", cold, logs)
	}
}

// TestWarmPoolReplaced: a run needing a host the warm processes lack
// starts cold and the pool is replaced by processes that cover it; a new
// CA certificate replaces them too.
func TestWarmPoolReplaced(t *testing.T) {
	t.Parallel()
	caFile := testenv.NewCA(t).WritePEM(t, t.TempDir())
	r, logs := warmRunner(t, func(o *Options) { o.CACertFile = caFile })
	run(t, r, sandbox.Request{Code: `console.log(1)`, AllowHosts: []string{"a.codeforge.test"}})
	waitWarm(t, r, 2)
	run(t, r, sandbox.Request{Code: `console.log(2)`, AllowHosts: []string{"b.codeforge.test"}})
	if cold := coldRuns(logs); cold != 2 {
		t.Fatalf("%d runs started cold, want 2 (the first, and the one with a new host):\n%s", cold, logs)
	}
	waitWarm(t, r, 2)
	for _, hosts := range [][]string{{"a.codeforge.test"}, {"b.codeforge.test"}, {"a.codeforge.test", "b.codeforge.test"}} {
		waitWarm(t, r, 1)
		res := run(t, r, sandbox.Request{Code: `console.log((await Deno.permissions.query({name: "net", host: "b.codeforge.test"})).state)`, AllowHosts: hosts})
		want := "prompt\n" // revoked: denied without a prompt
		if len(hosts) == 2 || hosts[0] == "b.codeforge.test" {
			want = "granted\n"
		}
		if res.Stdout != want {
			t.Errorf("hosts %v: b.codeforge.test is %q, want %q", hosts, res.Stdout, want)
		}
	}
	if cold := coldRuns(logs); cold != 2 {
		t.Errorf("%d runs started cold, want 2: the pool covers both hosts now:\n%s", cold, logs)
	}
	// A new CA (the proxy made a new one): the next run starts cold.
	waitWarm(t, r, 2)
	later := time.Now().Add(time.Second)
	if err := os.WriteFile(caFile, append(testenv.NewCA(t).PEM, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	_ = os.Chtimes(caFile, later, later)
	run(t, r, sandbox.Request{Code: `console.log(3)`, AllowHosts: []string{"a.codeforge.test"}})
	if cold := coldRuns(logs); cold != 3 {
		t.Errorf("%d runs started cold, want 3: a new CA must not be served by processes trusting the old one:\n%s", cold, logs)
	}
}

// TestWarmTimeoutAndCancelKillTheGroup: a warm run's timeout keeps its
// partial output and kills its process; a cancelled warm run is an error
// and killed too.
func TestWarmTimeoutAndCancelKillTheGroup(t *testing.T) {
	t.Parallel()
	r, logs := warmRunner(t, nil)
	run(t, r, sandbox.Request{Code: `console.log(0)`})
	waitWarm(t, r, 1)
	res, err := r.Run(t.Context(), sandbox.Request{
		Code:    `console.log(Deno.pid); console.log("partial"); console.error("err partial"); while (true) {}`,
		Timeout: 3 * time.Second,
	})
	if err != nil {
		t.Fatalf("a timeout must be a result, not an error: %v", err)
	}
	if !res.TimedOut || res.ExitCode != 128+int(syscall.SIGKILL) || !strings.HasSuffix(res.Stdout, "\npartial\n") || res.Stderr != "err partial\n" {
		t.Errorf("timed-out warm run: %+v", res)
	}
	assertGone(t, pidLine(t, res.Stdout))

	waitWarm(t, r, 1)
	ctx, cancel := context.WithCancel(t.Context())
	pids := make(chan int, 1)
	res, err = r.Run(ctx, sandbox.Request{
		Code:         `console.log(Deno.pid); await new Promise(() => setInterval(() => {}, 1000));`,
		Timeout:      time.Minute,
		OnStdoutLine: func(line string) { pid := pidLine(t, line+"\n"); pids <- pid; cancel() },
	})
	if res != nil || !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled warm run = %+v, %v; want an error wrapping context.Canceled", res, err)
	}
	assertGone(t, <-pids)
	if cold := coldRuns(logs); cold != 1 {
		t.Errorf("%d runs started cold, want 1:\n%s", cold, logs)
	}
	r.Close()
	assertNoRunDirs(t, r)
}

// lastDone is the last "done" log line.
func lastDone(logs *testenv.LogBuffer) string {
	lines := strings.Split(logs.String(), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], "msg=done ") {
			return lines[i]
		}
	}
	return ""
}

// TestWarmRunEndings: a warm run whose code ends by itself is answered
// at its end line (before deno has exited) with everything a run that
// waited would have: stdout and stderr in order (the code's own unload
// and exit listeners included), streamed stderr lines, the exit code it
// set, and its out/ files. An end line with another token is the code's
// output; a run that ends otherwise (Deno.exit, an uncaught error) is
// answered when deno exits, with its own exit code.
func TestWarmRunEndings(t *testing.T) {
	t.Parallel()
	r, logs := warmRunner(t, nil)
	run(t, r, sandbox.Request{Code: `console.log(0)`})
	forged := "\x1ecodeforge-end:" + strings.Repeat("0", 32) + ":0:0"
	cases := []struct {
		name, code, stdout, stderr string
		exit                       int
		early                      bool
		files                      map[string]string
	}{
		{name: "plain", code: `console.log(1)`, stdout: "1\n", early: true},
		{name: "exit code set", code: `Deno.exitCode = 3; console.log("x"); console.error("y")`, stdout: "x\n", stderr: "y\n", exit: 3, early: true},
		{name: "listeners", code: `addEventListener("unload", () => console.log("unload"));
process.on("exit", () => console.log("exit"));
setTimeout(() => { addEventListener("unload", () => console.error("late unload")); console.log("timer"); }, 20);
console.log("main");`, stdout: "main\ntimer\nunload\nexit\n", stderr: "late unload\n", early: true},
		{name: "unload listeners, no process", code: `addEventListener("unload", () => console.log("u1"));
setTimeout(() => addEventListener("unload", () => console.log("u2")), 20);
let again = true;
addEventListener("beforeunload", (e) => { if (again) { again = false; e.preventDefault(); setTimeout(() => { addEventListener("unload", () => console.log("u3")); console.log("more"); }, 10); } });
console.log("main");`, stdout: "main\nmore\nu1\nu2\nu3\n", early: true},
		{name: "process through the global", code: `globalThis["pro" + "cess"].on("exit", () => console.log("exit")); console.log("main")`, stdout: "main\nexit\n", early: true},
		{name: "files", code: `await Deno.mkdir("out"); await Deno.writeTextFile("out/a.txt", "hi"); console.log("ok")`, stdout: "ok\n", early: true,
			files: map[string]string{"a.txt": "hi"}},
		{name: "forged end line", code: `console.log(` + strconv.Quote(forged) + `); console.log("after")`, stdout: forged + "\nafter\n", early: true},
		{name: "Deno.exit", code: `console.log("bye"); Deno.exit(4)`, stdout: "bye\n", exit: 4},
		{name: "uncaught", code: `console.log("before"); throw new Error("boom")`, stdout: "before\n", exit: 1},
	}
	for _, tc := range cases {
		waitWarm(t, r, 1)
		var lines []string
		var files map[string]string
		res := run(t, r, sandbox.Request{Code: tc.code,
			OnStderrLine: func(l string) { lines = append(lines, l) },
			OnOutDir: func(dir string, _ []string) {
				entries, _ := os.ReadDir(dir)
				for _, e := range entries {
					b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
					if files == nil {
						files = map[string]string{}
					}
					files[e.Name()] = string(b)
				}
			}})
		stderr := res.Stderr
		if tc.name == "uncaught" {
			if !strings.Contains(stderr, "boom") {
				t.Errorf("%s: stderr %q, want the error", tc.name, stderr)
			}
			stderr = ""
		}
		if res.Stdout != tc.stdout || stderr != tc.stderr || res.ExitCode != tc.exit {
			t.Errorf("%s: exit %d stdout %q stderr %q; want %d %q %q", tc.name, res.ExitCode, res.Stdout, res.Stderr, tc.exit, tc.stdout, tc.stderr)
		}
		// Whether the runner answered before deno exited is a race it
		// usually wins; that the end line came, after everything the
		// code printed, is what is checked.
		if done := lastDone(logs); strings.Contains(done, "end_line=true") != tc.early {
			t.Errorf("%s: end line seen = %v, want %v (%s)", tc.name, !tc.early, tc.early, done)
		}
		if tc.stderr != "" && strings.Join(lines, "\n")+"\n" != tc.stderr {
			t.Errorf("%s: streamed stderr lines %q, want %q", tc.name, lines, tc.stderr)
		}
		if fmt.Sprint(files) != fmt.Sprint(tc.files) {
			t.Errorf("%s: files %v, want %v", tc.name, files, tc.files)
		}
	}
	if cold := coldRuns(logs); cold != 1 {
		t.Errorf("%d runs started cold, want only the first:\n%s", cold, logs)
	}
	r.Close()
	assertNoRunDirs(t, r)
}

// TestWarmEndLineRevokesWrites: code that polluted Object.prototype (so
// that a descriptor without its own path would read one) and dispatched
// the events that make the bootstrap write its end line early can write
// nothing after it: neither its out/ files nor the skills directory
// change, and the run is answered at the line. (The revocation once took
// the polluted path and left every write granted.)
func TestWarmEndLineRevokesWrites(t *testing.T) {
	t.Parallel()
	r, logs := warmRunner(t, nil)
	run(t, r, sandbox.Request{Code: `console.log(0)`})
	waitWarm(t, r, 1)
	var files []string
	res := run(t, r, sandbox.Request{Code: fmt.Sprintf(`
await Deno.mkdir("out");
await Deno.writeTextFile("out/a.txt", "hi");
Object.prototype.path = "/nonexistent-codeforge";
dispatchEvent(new Event("beforeunload"));
dispatchEvent(new Event("unload"));
delete Object.prototype.path;
for (let i = 0; i < 20; i++) {
  for (const f of ["out/late", %q]) {
    try { Deno.writeTextFileSync(f + i, "late"); } catch { /* revoked */ }
  }
}`, filepath.Join(r.skillsDir, "late")),
		OnOutDir: func(dir string, _ []string) {
			entries, _ := os.ReadDir(dir)
			for _, e := range entries {
				files = append(files, e.Name())
			}
		}})
	if res.ExitCode != 0 || !strings.Contains(lastDone(logs), "end_line=true") {
		t.Errorf("run: %+v (%s); want it answered at its early end line", res, lastDone(logs))
	}
	if fmt.Sprint(files) != "[a.txt]" {
		t.Errorf("files out: %v, want only a.txt (the others were written after the end line)", files)
	}
	if entries, _ := os.ReadDir(r.skillsDir); len(entries) > 0 {
		t.Errorf("the skills directory got %d files written after the end line", len(entries))
	}
}
