package local

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/codeforge/codeforge/internal/testenv"
	"github.com/codeforge/codeforge/sandbox"
	"github.com/codeforge/codeforge/settings"
)

// newRunner builds a Runner on a real deno with fresh skills and scratch
// directories; mod may adjust the options.
func newRunner(t testing.TB, mod func(*Options)) *Runner {
	t.Helper()
	opts := Options{
		DenoPath:    testenv.Deno(t),
		SkillsDir:   t.TempDir(),
		ScratchRoot: filepath.Join(t.TempDir(), "runs"),
	}
	if mod != nil {
		mod(&opts)
	}
	r, err := New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// run runs code with a generous timeout and fails the test on an error.
func run(t *testing.T, r *Runner, req sandbox.Request) *sandbox.Result {
	t.Helper()
	if req.Timeout == 0 {
		req.Timeout = 60 * time.Second
	}
	res, err := r.Run(t.Context(), req)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return res
}

func TestRunBasics(t *testing.T) {
	t.Parallel()
	r := newRunner(t, nil)
	tests := []struct {
		name       string
		code       string
		wantStdout string
		wantStderr string // substring
		wantExit   int
	}{
		{"hello world", `console.log("hello, world")`, "hello, world\n", "", 0},
		{"typescript", `const n: number = 40; console.log(n + 2)`, "42\n", "", 0},
		{"stderr", `console.error("to stderr"); console.log("to stdout")`, "to stdout\n", "to stderr\n", 0},
		{"uncaught error exits 1", `console.log("before"); throw new Error("boom")`, "before\n", "Error: boom", 1},
		{"syntax error", `console.log(`, "", "error", 1},
		{"Deno.exit(3)", `console.log("bye"); Deno.exit(3)`, "bye\n", "", 3},
		{"top-level await", `await new Promise((r) => setTimeout(r, 10)); console.log("done")`, "done\n", "", 0},
		{"empty code", ``, "", "", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res := run(t, r, sandbox.Request{Code: tc.code})
			if res.Stdout != tc.wantStdout {
				t.Errorf("stdout %q, want %q", res.Stdout, tc.wantStdout)
			}
			if !strings.Contains(res.Stderr, tc.wantStderr) || (tc.wantStderr == "" && res.Stderr != "") {
				t.Errorf("stderr %q, want it to contain %q", res.Stderr, tc.wantStderr)
			}
			if res.ExitCode != tc.wantExit {
				t.Errorf("exit code %d, want %d (stderr %q)", res.ExitCode, tc.wantExit, res.Stderr)
			}
			if res.TimedOut || res.OutOfMemory || res.Truncated || res.DroppedBytes != 0 || res.Duration <= 0 {
				t.Errorf("unexpected flags: %+v", res)
			}
		})
	}
}

// pidLine reads the pid the code printed as its first line.
func pidLine(t *testing.T, stdout string) int {
	t.Helper()
	first, _, _ := strings.Cut(stdout, "\n")
	pid, err := strconv.Atoi(first)
	if err != nil || pid <= 1 {
		t.Fatalf("code did not print its pid first: stdout %q", stdout)
	}
	return pid
}

// assertGone checks that the process and its whole process group are gone.
func assertGone(t *testing.T, pid int) {
	t.Helper()
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("/proc/%d still exists after Run returned (err %v)", pid, err)
	}
	if err := syscall.Kill(-pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("process group %d still exists after Run returned: kill(-pid, 0) = %v", pid, err)
	}
}

func TestRunTimeoutKeepsPartialOutputAndKillsGroup(t *testing.T) {
	t.Parallel()
	r := newRunner(t, nil)
	res, err := r.Run(t.Context(), sandbox.Request{
		Code:    `console.log(Deno.pid); console.log("partial"); console.error("err partial"); while (true) {}`,
		Timeout: 3 * time.Second, // deno must start and print first, on a busy machine
	})
	if err != nil {
		t.Fatalf("a timeout must be a result, not an error: %v", err)
	}
	if !res.TimedOut || res.OutOfMemory {
		t.Errorf("TimedOut %v, OutOfMemory %v; want true, false", res.TimedOut, res.OutOfMemory)
	}
	if !strings.HasSuffix(res.Stdout, "\npartial\n") || res.Stderr != "err partial\n" {
		t.Errorf("partial output lost: stdout %q, stderr %q", res.Stdout, res.Stderr)
	}
	if res.ExitCode != 128+int(syscall.SIGKILL) {
		t.Errorf("exit code %d, want %d (SIGKILL)", res.ExitCode, 128+int(syscall.SIGKILL))
	}
	if res.Duration < 3*time.Second {
		t.Errorf("duration %v is shorter than the 3s timeout", res.Duration)
	}
	assertGone(t, pidLine(t, res.Stdout))
}

// TestRunCancelKillsAndSeesMinimalEnv starts a run that waits forever,
// reads its real environment from /proc while it runs, then cancels it.
func TestRunCancelKillsAndSeesMinimalEnv(t *testing.T) {
	t.Parallel()
	caFile := testenv.NewCA(t).WritePEM(t, t.TempDir())
	r := newRunner(t, func(o *Options) { o.CACertFile = caFile })
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	pids := make(chan int, 1)
	var environ, limits []byte
	var readErr error
	const proxyURL = "http://run-1:s3cret@127.0.0.1:9"
	res, err := r.Run(ctx, sandbox.Request{
		Code:       `console.log(Deno.pid); await new Promise(() => setInterval(() => {}, 1000));`,
		Timeout:    10 * time.Minute,
		AllowHosts: []string{"api.codeforge.test"},
		ProxyURL:   proxyURL,
		OnStdoutLine: func(line string) {
			pid, _ := strconv.Atoi(line)
			environ, readErr = os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
			if readErr == nil {
				limits, readErr = os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
			}
			pids <- pid
			cancel()
		},
	})
	if res != nil || !errors.Is(err, context.Canceled) {
		t.Fatalf("Run after cancel = %+v, %v; want nil and an error wrapping context.Canceled", res, err)
	}
	pid := <-pids
	assertGone(t, pid)
	if readErr != nil {
		t.Fatalf("read the run's environment: %v", readErr)
	}
	wantLimit := strconv.Itoa((DefaultMemoryMB + DefaultExtraMemoryMB) << 20)
	if !regexp.MustCompile(`(?m)^Max data size +` + wantLimit + ` +` + wantLimit + ` +bytes`).Match(limits) {
		t.Errorf("the run's data size is not limited to %s bytes:\n%s", wantLimit, limits)
	}
	got := map[string]string{}
	for kv := range strings.SplitSeq(strings.TrimRight(string(environ), "\x00"), "\x00") {
		k, v, _ := strings.Cut(kv, "=")
		got[k] = v
	}
	home := got["HOME"]
	if filepath.Dir(home) != r.scratchRoot || !strings.HasPrefix(filepath.Base(home), "run-") {
		t.Errorf("HOME=%q, want a run directory under %s", home, r.scratchRoot)
	}
	want := map[string]string{
		"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": home, "TMPDIR": home, "DENO_DIR": home + ".deno", "DENO_EMIT_CACHE_MODE": "disable",
		"NO_COLOR": "1", "DENO_NO_UPDATE_CHECK": "1", "DENO_NO_PROMPT": "1",
		"HTTPS_PROXY": proxyURL, "HTTP_PROXY": proxyURL, "https_proxy": proxyURL, "http_proxy": proxyURL,
		"NO_PROXY": "", "no_proxy": "",
		"DENO_CERT": caFile,
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("env %s=%q (set %v), want %q", k, g, ok, v)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("env has %s, which the run must not get", k)
		}
	}
}

func TestRunParentDeadlineIsAnError(t *testing.T) {
	t.Parallel()
	r := newRunner(t, nil)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	res, err := r.Run(ctx, sandbox.Request{Code: `console.log(1)`, Timeout: time.Minute})
	if res != nil || !errors.Is(err, context.Canceled) {
		t.Errorf("Run with a canceled ctx = %+v, %v; want nil, context.Canceled", res, err)
	}
	assertNoRunDirs(t, r)
}

func TestRunOutOfMemory(t *testing.T) {
	t.Parallel()
	r := newRunner(t, func(o *Options) { o.MemoryMB = 64 })
	res := run(t, r, sandbox.Request{Code: `
		console.log("allocating");
		const keep = [];
		while (true) keep.push(new Array(1e6).fill(keep.length));
	`})
	if !res.OutOfMemory || res.TimedOut {
		t.Fatalf("OutOfMemory %v, TimedOut %v; want true, false (exit %d, stderr %q)", res.OutOfMemory, res.TimedOut, res.ExitCode, res.Stderr)
	}
	if res.ExitCode <= 128 || res.Stdout != "allocating\n" {
		t.Errorf("exit code %d (want a signal death, > 128), stdout %q", res.ExitCode, res.Stdout)
	}

	// Printing V8's message is not running out of memory.
	res = run(t, r, sandbox.Request{Code: `console.error("Fatal JavaScript out of memory: Reached heap limit"); Deno.exit(1)`})
	if res.OutOfMemory || res.ExitCode != 1 {
		t.Errorf("a fake OOM message: OutOfMemory %v, exit %d; want false, 1", res.OutOfMemory, res.ExitCode)
	}
}

func TestRunOffHeapMemoryIsLimited(t *testing.T) {
	t.Parallel()
	r := newRunner(t, func(o *Options) { o.MemoryMB = 64 })
	// 3 GB of ArrayBuffers (outside the V8 heap) against a 64+1024 MB limit.
	res := run(t, r, sandbox.Request{Code: `
		const keep = [];
		for (let i = 0; i < 30; i++) keep.push(new Uint8Array(100e6).fill(1));
		console.log("allocated 3 GB");
	`})
	if res.ExitCode == 0 || strings.Contains(res.Stdout, "allocated") || !strings.Contains(res.Stderr, "Array buffer allocation failed") {
		t.Errorf("exit %d, stdout %q, stderr %q; want an allocation failure", res.ExitCode, res.Stdout, res.Stderr)
	}
}

func TestRunOutputCap(t *testing.T) {
	t.Parallel()
	r := newRunner(t, nil)
	// 50 lines of 1 MiB + "\n" to stdout, 3 MiB to stderr, then a marker
	// on stderr that must be dropped too: the process is drained to its end.
	const mib = 1 << 20
	var lines, lineBytes atomic.Int64
	res := run(t, r, sandbox.Request{
		Code: `
			const chunk = "x".repeat(1 << 20);
			for (let i = 0; i < 50; i++) console.log(chunk);
			for (let i = 0; i < 3; i++) console.error(chunk);
			console.error("END");
		`,
		OnStdoutLine: func(s string) { lines.Add(1); lineBytes.Add(int64(len(s))) },
	})
	if res.ExitCode != 0 || res.TimedOut {
		t.Fatalf("exit %d, timed out %v: the flood must run to its end", res.ExitCode, res.TimedOut)
	}
	if !res.Truncated || len(res.Stdout) != DefaultMaxOutput || len(res.Stderr) != DefaultMaxOutput {
		t.Errorf("Truncated %v, kept stdout %d, stderr %d; want true, %d, %d", res.Truncated, len(res.Stdout), len(res.Stderr), DefaultMaxOutput, DefaultMaxOutput)
	}
	wantDropped := int64(50*(mib+1)-DefaultMaxOutput) + int64(3*(mib+1)+len("END\n")-DefaultMaxOutput)
	if res.DroppedBytes != wantDropped {
		t.Errorf("DroppedBytes %d, want %d", res.DroppedBytes, wantDropped)
	}
	if strings.Contains(res.Stderr, "END") {
		t.Error("stderr kept bytes past the cap")
	}
	if lineBytes.Load() != DefaultMaxOutput || lines.Load() == 0 {
		t.Errorf("OnStdoutLine got %d bytes in %d pieces, want the %d kept bytes", lineBytes.Load(), lines.Load(), DefaultMaxOutput)
	}

	// A request's own cap.
	res = run(t, r, sandbox.Request{Code: `console.log("0123456789")`, MaxOutput: 4})
	if res.Stdout != "0123" || !res.Truncated || res.DroppedBytes != 7 {
		t.Errorf("MaxOutput 4: stdout %q, truncated %v, dropped %d; want \"0123\", true, 7", res.Stdout, res.Truncated, res.DroppedBytes)
	}
}

func TestRunStdoutLines(t *testing.T) {
	t.Parallel()
	r := newRunner(t, nil)
	var mu sync.Mutex
	var got []string
	res := run(t, r, sandbox.Request{
		Code: `
			for (let i = 0; i < 1000; i++) console.log("line " + i);
			await Deno.stdout.write(new TextEncoder().encode("y".repeat(100000)));
		`,
		OnStdoutLine: func(s string) { mu.Lock(); got = append(got, s); mu.Unlock() },
	})
	mu.Lock()
	defer mu.Unlock()
	if len(got) < 1000 {
		t.Fatalf("got %d lines, want at least 1000", len(got))
	}
	for i := range 1000 {
		if want := "line " + strconv.Itoa(i); got[i] != want {
			t.Fatalf("line %d is %q, want %q", i, got[i], want)
		}
	}
	// The final 100 kB without a newline comes in bounded pieces.
	tail := got[1000:]
	if len(tail) < 2 || strings.Join(tail, "") != strings.Repeat("y", 100000) {
		t.Errorf("the long final line came in %d pieces totalling %d bytes", len(tail), len(strings.Join(tail, "")))
	}
	for _, p := range tail {
		if len(p) > 16<<10 {
			t.Errorf("a piece of %d bytes, over the 16 KiB bound", len(p))
		}
	}
	if want := strings.Join(got[:1000], "\n") + "\n" + strings.Join(tail, ""); res.Stdout != want {
		t.Errorf("stdout (%d bytes) is not the lines delivered (%d bytes)", len(res.Stdout), len(want))
	}
}

// probeCode runs each probe and prints a JSON object of probe name to
// "denied" (a NotCapable error), "allowed", or the error it threw.
func probeCode(probes map[string]string) string {
	var b strings.Builder
	b.WriteString("const out: Record<string, string> = {};\n")
	b.WriteString("async function probe(name: string, f: () => unknown) {\n" +
		"  try { await f(); out[name] = \"allowed\"; }\n" +
		"  catch (e) { out[name] = e instanceof Deno.errors.NotCapable ? \"denied\" : String(e); }\n}\n")
	for name, body := range probes {
		fmt.Fprintf(&b, "await probe(%q, async () => { %s });\n", name, body)
	}
	b.WriteString("console.log(JSON.stringify(out));\n")
	return b.String()
}

func runProbes(t *testing.T, r *Runner, req sandbox.Request, probes map[string]string) map[string]string {
	t.Helper()
	req.Code = probeCode(probes)
	res := run(t, r, req)
	var got map[string]string
	if err := json.Unmarshal([]byte(res.Stdout), &got); err != nil || res.ExitCode != 0 {
		t.Fatalf("probes failed: exit %d, stdout %q, stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	return got
}

func TestRunPermissionsDenied(t *testing.T) {
	t.Parallel()
	r := newRunner(t, nil)
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { hits.Add(1) }))
	t.Cleanup(srv.Close)
	outside := filepath.Join(t.TempDir(), "outside.txt")
	probes := map[string]string{
		"env get":             `Deno.env.get("HOME")`,
		"env toObject":        `Deno.env.toObject()`,
		"env set":             `Deno.env.set("X", "1")`,
		"command":             `await new Deno.Command("/bin/true").output()`,
		"spawn shell":         `new Deno.Command("/bin/sh", {args: ["-c", "echo hi"]}).spawn()`,
		"ffi":                 `Deno.dlopen("libc.so.6", {})`,
		"sys hostname":        `Deno.hostname()`,
		"sys osRelease":       `Deno.osRelease()`,
		"read /etc/passwd":    `await Deno.readTextFile("/etc/passwd")`,
		"read proc environ":   `await Deno.readTextFile("/proc/self/environ")`,
		"read scratch root":   fmt.Sprintf(`for await (const _ of Deno.readDir(%q)) {}`, r.scratchRoot),
		"read deno dir":       `for await (const _ of Deno.readDir(Deno.cwd() + ".deno")) {}`,
		"write outside":       fmt.Sprintf(`await Deno.writeTextFile(%q, "x")`, outside),
		"write deno dir":      `await Deno.writeTextFile(Deno.cwd() + ".deno/poison", "x")`,
		"write /tmp":          `await Deno.writeTextFile("/tmp/codeforge-escape", "x")`,
		"symlink out":         `await Deno.symlink("/etc/passwd", "link")`,
		"chdir out":           `Deno.chdir("/")`,
		"fetch without net":   fmt.Sprintf(`await fetch(%q)`, srv.URL),
		"connect without net": fmt.Sprintf(`await Deno.connect({hostname: "127.0.0.1", port: %s})`, srv.URL[strings.LastIndex(srv.URL, ":")+1:]),
		"node process.env":    `(await import("node:process")).default.env.HOME`,
		"node child_process":  `(await import("node:child_process")).execFileSync("/bin/true")`,
		"node fs":             `(await import("node:fs")).readFileSync("/etc/passwd")`,
		"node os":             `(await import("node:os")).hostname()`,
		"listen":              `Deno.listen({hostname: "127.0.0.1", port: 0})`,
	}
	got := runProbes(t, r, sandbox.Request{}, probes)
	for name := range probes {
		if got[name] != "denied" {
			t.Errorf("%s: %q, want denied", name, got[name])
		}
	}
	if hits.Load() != 0 {
		t.Errorf("the test server got %d requests", hits.Load())
	}
	if _, err := os.Stat(outside); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a file was written outside scratch and skills: %v", err)
	}
}

func TestRunRemoteModulesRefused(t *testing.T) {
	t.Parallel()
	r := newRunner(t, nil)
	var hits atomic.Int64
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		io.WriteString(w, `console.log("remote code ran")`)
	}))
	t.Cleanup(srv.Close)
	tests := []struct{ name, code, want string }{
		{"static https import", fmt.Sprintf(`import %q; console.log("loaded")`, srv.URL+"/mod.ts"), "--no-remote"},
		{"dynamic https import", fmt.Sprintf(`await import(%q); console.log("loaded")`, srv.URL+"/mod.ts"), "--no-remote"},
		{"jsr import", `import "jsr:@std/path"; console.log("loaded")`, "--no-remote"},
		{"npm import", `import "npm:left-pad"; console.log("loaded")`, "--no-npm"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// The module server is an allowed host: only the import
			// flags stand in the way.
			res := run(t, r, sandbox.Request{Code: tc.code, AllowHosts: []string{strings.TrimPrefix(srv.URL, "https://")}})
			refused := strings.Contains(res.Stderr, tc.want) || strings.Contains(res.Stderr, "Requires import access")
			if res.ExitCode == 0 || strings.Contains(res.Stdout, "loaded") || !refused {
				t.Errorf("exit %d, stdout %q, stderr %q; want a failure mentioning %s", res.ExitCode, res.Stdout, res.Stderr, tc.want)
			}
		})
	}
	t.Cleanup(func() {
		if hits.Load() != 0 {
			t.Errorf("the module server got %d requests", hits.Load())
		}
	})
}

func TestRunFilesystem(t *testing.T) {
	t.Parallel()
	r := newRunner(t, nil)
	if err := os.WriteFile(filepath.Join(r.skillsDir, "old.ts"), []byte("// old skill"), 0o644); err != nil {
		t.Fatal(err)
	}
	typesDir := t.TempDir()
	types := filepath.Join(typesDir, "types.d.ts")
	if err := os.WriteFile(types, []byte("declare const x: number;"), 0o644); err != nil {
		t.Fatal(err)
	}
	res := run(t, r, sandbox.Request{
		ReadPaths: []string{types},
		Code: fmt.Sprintf(`
			console.log(Deno.cwd());
			await Deno.writeTextFile("scratch.txt", "scratch data");
			console.log(await Deno.readTextFile("scratch.txt"));
			await Deno.mkdir("ro/sub", { recursive: true });
			await Deno.writeTextFile("ro/sub/f.txt", "x");
			await Deno.chmod("ro", 0o500);
			console.log(await Deno.readTextFile(%[1]q));
			await Deno.writeTextFile(%[2]q, "// new skill");
			console.log(await Deno.readTextFile(%[3]q));
			try { await Deno.writeTextFile(%[4]q, "x"); console.log("types writable"); }
			catch (e) { console.log(e instanceof Deno.errors.NotCapable ? "types read-only" : String(e)); }
		`, filepath.Join(r.skillsDir, "old.ts"), filepath.Join(r.skillsDir, "new.ts"), types, types),
	})
	lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
	want := []string{"", "scratch data", "// old skill", "declare const x: number;", "types read-only"}
	if res.ExitCode != 0 || len(lines) != len(want) {
		t.Fatalf("exit %d, stdout %q, stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	cwd := lines[0]
	if filepath.Dir(cwd) != r.scratchRoot {
		t.Errorf("cwd %q is not a run directory under %s", cwd, r.scratchRoot)
	}
	if !slices.Equal(lines[1:], want[1:]) {
		t.Errorf("stdout lines %q, want %q", lines[1:], want[1:])
	}
	if b, err := os.ReadFile(filepath.Join(r.skillsDir, "new.ts")); err != nil || string(b) != "// new skill" {
		t.Errorf("skill saved by the run: %q, %v", b, err)
	}
	if _, err := os.Stat(cwd); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("scratch dir %s survived the run: %v", cwd, err)
	}
	// The next run gets a different, empty directory.
	res = run(t, r, sandbox.Request{Code: `console.log(Deno.cwd()); for await (const e of Deno.readDir(".")) console.log(e.name);`})
	if got := strings.TrimSpace(res.Stdout); got == cwd || filepath.Dir(got) != r.scratchRoot {
		t.Errorf("second run: stdout %q, want a fresh directory (first was %s)", got, cwd)
	}
	assertNoRunDirs(t, r)
}

// assertNoRunDirs checks that no scratch directory is left behind.
func assertNoRunDirs(t *testing.T, r *Runner) {
	t.Helper()
	entries, err := os.ReadDir(r.scratchRoot)
	if err != nil {
		t.Fatal(err)
	}
	// Nothing at all: no scratch directory, no Deno cache.
	for _, e := range entries {
		t.Errorf("%s left behind in the scratch root", e.Name())
	}
}

func TestRunNetwork(t *testing.T) {
	t.Parallel()
	direct := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "direct ok") }))
	t.Cleanup(direct.Close)
	directHost := strings.TrimPrefix(direct.URL, "http://")

	// A TLS API on loopback whose certificate names api.codeforge.test,
	// reached only through a CONNECT proxy that sends every tunnel to it:
	// nothing is ever resolved or dialled beyond loopback.
	ca := testenv.NewCA(t)
	cert, _, _ := ca.Leaf(t, "api.codeforge.test", "*.codeforge.test")
	caFile := ca.WritePEM(t, t.TempDir())
	api := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "api ok "+r.Host)
	}))
	api.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	api.Config.ErrorLog = log.New(io.Discard, "", 0) // the untrusted-CA case fails handshakes on purpose
	api.StartTLS()
	t.Cleanup(api.Close)
	proxy := newConnectProxy(t, api.Listener.Addr().String())
	r := newRunner(t, func(o *Options) { o.CACertFile = caFile })

	t.Run("allowed host directly", func(t *testing.T) {
		t.Parallel()
		res := run(t, r, sandbox.Request{AllowHosts: []string{directHost}, Code: fmt.Sprintf(`console.log(await (await fetch(%q)).text())`, direct.URL)})
		if res.Stdout != "direct ok\n" {
			t.Errorf("exit %d, stdout %q, stderr %q", res.ExitCode, res.Stdout, res.Stderr)
		}
	})
	t.Run("other hosts denied", func(t *testing.T) {
		t.Parallel()
		got := runProbes(t, r, sandbox.Request{AllowHosts: []string{"api.codeforge.test"}, ProxyURL: proxy.url("run-a", "secret-a")}, map[string]string{
			"loopback":   fmt.Sprintf(`await fetch(%q)`, direct.URL),
			"other name": `await fetch("https://other.codeforge.test/")`,
		})
		if got["loopback"] != "denied" || got["other name"] != "denied" {
			t.Errorf("probes %v, want both denied", got)
		}
	})
	t.Run("through the proxy with its CA", func(t *testing.T) {
		t.Parallel()
		res := run(t, r, sandbox.Request{
			AllowHosts: []string{"api.codeforge.test"},
			ProxyURL:   proxy.url("run-b", "secret-b"),
			Code:       `console.log(await (await fetch("https://api.codeforge.test/hello")).text())`,
		})
		if res.Stdout != "api ok api.codeforge.test\n" {
			t.Errorf("exit %d, stdout %q, stderr %q", res.ExitCode, res.Stdout, res.Stderr)
		}
		if !proxy.saw("api.codeforge.test:443", "run-b", "secret-b") {
			t.Errorf("the proxy saw no CONNECT for api.codeforge.test with the run's identity; saw %v", proxy.all())
		}
	})
	t.Run("without the CA the proxy is not trusted", func(t *testing.T) {
		t.Parallel()
		plain := newRunner(t, nil)
		res := run(t, plain, sandbox.Request{
			AllowHosts: []string{"api.codeforge.test"},
			ProxyURL:   proxy.url("run-d", "secret-d"),
			Code:       `await fetch("https://api.codeforge.test/")`,
		})
		if res.ExitCode == 0 || !strings.Contains(strings.ToLower(res.Stderr), "certificate") {
			t.Errorf("exit %d, stderr %q; want a certificate error", res.ExitCode, res.Stderr)
		}
	})
}

// connectProxy is a minimal HTTP CONNECT proxy that records each tunnel's
// target and credentials and connects every tunnel to one loopback address.
type connectProxy struct {
	addr string
	mu   sync.Mutex
	seen []string // "host:port user:pass"
}

func newConnectProxy(t *testing.T, upstream string) *connectProxy {
	p := &connectProxy{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(r.Header.Get("Proxy-Authorization"), "Basic "))
		p.mu.Lock()
		p.seen = append(p.seen, r.Host+" "+string(user))
		p.mu.Unlock()
		if r.Method != http.MethodConnect {
			http.Error(w, "CONNECT only", http.StatusMethodNotAllowed)
			return
		}
		up, err := net.Dial("tcp", upstream)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			up.Close()
			return
		}
		io.WriteString(conn, "HTTP/1.1 200 Connection established\r\n\r\n")
		go func() { io.Copy(up, buf); up.Close() }()
		io.Copy(conn, up)
		conn.Close()
	}))
	t.Cleanup(srv.Close)
	p.addr = srv.Listener.Addr().String()
	return p
}

func (p *connectProxy) url(user, pass string) string {
	return "http://" + user + ":" + pass + "@" + p.addr
}

func (p *connectProxy) saw(hostPort, user, pass string) bool {
	return slices.Contains(p.all(), hostPort+" "+user+":"+pass)
}

func (p *connectProxy) all() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.seen)
}

func TestRunConcurrent(t *testing.T) {
	t.Parallel()
	r := newRunner(t, nil)
	var wg sync.WaitGroup
	errs := make([]error, 10)
	for i := range 10 {
		wg.Go(func() {
			res, err := r.Run(t.Context(), sandbox.Request{
				Timeout: 2 * time.Minute,
				Code:    fmt.Sprintf(`await Deno.writeTextFile("n.txt", "%d"); await new Promise((r) => setTimeout(r, 100)); console.log(await Deno.readTextFile("n.txt"))`, i),
			})
			switch {
			case err != nil:
				errs[i] = err
			case res.Stdout != strconv.Itoa(i)+"\n" || res.ExitCode != 0:
				errs[i] = fmt.Errorf("run %d: exit %d, stdout %q, stderr %q", i, res.ExitCode, res.Stdout, res.Stderr)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Error(err)
	}
	assertNoRunDirs(t, r)
}

func TestRunBadRequests(t *testing.T) {
	t.Parallel()
	r := newRunner(t, nil)
	tests := []struct {
		name string
		req  sandbox.Request
		want string
	}{
		{"zero timeout", sandbox.Request{Code: "1"}, "timeout is 0s: want a positive duration"},
		{"negative timeout", sandbox.Request{Timeout: -time.Second}, "timeout is -1s"},
		{"negative max output", sandbox.Request{Timeout: time.Second, MaxOutput: -1}, "max output is -1 bytes"},
		{"host list smuggled in one host", sandbox.Request{Timeout: time.Second, AllowHosts: []string{"a.com,evil.com"}}, `allowed host "a.com,evil.com"`},
		{"host with space", sandbox.Request{Timeout: time.Second, AllowHosts: []string{"a.com --allow-all"}}, "is not a host name"},
		{"empty host", sandbox.Request{Timeout: time.Second, AllowHosts: []string{""}}, `allowed host ""`},
		{"host with path", sandbox.Request{Timeout: time.Second, AllowHosts: []string{"a.com/x"}}, "is not a host name"},
		{"relative read path", sandbox.Request{Timeout: time.Second, ReadPaths: []string{"types.d.ts"}}, "must be an absolute path"},
		{"read path with comma", sandbox.Request{Timeout: time.Second, ReadPaths: []string{"/a,/etc"}}, "must be an absolute path without commas"},
		{"bad proxy scheme", sandbox.Request{Timeout: time.Second, ProxyURL: "socks5://u:topsecret@127.0.0.1:1"}, "proxy URL is not an http://"},
		{"proxy without host", sandbox.Request{Timeout: time.Second, ProxyURL: "http://"}, "proxy URL is not"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res, err := r.Run(t.Context(), tc.req)
			if err == nil || res != nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Run = %+v, %v; want an error containing %q", res, err, tc.want)
			}
			if strings.Contains(err.Error(), "topsecret") {
				t.Errorf("the error echoes the proxy secret: %v", err)
			}
		})
	}
	t.Cleanup(func() { assertNoRunDirs(t, r) })
}

func TestNewValidatesOptions(t *testing.T) {
	t.Parallel()
	deno := testenv.Deno(t)
	dir := t.TempDir()
	notExec := filepath.Join(dir, "not-exec")
	notPEM := filepath.Join(dir, "not.pem")
	for _, f := range []string{notExec, notPEM} {
		if err := os.WriteFile(f, []byte("hello"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name string
		opts Options
		want string
	}{
		{"no deno", Options{SkillsDir: dir}, "DenoPath is required"},
		{"missing deno", Options{DenoPath: filepath.Join(dir, "nope"), SkillsDir: dir}, "no such file"},
		{"deno not executable", Options{DenoPath: notExec, SkillsDir: dir}, "is not an executable file"},
		{"deno is a directory", Options{DenoPath: dir, SkillsDir: dir}, "is not an executable file"},
		{"no skills dir", Options{DenoPath: deno}, "SkillsDir is required"},
		{"relative skills dir", Options{DenoPath: deno, SkillsDir: "skills"}, "must be an absolute path"},
		{"missing skills dir", Options{DenoPath: deno, SkillsDir: filepath.Join(dir, "nope")}, "create the directory first"},
		{"skills dir is a file", Options{DenoPath: deno, SkillsDir: notExec}, "is not a directory"},
		{"negative memory", Options{DenoPath: deno, SkillsDir: dir, MemoryMB: -1}, "MemoryMB is -1"},
		{"negative extra memory", Options{DenoPath: deno, SkillsDir: dir, ExtraMemoryMB: -1}, "ExtraMemoryMB is -1"},
		{"missing CA", Options{DenoPath: deno, SkillsDir: dir, CACertFile: filepath.Join(dir, "nope.pem")}, "CACertFile"},
		{"CA not PEM", Options{DenoPath: deno, SkillsDir: dir, CACertFile: notPEM}, "holds no PEM CERTIFICATE"},
		{"relative scratch root", Options{DenoPath: deno, SkillsDir: dir, ScratchRoot: "runs"}, "ScratchRoot \"runs\" must be an absolute path"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			scratch := filepath.Join(t.TempDir(), "runs")
			if tc.opts.ScratchRoot == "" {
				tc.opts.ScratchRoot = scratch
			}
			r, err := New(tc.opts)
			if err == nil || r != nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New = %v, %v; want an error containing %q", r, err, tc.want)
			}
			if _, err := os.Stat(scratch); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a failed New created %s", scratch)
			}
		})
	}
}

func TestEnvAndReady(t *testing.T) {
	t.Parallel()
	skills := t.TempDir()
	link := filepath.Join(t.TempDir(), "skills-link")
	if err := os.Symlink(skills, link); err != nil {
		t.Fatal(err)
	}
	r := newRunner(t, func(o *Options) { o.SkillsDir = link })
	env := r.Env()
	want := sandbox.Environment{Backend: "local", ScratchNote: ScratchNote, SkillsDir: skills, OutDir: OutDirDescription}
	if env != want {
		t.Errorf("Env() = %+v, want %+v", env, want)
	}
	if err := r.Ready(t.Context()); err != nil {
		t.Errorf("Ready: %v", err)
	}
	r.Close()
	if err := r.Ready(t.Context()); err == nil {
		t.Error("Ready after Close: nil error")
	}
	if _, err := r.Run(t.Context(), sandbox.Request{Code: "1", Timeout: time.Second}); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("Run after Close: %v, want a closed error", err)
	}
}

func TestReadyReportsBrokenDeno(t *testing.T) {
	t.Parallel()
	fake := filepath.Join(t.TempDir(), "deno")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\necho broken >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	r := newRunner(t, func(o *Options) { o.DenoPath = fake })
	if err := r.Ready(t.Context()); err == nil || !strings.HasPrefix(err.Error(), "starting: ") || !strings.Contains(err.Error(), "broken") {
		t.Errorf("Ready with a broken deno: %v", err)
	}
}

func TestFindDeno(t *testing.T) {
	t.Parallel()
	real := testenv.DenoBinary(t)
	binDir := t.TempDir()
	fake := filepath.Join(binDir, "deno")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	emptyDir := t.TempDir()
	env := func(kv ...string) settings.Getenv {
		return func(k string) (string, bool) {
			for i := 0; i < len(kv); i += 2 {
				if kv[i] == k {
					return kv[i+1], true
				}
			}
			return "", false
		}
	}
	tests := []struct {
		name    string
		getenv  settings.Getenv
		want    string
		wantErr string
	}{
		{"DENO_BIN first", env("DENO_BIN", real, "PATH", binDir), real, ""},
		{"bad DENO_BIN", env("DENO_BIN", filepath.Join(emptyDir, "deno")), "", "DENO_BIN"},
		{"PATH", env("PATH", emptyDir+":"+binDir), fake, ""},
		{"nowhere", env("PATH", emptyDir), "", `deno not found: install it with "npm install --prefix .cache/deno @deno/linux-x64-glibc@2.9.6" or run ./run.sh`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := FindDeno(tc.getenv)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("FindDeno = %q, %v; want an error containing %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("FindDeno = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// TestFindDenoInCache finds deno where run.sh installs it, relative to the
// working directory (so it cannot run in parallel).
func TestFindDenoInCache(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, ".cache", "deno", "node_modules", "@deno", "linux-x64-glibc", "deno")
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	got, err := FindDeno(func(string) (string, bool) { return "", false })
	if err != nil || got != bin {
		t.Errorf("FindDeno = %q, %v; want %q", got, err, bin)
	}
}

func TestLifecycleLogs(t *testing.T) {
	t.Parallel()
	var buf syncBuffer
	r := newRunner(t, func(o *Options) { o.Logger = slog.New(slog.NewJSONHandler(&buf, nil)) })
	const secretCode = `console.log("a secret in the code: hunter2")`
	run(t, r, sandbox.Request{Code: secretCode})
	var msgs []string
	sc := bufio.NewScanner(strings.NewReader(buf.String()))
	for sc.Scan() {
		var rec map[string]any
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatal(err)
		}
		if rec["component"] != "sandbox" || rec["run"] == "" {
			t.Errorf("log record without component=sandbox and a run id: %v", rec)
		}
		msgs = append(msgs, rec["msg"].(string))
		if rec["msg"] == "done" {
			for _, k := range []string{"duration", "exit_code", "timed_out", "oom", "stdout_bytes", "stderr_bytes", "dropped_bytes"} {
				if _, ok := rec[k]; !ok {
					t.Errorf("done record lacks %s: %v", k, rec)
				}
			}
		}
	}
	if !slices.Equal(msgs, []string{"start", "done"}) {
		t.Errorf("log messages %q, want [start done]", msgs)
	}
	if strings.Contains(buf.String(), "hunter2") {
		t.Error("the log holds the code or its output")
	}
}

// syncBuffer is a log sink safe for concurrent writes.
type syncBuffer = testenv.LogBuffer

// TestRunGigabyteFloodKeepsMemoryFlat floods 1 GiB of stdout (half of it
// as one line with no newline) and checks the Go heap never grows by more
// than a small multiple of the output cap while the run is drained.
func TestRunGigabyteFloodKeepsMemoryFlat(t *testing.T) {
	r := newRunner(t, nil)
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	var peak atomic.Uint64
	done := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		var m runtime.MemStats
		for {
			runtime.ReadMemStats(&m)
			if m.HeapInuse > peak.Load() {
				peak.Store(m.HeapInuse)
			}
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	var lineBytes atomic.Int64
	res := run(t, r, sandbox.Request{
		Timeout: 5 * time.Minute,
		Code: `
			const line = new TextEncoder().encode("z".repeat((1 << 20) - 1) + "\n");
			const noNewline = new TextEncoder().encode("w".repeat(1 << 20));
			const writeAll = async (b: Uint8Array) => { for (let n = 0; n < b.length;) n += await Deno.stdout.write(b.subarray(n)); };
			for (let i = 0; i < 512; i++) await writeAll(line);
			for (let i = 0; i < 512; i++) await writeAll(noNewline);
		`,
		OnStdoutLine: func(s string) { lineBytes.Add(int64(len(s))) },
	})
	close(done)
	<-sampled
	if res.ExitCode != 0 || len(res.Stdout) != DefaultMaxOutput || res.DroppedBytes != 1<<30-DefaultMaxOutput {
		t.Fatalf("exit %d, kept %d, dropped %d; want 0, %d, %d (stderr %q)", res.ExitCode, len(res.Stdout), res.DroppedBytes, DefaultMaxOutput, 1<<30-DefaultMaxOutput, res.Stderr)
	}
	growth := int64(peak.Load()) - int64(before.HeapInuse)
	t.Logf("Go heap in use grew by at most %.1f MiB during the flood", float64(growth)/(1<<20))
	if growth > 32<<20 {
		t.Errorf("the Go heap grew by %d MiB during a 1 GiB flood; want at most 32 MiB", growth>>20)
	}
	if lineBytes.Load() > DefaultMaxOutput {
		t.Errorf("OnStdoutLine got %d bytes, more than the %d kept", lineBytes.Load(), DefaultMaxOutput)
	}
}

// TestRunOutDirHook: OnOutDir sees the run's out/ after the code ended and
// before the scratch directory goes; stderr lines reach OnStderrLine.
func TestRunOutDirHook(t *testing.T) {
	t.Parallel()
	r := newRunner(t, nil)
	var seen map[string]string
	var dirSeen string
	var stderrLines []string
	res, err := r.Run(t.Context(), sandbox.Request{
		Code:         `await Deno.mkdir("out"); await Deno.writeTextFile("out/a.txt", "A"); console.error("e1"); console.error("e2")`,
		Timeout:      30 * time.Second,
		OnStderrLine: func(l string) { stderrLines = append(stderrLines, l) },
		OnOutDir: func(dir string, skipped []string) {
			dirSeen = dir
			seen = map[string]string{}
			entries, _ := os.ReadDir(dir)
			for _, e := range entries {
				b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
				seen[e.Name()] = string(b)
			}
			if skipped != nil {
				t.Errorf("skipped = %q, want nil from the local backend", skipped)
			}
		},
	})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("Run = %+v, %v", res, err)
	}
	if seen["a.txt"] != "A" || len(seen) != 1 {
		t.Fatalf("out/ seen by the hook: %q", seen)
	}
	if _, err := os.Stat(dirSeen); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("scratch out/ %s still there after the run: %v", dirSeen, err)
	}
	if strings.Join(stderrLines, ",") != "e1,e2" {
		t.Fatalf("stderr lines = %q", stderrLines)
	}
}
