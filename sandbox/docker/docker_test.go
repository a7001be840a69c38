package docker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codeforge/codeforge/internal/dockertest"
	"github.com/codeforge/codeforge/sandbox"
)

// These tests drive the runner against real sandbox containers through a
// real socket filter; see package dockertest.

func newRunner(t testing.TB, opts Options) *Runner {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(testWriter{t}, nil))
	}
	r, err := New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func mustRun(t *testing.T, r *Runner, req sandbox.Request) *sandbox.Result {
	t.Helper()
	if req.Timeout == 0 {
		req.Timeout = 30 * time.Second
	}
	res, err := r.Run(context.Background(), req)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return res
}

// leftovers lists what a finished run could leave behind in the sandbox:
// processes other than the keepalive (seen from the host with docker top,
// zombies included) and anything under /tmp (Deno's cache included).
func leftovers(t *testing.T, sb *dockertest.Sandbox) []string {
	t.Helper()
	var left []string
	for _, p := range sb.Processes(t) {
		if !strings.Contains(p, "codeforge-run --idle") && !strings.Contains(p, "sleep 86400") {
			left = append(left, "process: "+strings.Join(strings.Fields(p), " "))
		}
	}
	// Anything in /tmp but the (empty) runs directory: a run's files,
	// its Deno cache, anything its code wrote.
	out := sb.Exec(t, "sh", "-c", `[ ! -e /tmp/runs ] || [ -r /tmp/runs ] || echo /tmp/runs-unreadable
for f in /tmp/* /tmp/.[!.]* /tmp/runs/* /tmp/runs/.[!.]*; do [ -e "$f" ] && [ "$f" != /tmp/runs ] && echo "$f"; done; true`)
	for _, f := range strings.Fields(out) {
		left = append(left, "file: "+f)
	}
	return left
}

// TestRunner covers one shared sandbox: results, caps, callbacks,
// permissions and scratch directories, timeouts and cancellation with
// nothing left behind, V8 out of memory, bad requests, concurrency.
func TestRunner(t *testing.T) {
	sb := dockertest.Start(t, dockertest.Options{})
	r := newRunner(t, Options{DockerHost: sb.FilterHost})
	if err := r.Ready(context.Background()); err != nil {
		t.Fatalf("Ready: %v", err)
	}
	if env := r.Env(); env.Backend != "docker" || env.SkillsDir != "/skills" || !strings.Contains(env.ScratchNote, "Deno.cwd()") {
		t.Errorf("Env() = %+v", env)
	}

	// Timeout and cancellation first, alone in the sandbox, so that
	// "nothing left behind" is checked right after each.
	t.Run("timeout", func(t *testing.T) {
		res := mustRun(t, r, sandbox.Request{Code: `console.log("before"); while (true) {}`, Timeout: 2 * time.Second})
		if !res.TimedOut || res.ExitCode != 137 || res.OutOfMemory {
			t.Errorf("result %+v, want timed out with 137", res)
		}
		if res.Stdout != "before\n" || res.Stderr != "" {
			t.Errorf("stdout %q stderr %q, want the partial output and no wrapper noise", res.Stdout, res.Stderr)
		}
		if res.Duration < 2*time.Second {
			t.Errorf("duration %v is shorter than the timeout", res.Duration)
		}
		if left := leftovers(t, sb); len(left) > 0 {
			t.Errorf("left behind after a timeout: %q", left)
		}
	})
	t.Run("timeout enforced from outside", func(t *testing.T) {
		// With no grace the runner's own deadline comes before the
		// wrapper's (which starts later): the runner kills the run.
		eager := newRunner(t, Options{DockerHost: sb.FilterHost, Grace: time.Nanosecond})
		res := mustRun(t, eager, sandbox.Request{Code: `console.log("before"); while (true) {}`, Timeout: 3 * time.Second})
		if !res.TimedOut || res.ExitCode != 137 || res.Stdout != "before\n" {
			t.Errorf("result %+v, want timed out with 137 and the partial output", res)
		}
		if left := leftovers(t, sb); len(left) > 0 {
			t.Errorf("left behind after a timeout enforced from outside: %q", left)
		}
	})
	t.Run("cancel", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		res, err := r.Run(ctx, sandbox.Request{
			Code:         `console.log("started"); while (true) {}`,
			Timeout:      time.Minute,
			OnStdoutLine: func(string) { cancel() },
		})
		if !errors.Is(err, context.Canceled) || res != nil {
			t.Fatalf("Run = %+v, %v; want an error wrapping context.Canceled", res, err)
		}
		if left := leftovers(t, sb); len(left) > 0 {
			t.Errorf("left behind after a cancel: %q", left)
		}
		if _, err := r.Run(ctx, sandbox.Request{Code: `console.log(1)`, Timeout: time.Second}); !errors.Is(err, context.Canceled) {
			t.Errorf("Run with a cancelled context: %v, want context.Canceled", err)
		}
	})

	t.Run("files out", func(t *testing.T) {
		// Regular files directly in out/ come back, within the budget;
		// a directory and a file over the budget get notes; nothing of
		// the run is left in the sandbox.
		var files map[string]string
		var notes []string
		res := mustRun(t, r, sandbox.Request{
			Code: `await Deno.mkdir("out/sub", {recursive: true});
await Deno.writeTextFile("out/table.csv", "a,b\n1,2\n");
await Deno.writeFile("out/big.bin", new Uint8Array(2000));
await Deno.writeTextFile("out/sub/x.txt", "nested");
console.log("ok")`,
			OutMaxBytes: 1000,
			OnOutDir: func(dir string, skipped []string) {
				files = map[string]string{}
				entries, err := os.ReadDir(dir)
				if err != nil {
					t.Errorf("read %s: %v", dir, err)
				}
				for _, e := range entries {
					b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
					files[e.Name()] = string(b)
				}
				notes = skipped
			},
		})
		if res.ExitCode != 0 || res.Stdout != "ok\n" {
			t.Fatalf("result %+v", res)
		}
		if len(files) != 1 || files["table.csv"] != "a,b\n1,2\n" {
			t.Errorf("files handed out: %q", files)
		}
		joined := strings.Join(notes, "\n")
		if !strings.Contains(joined, `out/"big.bin" not kept: with it the run's files would be over the cap of 1000 bytes per run`) ||
			!strings.Contains(joined, `out/"sub" not kept: it is a directory`) {
			t.Errorf("notes %q", notes)
		}
		if left := leftovers(t, sb); len(left) > 0 {
			t.Errorf("left behind after files out: %q", left)
		}
		// Without OnOutDir the scratch directory goes as before.
		mustRun(t, r, sandbox.Request{Code: `await Deno.mkdir("out"); await Deno.writeTextFile("out/a", "1")`})
		if left := leftovers(t, sb); len(left) > 0 {
			t.Errorf("left behind without files out: %q", left)
		}
	})

	t.Run("parallel", func(t *testing.T) {
		t.Run("hello", func(t *testing.T) {
			t.Parallel()
			res := mustRun(t, r, sandbox.Request{Code: `console.log("hello")`})
			if res.Stdout != "hello\n" || res.Stderr != "" || res.ExitCode != 0 || res.TimedOut || res.OutOfMemory || res.Truncated {
				t.Errorf("result %+v", res)
			}
		})
		t.Run("typescript exit code stderr", func(t *testing.T) {
			t.Parallel()
			res := mustRun(t, r, sandbox.Request{Code: `const n: number = 3; console.error("oops"); Deno.exit(n)`})
			if res.ExitCode != 3 || res.Stderr != "oops\n" || res.Stdout != "" || res.TimedOut {
				t.Errorf("result %+v, want exit 3 with oops on stderr", res)
			}
		})
		t.Run("exit code above 128", func(t *testing.T) {
			t.Parallel()
			res := mustRun(t, r, sandbox.Request{Code: `console.error("bye"); Deno.exit(200)`})
			if res.ExitCode != 200 || res.Stderr != "bye\n" || res.TimedOut || res.OutOfMemory {
				t.Errorf("result %+v, want exit 200 with only the code's stderr", res)
			}
		})
		t.Run("exit code 137 is not out of memory", func(t *testing.T) {
			t.Parallel()
			// 128+9, what a kill by the memory limit looks like; the
			// wrapper says deno exited by itself.
			res := mustRun(t, r, sandbox.Request{Code: `console.error("bye"); Deno.exit(137)`})
			if res.ExitCode != 137 || res.Stderr != "bye\n" || res.TimedOut || res.OutOfMemory {
				t.Errorf("result %+v, want exit 137 with only the code's stderr, not out of memory", res)
			}
		})
		t.Run("syntax error", func(t *testing.T) {
			t.Parallel()
			res := mustRun(t, r, sandbox.Request{Code: `this is not typescript`})
			if res.ExitCode != 1 || !strings.Contains(res.Stderr, "error") {
				t.Errorf("result %+v, want exit 1 with deno's error", res)
			}
		})
		t.Run("stdout lines", func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			var lines []string
			res := mustRun(t, r, sandbox.Request{
				Code:         `console.log("a"); console.log("b"); await Deno.stdout.write(new TextEncoder().encode("c"))`,
				OnStdoutLine: func(l string) { mu.Lock(); lines = append(lines, l); mu.Unlock() },
			})
			mu.Lock()
			defer mu.Unlock()
			if !slices.Equal(lines, []string{"a", "b", "c"}) || res.Stdout != "a\nb\nc" {
				t.Errorf("lines %q stdout %q", lines, res.Stdout)
			}
		})
		t.Run("output cap", func(t *testing.T) {
			t.Parallel()
			res := mustRun(t, r, sandbox.Request{
				Code:      `const s = "x".repeat(1000); for (let i = 0; i < 2000; i++) console.log(s); console.error("e".repeat(50000)); Deno.exit(4)`,
				MaxOutput: 10000,
			})
			if !res.Truncated || len(res.Stdout) != 10000 || len(res.Stderr) != 10000 {
				t.Errorf("truncated %v, kept %d+%d bytes, want both streams cut at 10000", res.Truncated, len(res.Stdout), len(res.Stderr))
			}
			if want := int64(2000*1001 + 50001 - 20000); res.DroppedBytes != want {
				t.Errorf("dropped %d bytes, want %d", res.DroppedBytes, want)
			}
			if res.ExitCode != 4 {
				t.Errorf("exit code %d after a flood, want 4", res.ExitCode)
			}
		})
		t.Run("permissions and scratch", func(t *testing.T) {
			t.Parallel()
			code := `
const results: Record<string, string> = { cwd: Deno.cwd() };
await Deno.writeTextFile("note.txt", "hi");
results.note = await Deno.readTextFile(Deno.cwd() + "/note.txt");
await Deno.mkdir("ro/inner", { recursive: true });
await Deno.writeTextFile("ro/inner/f", "x");
await Deno.chmod("ro", 0o500);
const probes: Record<string, () => unknown> = {
  etc: () => Deno.readTextFile("/etc/passwd"),
  tmp: () => Deno.writeTextFile("/tmp/x", "x"),
  runs: () => Deno.readDir("/tmp/runs")[Symbol.asyncIterator]().next(),
  env: () => Deno.env.get("PATH"),
  run: () => new Deno.Command("sh").output(),
  net: () => Deno.connect({ hostname: "127.0.0.1", port: 1 }),
  ca: () => Deno.readTextFile("/ca/ca.pem"),
  skills: () => Deno.writeTextFile("/skills/probe.ts", "export {}"),
};
for (const [name, probe] of Object.entries(probes)) {
  try { await probe(); results[name] = "allowed"; } catch (e) { results[name] = (e as Error).name; }
}
console.log(JSON.stringify(results));`
			for _, readCA := range []bool{false, true} {
				req := sandbox.Request{Code: code}
				if readCA {
					req.ReadPaths = []string{"/ca/ca.pem"}
				}
				res := mustRun(t, r, req)
				var got map[string]string
				if err := json.Unmarshal([]byte(res.Stdout), &got); err != nil {
					t.Fatalf("output %q (stderr %q): %v", res.Stdout, res.Stderr, err)
				}
				want := map[string]string{
					"note": "hi", "etc": "NotCapable", "tmp": "NotCapable", "runs": "NotCapable", "env": "NotCapable",
					"run": "NotCapable", "net": "NotCapable", "ca": "NotCapable", "skills": "allowed",
				}
				if readCA {
					want["ca"] = "allowed"
				}
				for k, v := range want {
					if got[k] != v {
						t.Errorf("read path %v: %s = %q, want %q", readCA, k, got[k], v)
					}
				}
				if !regexp.MustCompile(`^/tmp/runs/[0-9a-f]{16}$`).MatchString(got["cwd"]) {
					t.Errorf("cwd %q, want /tmp/runs/<run id>", got["cwd"])
				}
				out := sb.Exec(t, "sh", "-c", `[ -x /tmp/runs ] || echo unsearchable; [ -e "$1" ] && echo exists || echo gone`, "sh", got["cwd"])
				if out != "gone" {
					t.Errorf("scratch dir %s %s after the run", got["cwd"], out)
				}
			}
		})
		t.Run("network allowlist", func(t *testing.T) {
			t.Parallel()
			code := `
const r: Record<string, string> = {};
for (const [name, f] of Object.entries({
  loopback: () => Deno.connect({ hostname: "127.0.0.1", port: 1 }),
  allowed: () => fetch("http://api.test/"),
})) { try { await f(); r[name] = "ok"; } catch (e) { r[name] = (e as Error).name; } }
console.log(JSON.stringify(r));`
			for _, tc := range []struct {
				req  sandbox.Request
				want map[string]string
			}{
				// The container has no network: a permitted connection
				// fails with a network error, a refused one with NotCapable.
				{sandbox.Request{Code: code, AllowHosts: []string{"api.test"}}, map[string]string{"loopback": "NotCapable", "allowed": "TypeError"}},
				{sandbox.Request{Code: code, AllowAllHosts: true}, map[string]string{"loopback": "ConnectionRefused", "allowed": "TypeError"}},
				{sandbox.Request{Code: code}, map[string]string{"loopback": "NotCapable", "allowed": "NotCapable"}},
			} {
				res := mustRun(t, r, tc.req)
				var got map[string]string
				if err := json.Unmarshal([]byte(res.Stdout), &got); err != nil {
					t.Fatalf("output %q (stderr %q): %v", res.Stdout, res.Stderr, err)
				}
				for k, v := range tc.want {
					if got[k] != v {
						t.Errorf("hosts %q all %v: %s = %q, want %q", tc.req.AllowHosts, tc.req.AllowAllHosts, k, got[k], v)
					}
				}
			}
		})
		t.Run("v8 out of memory", func(t *testing.T) {
			t.Parallel()
			small := newRunner(t, Options{DockerHost: sb.FilterHost, MemoryMB: 48})
			res := mustRun(t, small, sandbox.Request{Code: `const a: unknown[] = []; while (true) a.push(new Array(100000).fill({ x: 1 }));`})
			if !res.OutOfMemory || res.TimedOut || res.ExitCode <= 128 {
				t.Errorf("result exit %d oom %v timed out %v, want V8's out of memory (stderr %q)", res.ExitCode, res.OutOfMemory, res.TimedOut, res.Stderr)
			}
		})
		t.Run("concurrent runs", func(t *testing.T) {
			t.Parallel()
			var wg sync.WaitGroup
			for i := range 8 {
				wg.Go(func() {
					res, err := r.Run(context.Background(), sandbox.Request{Code: fmt.Sprintf("console.log(%d * 2)", i), Timeout: time.Minute})
					if err != nil || res.Stdout != fmt.Sprintf("%d\n", i*2) || res.ExitCode != 0 {
						t.Errorf("run %d: %+v, %v", i, res, err)
					}
				})
			}
			wg.Wait()
		})
		t.Run("bad requests", func(t *testing.T) {
			t.Parallel()
			for _, tc := range []struct {
				req  sandbox.Request
				want string
			}{
				{sandbox.Request{Code: "1"}, "timeout"},
				{sandbox.Request{Code: "1", Timeout: 25 * time.Hour}, "timeout"},
				{sandbox.Request{Code: "1", Timeout: time.Second, MaxOutput: -1}, "max output"},
				{sandbox.Request{Code: "1", Timeout: time.Second, AllowHosts: []string{"a.test,b.test"}}, "allowed host"},
				{sandbox.Request{Code: "1", Timeout: time.Second, AllowHosts: []string{"a.test --allow-all"}}, "allowed host"},
				{sandbox.Request{Code: "1", Timeout: time.Second, AllowHosts: []string{"a.test;rm"}}, "CODEFORGE_ALLOW_NET"},
				{sandbox.Request{Code: "1", Timeout: time.Second, ReadPaths: []string{"relative"}}, "read path"},
				{sandbox.Request{Code: "1", Timeout: time.Second, ReadPaths: []string{"/a/../etc"}}, "CODEFORGE_READ"},
				{sandbox.Request{Code: "1", Timeout: time.Second, ProxyURL: "ftp://run:s3cret@proxy:21"}, "proxy URL"},
				{sandbox.Request{Code: "1", Timeout: time.Second, ProxyURL: "http://run:s3cret\n@proxy:3128"}, "proxy URL"},
			} {
				res, err := r.Run(context.Background(), tc.req)
				if err == nil || !strings.Contains(err.Error(), tc.want) || res != nil {
					t.Errorf("Run(%+v) = %v, %v; want an error about %q", tc.req, res, err, tc.want)
				}
				if err != nil && strings.Contains(err.Error(), "s3cret") {
					t.Errorf("error %q echoes the proxy credential", err)
				}
			}
		})
	})
	if left := leftovers(t, sb); len(left) > 0 {
		t.Errorf("left behind after all runs: %q", left)
	}
}

// TestRunnerContainerOOM: memory outside V8's heap (ArrayBuffers) hits the
// container's limit; the kernel kills deno, the wrapper survives and says
// so, and the run is reported as out of memory, not as a sandbox failure.
func TestRunnerContainerOOM(t *testing.T) {
	t.Parallel()
	sb := dockertest.Start(t, dockertest.Options{MemoryMB: 256})
	r := newRunner(t, Options{DockerHost: sb.FilterHost})
	res := mustRun(t, r, sandbox.Request{Code: `
const keep: Uint8Array[] = [];
console.log("allocating");
while (true) { const b = new Uint8Array(16 << 20); b.fill(1); keep.push(b); }`})
	if !res.OutOfMemory || res.TimedOut || res.ExitCode != 137 || res.Stdout != "allocating\n" {
		t.Errorf("result %+v, want out of memory (137) with the output so far", res)
	}
	if strings.Contains(res.Stderr, "codeforge-run") {
		t.Errorf("stderr %q holds the wrapper's trailer", res.Stderr)
	}
	if left := leftovers(t, sb); len(left) > 0 {
		t.Errorf("left behind after an OOM kill: %q", left)
	}
	if res := mustRun(t, r, sandbox.Request{Code: `console.log("ok")`}); res.Stdout != "ok\n" {
		t.Errorf("next run: %+v", res)
	}
}

// TestRunnerSandboxGone: the sandbox killed mid-run is an error (not a
// result), Ready says "starting" while it is down, and runs work again
// once it is back.
func TestRunnerSandboxGone(t *testing.T) {
	t.Parallel()
	sb := dockertest.Start(t, dockertest.Options{})
	r := newRunner(t, Options{DockerHost: sb.FilterHost})
	// A fresh success is cached; the failed run below must drop it, or
	// /health would say ready while the sandbox restarts.
	if err := r.Ready(context.Background()); err != nil {
		t.Fatalf("Ready: %v", err)
	}
	res, err := r.Run(context.Background(), sandbox.Request{
		Code:         `console.log("running"); while (true) {}`,
		Timeout:      time.Minute,
		OnStdoutLine: func(string) { _ = exec.Command("docker", "kill", sb.ID).Run() },
	})
	if err == nil || !strings.Contains(err.Error(), "sandbox container stopped") {
		t.Fatalf("Run with the sandbox killed = %+v, %v; want a sandbox-stopped error", res, err)
	}
	if err := r.Ready(context.Background()); err == nil || !strings.HasPrefix(err.Error(), "starting: ") {
		t.Errorf("Ready with the sandbox down: %v, want a starting: error", err)
	}
	if _, err := r.Run(context.Background(), sandbox.Request{Code: `console.log(1)`, Timeout: time.Minute}); err == nil || !strings.Contains(err.Error(), "not running") {
		t.Errorf("Run with the sandbox down: %v, want an error saying it is not running", err)
	}
	dockertest.Docker(t, "start", sb.ID)
	if err := r.Ready(context.Background()); err != nil {
		t.Errorf("Ready after restart: %v", err)
	}
	if res := mustRun(t, r, sandbox.Request{Code: `console.log("back")`}); res.Stdout != "back\n" {
		t.Errorf("run after restart: %+v", res)
	}
}

// TestRunnerFilterDown: with no filter answering, Ready and Run fail with
// errors that say so.
func TestRunnerFilterDown(t *testing.T) {
	t.Parallel()
	r := newRunner(t, Options{DockerHost: "unix://" + t.TempDir() + "/none.sock"})
	if err := r.Ready(context.Background()); err == nil || !strings.HasPrefix(err.Error(), "starting: docker socket filter") {
		t.Errorf("Ready: %v, want starting: docker socket filter …", err)
	}
	if _, err := r.Run(context.Background(), sandbox.Request{Code: "1", Timeout: time.Second}); err == nil || !strings.Contains(err.Error(), "docker exec create") {
		t.Errorf("Run: %v, want a docker exec create error", err)
	}
}

// TestReadyWithoutCA: until the proxy has published its CA, Ready says
// what is missing.
func TestReadyWithoutCA(t *testing.T) {
	t.Parallel()
	sb := dockertest.Start(t, dockertest.Options{Args: []string{"--tmpfs", "/ca:size=1m"}})
	r := newRunner(t, Options{DockerHost: sb.FilterHost})
	if err := r.Ready(context.Background()); err == nil || !strings.Contains(err.Error(), "starting: sandbox not ready: /ca/ca.pem is missing") {
		t.Errorf("Ready without /ca/ca.pem: %v", err)
	}
}

// TestReadyProbesProxyPath: with ProbeAddr, Ready has the sandbox connect
// to the proxy as a run would, and reports sandbox.ErrNetworkDown while it
// cannot (fresh checks see it at once, whatever was cached); a run that
// fails on a network error then is that error, not the raw OS error; and
// once the path is back, Ready is too and a failing fetch is the code's
// own result again. The "proxy" is a listener inside the sandbox, on its
// loopback (the sandbox has no other network here).
func TestReadyProbesProxyPath(t *testing.T) {
	t.Parallel()
	sb := dockertest.Start(t, dockertest.Options{})
	r := newRunner(t, Options{DockerHost: sb.FilterHost, ProbeAddr: "127.0.0.1:7777"})
	err := r.Ready(context.Background())
	if !errors.Is(err, sandbox.ErrNetworkDown) || !strings.Contains(err.Error(), "cannot reach the proxy at 127.0.0.1:7777 (Connection refused)") {
		t.Fatalf("Ready with nothing at the probe address: %v; want ErrNetworkDown naming the proxy and the reason", err)
	}
	fetch := sandbox.Request{Code: `await fetch("http://127.0.0.1:7778/")`, Timeout: 30 * time.Second, AllowHosts: []string{"127.0.0.1:7778"}}
	res, err := r.Run(context.Background(), fetch)
	if !errors.Is(err, sandbox.ErrNetworkDown) || strings.Contains(err.Error(), "os error") {
		t.Fatalf("a fetch with the path down: %+v, %v; want ErrNetworkDown without the raw OS error", res, err)
	}

	dockertest.Docker(t, "exec", "-d", "-u", "10001:10001", sb.ID, "deno", "eval",
		`for await (const c of Deno.listen({ hostname: "127.0.0.1", port: 7777 })) c.close();`)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		err = r.Ready(sandbox.FreshReady(context.Background()))
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Ready with the listener up: %v", err)
		}
	}
	res, err = r.Run(context.Background(), fetch)
	if err != nil || res.ExitCode == 0 || !strings.Contains(res.Stderr, "os error") {
		t.Errorf("a failing fetch with the path up: %+v, %v; want the code's own error as its result", res, err)
	}
}

// TestNewRejectsBadOptions: each bad option is refused with its name.
func TestNewRejectsBadOptions(t *testing.T) {
	for _, tc := range []struct {
		opts Options
		want string
	}{
		{Options{DockerHost: "tcp://127.0.0.1:2375"}, "DockerHost"},
		{Options{Container: "a/b"}, "Container"},
		{Options{MemoryMB: -1}, "MemoryMB"},
		{Options{Grace: -time.Second}, "Grace"},
		{Options{SkillsDir: "skills"}, "SkillsDir"},
		{Options{ProbeAddr: "proxy:3128"}, "ProbeAddr"},
		{Options{ProbeAddr: "192.0.2.1"}, "ProbeAddr"},
	} {
		if _, err := New(tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v): %v, want an error about %s", tc.opts, err, tc.want)
		}
	}
}

// TestFullTmpSaysSo: when the sandbox's /tmp is full anyway (something
// else filled it), a run fails with an error that says what is full and
// what to do, and Ready says so too, instead of an I/O error from deep
// inside.
func TestFullTmpSaysSo(t *testing.T) {
	t.Parallel()
	sb := dockertest.Start(t, dockertest.Options{TmpfsMB: 8})
	r := newRunner(t, Options{DockerHost: sb.FilterHost})
	mustRun(t, r, sandbox.Request{Code: `console.log(1)`})
	// Fill it from outside (cat stops at the first write that fails).
	sb.Exec(t, "sh", "-c", "cat /usr/local/bin/deno > /tmp/filler 2>/dev/null; true")
	res, err := r.Run(context.Background(), sandbox.Request{Code: `console.log(1)`, Timeout: 30 * time.Second})
	if err == nil || !strings.Contains(err.Error(), "full") || !strings.Contains(err.Error(), "/tmp") {
		t.Errorf("run on a full /tmp: %+v, %v; want an error saying /tmp is full", res, err)
	}
	if err := r.Ready(context.Background()); err == nil || !strings.Contains(err.Error(), "full") {
		t.Errorf("Ready on a full /tmp: %v; want it to say /tmp is full", err)
	}
}
