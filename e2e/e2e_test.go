package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestE2E brings one stack up and runs every end-to-end check against it,
// in order: behaviour and isolation first, then the faults, each of which
// leaves the stack healthy again for the next.
func TestE2E(t *testing.T) {
	st := startStack(t)
	cs := st.connect(t, nil)

	t.Run("HelloWorld", func(t *testing.T) { testHelloWorld(t, cs) })
	t.Run("ListAPIsShowsNamesNotSecrets", func(t *testing.T) { testListAPIs(t, st, cs) })
	t.Run("CredentialSubstitution", func(t *testing.T) { testCredentialSubstitution(t, st, cs) })
	t.Run("SecretAddedWithoutRestart", func(t *testing.T) { testSecretAddedWithoutRestart(t, st, cs, true) })
	t.Run("RestrictedMethod", func(t *testing.T) { testRestrictedMethod(t, st, cs) })
	t.Run("UnconfiguredHostBlocked", func(t *testing.T) { testUnconfiguredHost(t, cs) })
	t.Run("RawTCPOnlyToProxy", func(t *testing.T) { testRawTCP(t, st, cs) })
	t.Run("Skills", func(t *testing.T) { testSkills(t, st) })
	t.Run("SandboxIsolation", func(t *testing.T) { testSandboxIsolation(t, st, cs) })
	t.Run("TimeoutLeavesNoProcess", func(t *testing.T) { testTimeoutLeavesNoProcess(t, st, cs) })
	t.Run("ConcurrentRuns", func(t *testing.T) { testConcurrentRuns(t, st) })
	t.Run("OutputFlood", func(t *testing.T) { testOutputFlood(t, st, cs) })
	t.Run("SandboxKilledMidRun", func(t *testing.T) { testSandboxKilled(t, st, cs) })
	t.Run("ProxyDown", func(t *testing.T) { testProxyDown(t, st, cs) })
}

func testHelloWorld(t *testing.T, cs *mcp.ClientSession) {
	res := run(t, cs, `console.log("hello world")`, nil)
	if res.IsError || stdout(res) != "hello world\n" {
		t.Fatalf("execute_code hello world: isError=%v %q", res.IsError, text(res))
	}
	if out := structured(t, res); out.ExitCode != 0 || out.TimedOut || out.Truncated {
		t.Fatalf("structuredContent = %+v", out)
	}
}

func testListAPIs(t *testing.T, st *stack, cs *mcp.ClientSession) {
	res := call(t, cs, "list_apis", map[string]any{})
	raw, _ := json.Marshal(res)
	if res.IsError || !strings.Contains(string(raw), tokenName) || !strings.Contains(string(raw), `"`+apiHost+`"`) {
		t.Fatalf("list_apis does not show the test API with its token name: %s", raw)
	}
	if strings.Contains(string(raw), st.secret) {
		t.Fatal("list_apis shows the secret value")
	}
}

// echoFetch is code that calls the test API and prints the status and the
// echo it got back.
func echoFetch(method string, headers map[string]string) string {
	return echoFetchHost(apiHost, method, headers)
}

// echoFetchHost is echoFetch to the test API under another of its names.
func echoFetchHost(host, method string, headers map[string]string) string {
	h, _ := json.Marshal(headers)
	return fmt.Sprintf(`const r = await fetch("https://%s/echo?q=1", {method: %q, headers: %s});
console.log(r.status);
console.log(await r.text());`, host, method, h)
}

func testCredentialSubstitution(t *testing.T, st *stack, cs *mcp.ClientSession) {
	res := run(t, cs, echoFetch("GET", map[string]string{"Authorization": "Bearer " + tokenName}), map[string]any{"apis": []string{apiName}})
	out := text(res)
	if res.IsError {
		t.Fatalf("fetch through the proxy failed: %s", out)
	}
	checkEcho(t, st, res)
	net := structured(t, res).Network
	if !slices.ContainsFunc(net, func(e netEntry) bool { return e.Host == apiHost && e.Injected && e.Status == 200 }) {
		t.Errorf("network log %+v has no injected request to %s", net, apiHost)
	}
}

// The API the README's "Adding an API" flow adds to the running stack:
// the test API under its second name, with a secret in a new variable.
const (
	addedAPIName   = "added"
	addedAPIHost   = "api2" // an alias of the api service (e2e/compose.test.yml)
	addedTokenName = "ADDED_TOKEN"
	addedVariable  = "E2E_ADDED_SECRET"
)

// testSecretAddedWithoutRestart follows the README's "Adding an API" on
// the running Docker stack: a new API config whose secret is a new
// variable, that variable appended to .env (the stack's env file, mounted
// where the proxy reads .env), the documented reload (docker compose kill
// -s HUP proxy server). A run then reaches the API with the real secret
// substituted, and never sees it; the process environment still wins over
// the file; no container was restarted or recreated. With env_file, read
// only when the container is created, the new variable never arrives.
// Last, the file replaced on the host (as editors and sed -i save): the
// proxy, which keeps seeing the old file through its mount, says so and
// how to fix it. perRunLog: runs have a network log of their own (explicit
// mode; transparent mode has none).
func testSecretAddedWithoutRestart(t *testing.T, st *stack, cs *mcp.ClientSession, perRunLog bool) {
	before := st.containerStates(t)
	secret := "e2e-added-" + randomHex(t, 16)

	dir := filepath.Join(st.dir, "apis", addedAPIName)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg, err := json.Marshal(map[string]any{
		"description": "an API added while the stack runs",
		"domains":     []string{addedAPIHost},
		"credentials": map[string]string{addedTokenName: "${" + addedVariable + "}"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	f, err := os.OpenFile(st.envFile(), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Fprintf(f, "%s=%s\n", addedVariable, secret); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	st.mustCompose(t, "kill", "-s", "HUP", "proxy", "server")

	// The signal is handled in the background: try until a run gets through.
	code := echoFetchHost(addedAPIHost, "GET", map[string]string{"Authorization": "Bearer " + addedTokenName})
	var res *mcp.CallToolResult
	deadline := time.Now().Add(time.Minute)
	for {
		res = run(t, cs, code, map[string]any{"apis": []string{addedAPIName}})
		if raw, _ := json.Marshal(res); strings.Contains(string(raw), secret) {
			t.Fatalf("the new secret reached the sandbox's output: %s", raw)
		}
		if strings.HasPrefix(stdout(res), "200\n") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no run reached the added API within a minute of the reload (a secret added to .env needs no restart); last result: %s\nproxy log:\n%s",
				text(res), st.mustCompose(t, "logs", "--no-color", "--tail", "20", "proxy"))
		}
		time.Sleep(time.Second)
	}
	checkEchoSecret(t, res, addedTokenName, secret)
	if net := structured(t, res).Network; perRunLog && !slices.ContainsFunc(net, func(e netEntry) bool { return e.Host == addedAPIHost && e.Injected && e.Status == 200 }) {
		t.Errorf("network log %+v has no injected request to %s", net, addedAPIHost)
	}
	// The file names E2E_API_SECRET too, with another value: the proxy's
	// environment wins, after the reload as before it.
	checkEcho(t, st, run(t, cs, echoFetch("GET", map[string]string{"Authorization": "Bearer " + tokenName}), map[string]any{"apis": []string{apiName}}))

	if after := st.containerStates(t); !maps.Equal(before, after) {
		t.Errorf("containers were restarted or recreated by the reload:\nbefore %v\nafter  %v", before, after)
	}

	// Replaced, not edited in place: the mount keeps the old file.
	replacement := st.envFile() + ".new"
	if err := os.WriteFile(replacement, []byte(addedVariable+"=replaced-"+secret+"\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(replacement, st.envFile()); err != nil {
		t.Fatal(err)
	}
	st.mustCompose(t, "kill", "-s", "HUP", "proxy")
	waitFor(t, time.Minute, "the proxy to report the replaced .env", func() bool {
		return strings.Contains(st.mustCompose(t, "logs", "--no-color", "proxy"), "replaced on the host")
	})
	if logs := st.mustCompose(t, "logs", "--no-color", "proxy"); !strings.Contains(logs, "--force-recreate proxy") {
		t.Errorf("the proxy's report does not say how to fix it:\n%s", logs)
	}
}

// containerStates identifies each of the stack's containers and its run:
// ID, start time and restart count, by service.
func (st *stack) containerStates(t *testing.T) map[string]string {
	t.Helper()
	states := map[string]string{}
	for _, svc := range []string{"api", "dockerfilter", "netguard", "proxy", "sandbox", "server"} {
		id := st.container(t, svc)
		states[svc] = id[:12] + " " + inspect(t, id, "{{.State.StartedAt}} restarts={{.RestartCount}}")
	}
	return states
}

func testRestrictedMethod(t *testing.T, st *stack, cs *mcp.ClientSession) {
	for _, c := range []struct {
		name, method string
		headers      map[string]string
	}{
		{"DELETE", "DELETE", map[string]string{"Authorization": "Bearer " + tokenName}},
		{"override header", "POST", map[string]string{"X-HTTP-Method-Override": "DELETE"}},
	} {
		res := run(t, cs, echoFetch(c.method, c.headers), map[string]any{"apis": []string{apiName}})
		status, body, _ := strings.Cut(stdout(res), "\n")
		if status != "403" {
			t.Errorf("%s: status %q, want 403; output %s", c.name, status, text(res))
		}
		if !strings.Contains(strings.ToLower(body), "permanent") {
			t.Errorf("%s: the 403 does not say the restriction is permanent: %s", c.name, body)
		}
	}
	if logs := st.mustCompose(t, "logs", "--no-color", "api"); strings.Contains(logs, "method=DELETE") ||
		regexp.MustCompile(`method=POST path=/echo`).MatchString(logs) {
		t.Errorf("a restricted request reached the API:\n%s", logs)
	}
}

func testUnconfiguredHost(t *testing.T, cs *mcp.ClientSession) {
	// .invalid never resolves: nothing leaves the machine even if both
	// Deno's and the proxy's checks were broken.
	code := `try {
  const r = await fetch("https://unconfigured.invalid/");
  console.log(r.ok ? "reached" : "blocked: status " + r.status);
} catch (e) {
  console.log("blocked: " + e.message);
}`
	for _, apis := range [][]string{nil, {apiName}} {
		extra := map[string]any{}
		if apis != nil {
			extra["apis"] = apis
		}
		res := run(t, cs, code, extra)
		if out := stdout(res); !strings.HasPrefix(out, "blocked: ") {
			t.Errorf("apis %v: an unconfigured host was not blocked: %s", apis, text(res))
		}
	}
}

func testRawTCP(t *testing.T, st *stack, cs *mcp.ClientSession) {
	// From the code: Deno's permissions refuse a raw connection.
	res := run(t, cs, `try { const c = await Deno.connect({hostname: "proxy", port: 3129}); c.close(); console.log("connected") } catch (e) { console.log("refused: " + e.name) }`, nil)
	if !strings.HasPrefix(stdout(res), "refused: ") {
		t.Errorf("Deno.connect from code: %s", text(res))
	}

	// From the sandbox's network namespace itself (as if Deno's checks
	// were gone): only the proxy's port answers. A listener of the test's
	// own on the host stands for any host service.
	hostPort, accepted := hostListener(t)

	if err := st.tcpProbe(t, sandboxProxyAddr, 3128); err != nil {
		t.Fatalf("the probe cannot even reach the proxy at %s:3128 (it must): %v", sandboxProxyAddr, err)
	}
	// No DNS for the sandbox user either: no lookups, no DNS tunnelling.
	if out, err := st.sandboxExec(t, "10001:10001", "getent", "hosts", "proxy"); err == nil {
		t.Errorf("the sandbox user resolved a name: %s", out)
	}
	targets := []struct {
		name, host string
		port       int
	}{
		{"the api container", st.containerIP(t, "api", "egress"), 443},
		{"the api by name", apiHost, 443},
		{"the server", st.containerIP(t, "server", "egress"), 8080},
		{"the server by name", "server", 8080},
		{"the proxy's control API", st.containerIP(t, "proxy", "control-net"), 3129},
		{"the proxy's control port on sandbox-net", st.containerIP(t, "proxy", "sandbox-net"), 3129},
		{"the proxy's control port at its sandbox address", sandboxProxyAddr, 3129},
		{"the host through the sandbox network's gateway", st.networkGateway(t, "sandbox-net"), hostPort},
		{"the host through the egress network's gateway", st.networkGateway(t, "egress"), hostPort},
	}
	for _, tg := range targets {
		if err := st.tcpProbe(t, tg.host, tg.port); err == nil {
			t.Errorf("the sandbox reached %s (%s:%d)", tg.name, tg.host, tg.port)
		}
	}
	if peers := accepted(); len(peers) > 0 {
		t.Errorf("the host listener accepted connections from %v", peers)
	}
}

func testSkills(t *testing.T, st *stack) {
	ev := newEvents()
	cs := st.connect(t, ev.options())
	ctx := t.Context()
	const name = "e2e_greet"
	src := "// @description Greets from the e2e test\nconsole.log(\"hi from skill\");\n"

	// Saved from code, into the volume the server shares.
	res := run(t, cs, fmt.Sprintf("await Deno.writeTextFile(%q, %q); console.log(\"saved\")", "/skills/"+name+".ts", src), nil)
	if res.IsError || stdout(res) != "saved\n" {
		t.Fatalf("saving a skill from code: %s", text(res))
	}
	ev.waitListChanged(t)
	list, err := cs.ListResources(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(list.Resources, func(r *mcp.Resource) bool {
		return r.URI == "skill://"+name && r.Description == "Greets from the e2e test"
	}) {
		t.Fatalf("resources %+v lack skill://%s", list.Resources, name)
	}
	read, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "skill://" + name})
	if err != nil || len(read.Contents) != 1 || read.Contents[0].Text != src {
		t.Fatalf("read skill://%s: %+v, %v", name, read, err)
	}

	// update_skill, seen by the sandbox too.
	ev.drain()
	patch := "<<<<<<< SEARCH\nconsole.log(\"hi from skill\");\n=======\nconsole.log(\"hello from the updated skill\");\n>>>>>>> REPLACE\n"
	if res := call(t, cs, "update_skill", map[string]any{"name": name, "patch": patch}); res.IsError {
		t.Fatalf("update_skill: %s", text(res))
	}
	ev.waitListChanged(t)
	if out, err := st.sandboxExec(t, "10001:10001", "cat", "/skills/"+name+".ts"); err != nil || !strings.Contains(out, "updated skill") {
		t.Fatalf("the sandbox does not see the updated skill: %v %s", err, out)
	}

	// run_skill: the prompt's code, run as the agent would.
	prompt, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "run_skill", Arguments: map[string]string{"name": name}})
	if err != nil || len(prompt.Messages) == 0 {
		t.Fatalf("run_skill prompt: %+v, %v", prompt, err)
	}
	msg, _ := prompt.Messages[0].Content.(*mcp.TextContent)
	if msg == nil {
		t.Fatalf("run_skill message is not text: %+v", prompt.Messages[0])
	}
	m := regexp.MustCompile("(?s)```ts\n(.*?)```").FindStringSubmatch(msg.Text)
	if m == nil {
		t.Fatalf("run_skill message has no ts code block: %s", msg.Text)
	}
	if res := run(t, cs, m[1], nil); res.IsError || stdout(res) != "hello from the updated skill\n" {
		t.Fatalf("running the skill as the prompt says (%q): %s", m[1], text(res))
	}

	// delete_skill.
	ev.drain()
	if res := call(t, cs, "delete_skill", map[string]any{"name": name}); res.IsError {
		t.Fatalf("delete_skill: %s", text(res))
	}
	ev.waitListChanged(t)
	list, err = cs.ListResources(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(list.Resources, func(r *mcp.Resource) bool { return r.URI == "skill://"+name }) {
		t.Fatalf("skill://%s still listed after delete_skill", name)
	}
	if out, err := st.sandboxExec(t, "10001:10001", "ls", "-A", "/skills"); err != nil || strings.Contains(out, name) {
		t.Fatalf("the skill file is still in the sandbox: %v %s", err, out)
	}
}

func testSandboxIsolation(t *testing.T, st *stack, cs *mcp.ClientSession) {
	// What the code itself can try.
	code := `const tries = {
  dockerSocket: () => Deno.readFile("/var/run/docker.sock"),
  filterSocket: () => Deno.readFile("/run/codeforge-filter/docker.sock"),
  caKey: () => Deno.readFile("/data/ca/ca.key"),
  controlToken: () => Deno.readFile("/run/codeforge-control/token"),
  env: async () => Deno.env.toObject(),
  server: () => fetch("http://server:8080/health"),
  serverControl: () => fetch("http://proxy-control:3129/v1/health"),
  writeRoot: () => Deno.writeTextFile("/usr/local/bin/x", "x"),
  writeCA: () => Deno.writeTextFile("/ca/ca.pem", "x"),
};
for (const [name, f] of Object.entries(tries)) {
  try { await f(); console.log(name + ": ALLOWED"); } catch (e) { console.log(name + ": refused " + e.name); }
}`
	res := run(t, cs, code, map[string]any{"apis": []string{apiName}})
	out := stdout(res)
	if strings.Count(out, ": refused ") != 9 || strings.Contains(out, "ALLOWED") {
		t.Errorf("from code:\n%s", text(res))
	}

	// What is in the sandbox container at all, looked at from the host:
	// no Docker or filter socket, no CA key or control token, no secret
	// value in any file or process environment.
	root := st.sandboxRoot(t)
	secret := []byte(st.secret)
	var found []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		rel := strings.TrimPrefix(path, root)
		if err != nil {
			found = append(found, fmt.Sprintf("%s: %v", rel, err))
			return nil
		}
		switch {
		case d.IsDir() && (rel == "/proc" || rel == "/sys" || rel == "/dev"):
			return fs.SkipDir
		case d.Type()&fs.ModeSocket != 0, d.Name() == "ca.key", d.Name() == "token", strings.HasSuffix(d.Name(), ".sock"):
			found = append(found, rel+": a socket or key file")
		case d.Type().IsRegular():
			data, err := os.ReadFile(path)
			if err != nil {
				found = append(found, fmt.Sprintf("%s: %v", rel, err))
			} else if bytes.Contains(data, secret) {
				found = append(found, rel+": holds the secret value")
			}
		}
		return nil // symlinks are not followed: they point into the container
	})
	if err != nil || len(found) > 0 {
		t.Errorf("in the sandbox's filesystem (walk error %v):\n%s", err, strings.Join(found, "\n"))
	}
	if entries, err := os.ReadDir(filepath.Join(root, "ca")); err != nil || len(entries) != 1 || entries[0].Name() != "ca.pem" {
		t.Errorf("/ca holds %v (err %v), want only ca.pem", entries, err)
	}
	for _, p := range st.sandboxProcesses(t) {
		pid := strings.Fields(p)[1]
		for _, f := range []string{"environ", "cmdline"} {
			data, err := os.ReadFile(filepath.Join("/proc", pid, f))
			if err == nil && bytes.Contains(data, secret) {
				t.Errorf("the secret is in the %s of sandbox process %s", f, p)
			}
		}
	}
	for _, svc := range []string{"sandbox", "netguard", "server", "dockerfilter"} {
		if env := inspect(t, st.container(t, svc), "{{json .Config.Env}} {{json .Config.Cmd}}"); strings.Contains(env, st.secret) {
			t.Errorf("the %s container's configuration holds the secret", svc)
		}
	}
	// The sandbox user has no capabilities and a read-only root.
	if out, err := st.sandboxExec(t, "10001:10001", "grep", "^CapEff:", "/proc/self/status"); err != nil || !strings.Contains(out, "0000000000000000") {
		t.Errorf("sandbox capabilities: %s %v", out, err)
	}
	if _, err := st.sandboxExec(t, "10001:10001", "touch", "/usr/local/bin/x"); err == nil {
		t.Error("the sandbox's root filesystem is writable")
	}
}

func testTimeoutLeavesNoProcess(t *testing.T, st *stack, cs *mcp.ClientSession) {
	type result struct {
		res *mcp.CallToolResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		// The code names its own run directory first (kept as partial
		// output): idle warm processes of the pool are not the run's.
		res, err := callErr(cs, "execute_code", map[string]any{"code": "console.log(Deno.cwd()); while (true) {}", "timeout": 2})
		done <- result{res, err}
	}()
	// While it spins: deno runs as the sandbox user.
	var deno []string
	waitFor(t, 60*time.Second, "the run's deno process", func() bool {
		deno = denoProcesses(st.sandboxProcesses(t))
		return len(deno) > 0
	})
	for _, p := range deno {
		if uid := strings.Fields(p)[0]; uid != "10001" {
			t.Errorf("deno runs as uid %s, want 10001: %s", uid, p)
		}
	}
	r := <-done
	if r.err != nil {
		t.Fatalf("execute_code: %v", r.err)
	}
	if out := structured(t, r.res); !r.res.IsError || !out.TimedOut {
		t.Fatalf("an infinite loop with timeout 2: isError=%v %+v %s", r.res.IsError, out, text(r.res))
	}
	runDir := strings.TrimSpace(stdout(r.res))
	if !strings.HasPrefix(runDir, "/tmp/runs/") {
		t.Fatalf("the run printed %q, want its directory /tmp/runs/<id>", runDir)
	}
	// The kill is asynchronous to the result; allow it a moment, not more.
	// What may remain: the pool's idle warm execs, each a wrapper and its
	// deno waiting in the bootstrap, with their own directories.
	var left []string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		left = leftBehind(denoProcesses(st.sandboxProcesses(t)), runDir)
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(left) > 0 {
		t.Errorf("processes left behind 10 s after the timeout:\n%s", strings.Join(left, "\n"))
	}
	entries, err := os.ReadDir(filepath.Join(st.sandboxRoot(t), "tmp", "runs"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	warm := strings.Join(denoProcesses(st.sandboxProcesses(t)), "\n")
	for _, e := range entries {
		name := e.Name()
		id := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, ".deno"), ".pid"), "/")
		switch {
		case strings.HasPrefix(name, ".check-"):
			// a readiness check in progress
		case "/tmp/runs/"+id == runDir || !strings.Contains(warm, "/tmp/runs/"+id+".deno/bootstrap.js"):
			t.Errorf("left behind in /tmp/runs: %s (not an idle warm exec's)", name)
		}
	}
}

// leftBehind is what remains of the run in runDir among the sandbox's
// processes: anything naming runDir, and any wrapper or deno beyond the
// idle warm pairs (a wrapper --warm and its deno in the bootstrap).
func leftBehind(procs []string, runDir string) []string {
	var left, warmWrappers, warmDenos []string
	for _, p := range procs {
		switch {
		case strings.Contains(p, runDir+" ") || strings.Contains(p, runDir+","):
			left = append(left, p)
		case strings.HasSuffix(p, "codeforge-run --warm"):
			warmWrappers = append(warmWrappers, p)
		case strings.Contains(p, ".deno/bootstrap.js"):
			warmDenos = append(warmDenos, p)
		default:
			left = append(left, p)
		}
	}
	if len(warmWrappers) != len(warmDenos) {
		left = append(left, warmWrappers...)
		left = append(left, warmDenos...)
	}
	return left
}

// denoProcesses keeps the process lines that are not the container's own
// keep-alive (init, sleep).
func denoProcesses(lines []string) []string {
	var out []string
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) < 3 {
			continue
		}
		cmd := strings.Join(f[2:], " ")
		if strings.HasPrefix(cmd, "/sbin/docker-init") || strings.HasPrefix(cmd, "sleep ") {
			continue
		}
		out = append(out, l)
	}
	return out
}

func testConcurrentRuns(t *testing.T, st *stack) {
	const n = 20
	sessions := []*mcp.ClientSession{st.connect(t, nil), st.connect(t, nil)}
	var wg sync.WaitGroup
	results := make([]*mcp.CallToolResult, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			code := fmt.Sprintf("await new Promise((r) => setTimeout(r, 200)); console.log(\"run %d\")", i)
			results[i], errs[i] = callErr(sessions[i%len(sessions)], "execute_code", map[string]any{"code": code, "timeout": 120})
		})
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Errorf("run %d: %v", i, errs[i])
			continue
		}
		if want := fmt.Sprintf("run %d\n", i); results[i].IsError || stdout(results[i]) != want {
			t.Errorf("run %d: isError=%v %q", i, results[i].IsError, text(results[i]))
		}
	}
}

func testOutputFlood(t *testing.T, st *stack, cs *mcp.ClientSession) {
	server := st.container(t, "server")
	before := containerMemory(t, server)
	var (
		mu   sync.Mutex
		peak = before
	)
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stop:
				return
			case <-time.After(500 * time.Millisecond):
			}
			m := containerMemory(t, server)
			mu.Lock()
			peak = max(peak, m)
			mu.Unlock()
		}
	}()
	// 1 GiB of output in 1 MiB writes.
	code := `const chunk = new TextEncoder().encode(("x".repeat(1023) + "\n").repeat(1024));
for (let i = 0; i < 1024; i++) await Deno.stdout.write(chunk);
console.error("flood done");`
	res := run(t, cs, code, map[string]any{"timeout": 280})
	close(stop)
	<-sampled
	out := structured(t, res)
	if !out.Truncated || out.TimedOut {
		t.Errorf("1 GiB of output: %+v", out)
	}
	if len(stdout(res)) > 2<<20 {
		t.Errorf("stdout kept %d bytes: not capped", len(stdout(res)))
	}
	if !strings.Contains(strings.ToLower(text(res)), "truncat") && !strings.Contains(strings.ToLower(text(res)), "cut") {
		t.Errorf("no note about the cut output in %q", lastLines(text(res), 3))
	}
	after := containerMemory(t, server)
	mu.Lock()
	defer mu.Unlock()
	t.Logf("server memory: before %d MiB, peak %d MiB, after %d MiB", before>>20, peak>>20, after>>20)
	if peak-before > 100<<20 {
		t.Errorf("the server's memory grew by %d MiB under the flood (before %d MiB, peak %d MiB)", (peak-before)>>20, before>>20, peak>>20)
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func testSandboxKilled(t *testing.T, st *stack, cs *mcp.ClientSession) {
	id := st.container(t, "sandbox")
	restarts := inspect(t, id, "{{.RestartCount}}")
	type result struct {
		res *mcp.CallToolResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := callErr(cs, "execute_code", map[string]any{
			"code": `console.log("started"); await new Promise((r) => setTimeout(r, 600000));`, "timeout": 280})
		done <- result{res, err}
	}()
	waitFor(t, 60*time.Second, "the run's deno process", func() bool { return len(denoProcesses(st.sandboxProcesses(t))) > 0 })

	// A crash, as the kernel's OOM killer or a fault would do it: SIGKILL
	// to the container's init from the host. (docker kill would count as
	// a manual stop, which the restart policy respects.)
	pid, err := strconv.Atoi(inspect(t, id, "{{.State.Pid}}"))
	if err != nil || pid <= 1 {
		t.Fatalf("sandbox pid %d: %v", pid, err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill sandbox init %d: %v", pid, err)
	}
	var r result
	select {
	case r = <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("the run did not end after the sandbox died")
	}
	if r.err != nil {
		t.Fatalf("the run ended with a protocol error, not a tool error: %v", r.err)
	}
	msg := strings.ToLower(text(r.res))
	if !r.res.IsError || !strings.Contains(msg, "sandbox") {
		t.Errorf("a run whose sandbox died: isError=%v %q; want an error that names the sandbox", r.res.IsError, text(r.res))
	}

	// The restart policy brings it back, the server notices on its own.
	st.waitRestarted(t, "sandbox", restarts)
	st.waitReady(t, 2*time.Minute)
	res := run(t, cs, `console.log("back")`, nil)
	if res.IsError || stdout(res) != "back\n" {
		t.Fatalf("the first run after the restart: %s", text(res))
	}
	// Its network lock survived the restart (it rejoined netguard's namespace).
	if err := st.tcpProbe(t, st.containerIP(t, "api", "egress"), 443); err == nil {
		t.Error("after the restart the sandbox reaches the api container directly")
	}
}

func testProxyDown(t *testing.T, st *stack, cs *mcp.ClientSession) {
	fetch := echoFetch("GET", map[string]string{"Authorization": "Bearer " + tokenName})
	apis := map[string]any{"apis": []string{apiName}}

	st.mustCompose(t, "stop", "proxy")
	res := run(t, cs, fetch, apis)
	if msg := strings.ToLower(text(res)); !res.IsError || !strings.Contains(msg, "proxy") {
		t.Errorf("a fetch with the proxy stopped: isError=%v %q; want an error that names the proxy", res.IsError, text(res))
	}
	st.mustCompose(t, "start", "proxy")
	st.waitReady(t, 2*time.Minute)
	if res := run(t, cs, fetch, apis); res.IsError || !strings.HasPrefix(stdout(res), "200\n") {
		t.Fatalf("a fetch after the proxy came back: %s", text(res))
	}

	// A proxy crash: the restart policy brings it back with the same CA
	// (its volume), so the sandbox still trusts it.
	id := st.container(t, "proxy")
	restarts := inspect(t, id, "{{.RestartCount}}")
	pid, err := strconv.Atoi(inspect(t, id, "{{.State.Pid}}"))
	if err != nil || pid <= 1 {
		t.Fatalf("proxy pid %d: %v", pid, err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill proxy %d: %v", pid, err)
	}
	st.waitRestarted(t, "proxy", restarts)
	st.waitReady(t, 2*time.Minute)
	if res := run(t, cs, fetch, apis); res.IsError || !strings.HasPrefix(stdout(res), "200\n") {
		t.Fatalf("a fetch after the proxy crashed and restarted: %s", text(res))
	}
}
