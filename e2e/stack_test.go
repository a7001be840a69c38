package e2e

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/codeforge/codeforge/internal/testenv"
)

// Names the stack uses; they match docker-compose.yml and compose.test.yml.
const (
	// imageTag prefixes CODEFORGE_TAG: the tests never retag the user's
	// :local images. The full tag also names the checkout (see stackTag):
	// worktrees on one engine must not build over each other's images.
	imageTag   = "e2e"
	debianBase = "codeforge/debian-base:bookworm"
	denoImage  = "codeforge/deno:bin-2.9.6"
	apiName    = "testapi" // directory name of the test API config
	apiHost    = "api"     // the api service's name: the host code fetches
	tokenName  = "TOKEN_NAME"
	// fileSecretLoses is E2E_API_SECRET's value in the stack's env file:
	// the proxy's environment sets it too, and the environment wins.
	fileSecretLoses = "from-the-env-file-the-environment-wins"
	// sandboxProxyAddr is the proxy's address inside the sandbox's network
	// namespace (deploy/sandbox/netguard).
	sandboxProxyAddr = "192.0.2.1"

	// reaperEnv makes the test binary act as the reaper (see TestMain).
	reaperEnv = "CF_E2E_REAPER"
)

// TestMain runs the tests, or — when started by startStack with reaperEnv
// set — acts as the reaper: it waits for its standard input (a pipe from
// the test process) to close and, unless the test process said "done"
// first, tears the stack down. The test process can die any way it likes
// (a panic, go test's -timeout, ^C, SIGKILL); the pipe closes all the same
// and the stack does not outlive it.
func TestMain(m *testing.M) {
	if os.Getenv(reaperEnv) == "1" {
		os.Exit(reap())
	}
	os.Exit(m.Run())
}

func reap() int {
	msg, _ := io.ReadAll(os.Stdin)
	if string(msg) == "done" {
		return 0
	}
	st := &stack{
		root:    os.Getenv("CF_E2E_ROOT"),
		dir:     os.Getenv("CF_E2E_DIR"),
		project: os.Getenv("CF_E2E_PROJECT"),
		env:     os.Environ(),
	}
	if o := os.Getenv("CF_E2E_OVERRIDES"); o != "" {
		st.overrides = strings.Split(o, ",")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	st.compose(ctx, "down", "-v", "--remove-orphans", "--timeout", "5")
	if st.dir != "" {
		os.RemoveAll(st.dir)
	}
	return 0
}

// stack is one running CodeForge compose stack.
type stack struct {
	root     string // repository root: the compose project directory
	dir      string // the test's temporary directory: certs/, apis/, empty.env, proxy.env
	project  string // unique compose project name, cf-e2e-<random>
	port     int    // the server's published port on 127.0.0.1
	secret   string // the real credential value behind TOKEN_NAME
	caPEM    []byte // the test API's CA certificate
	endpoint string // http://127.0.0.1:<port>/mcp
	env      []string
	// overrides are compose files (relative to root) applied between
	// docker-compose.yml and e2e/compose.test.yml, e.g. a deployment variant.
	overrides []string

	reaper     *os.File // write end of the reaper's stdin
	reaperProc *exec.Cmd
}

// startStack builds the binaries and images and brings a fresh stack up,
// torn down when tb's test ends. It fails tb (never skips) when Docker or
// Compose is missing. overrides are extra compose files (relative to the
// repository root) for a deployment variant, applied before the test's own.
func startStack(tb testing.TB, overrides ...string) *stack {
	tb.Helper()
	testenv.Docker(tb)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "docker", "compose", "version").CombinedOutput(); err != nil {
		tb.Fatalf("Docker Compose v2 is required: %v: %s\ninstall it with deploy/install-docker.sh (as root)", err, out)
	}
	root, err := testenv.RepoRoot()
	if err != nil {
		tb.Fatalf("repository root: %v", err)
	}
	st := &stack{root: root, project: "cf-e2e-" + randomHex(tb, 4), overrides: overrides}

	// Binaries on the host (the images copy them; see deploy/codeforge/Dockerfile),
	// base images without a registry.
	for _, b := range []struct{ out, pkg string }{{"bin/codeforge", "./cmd/codeforge"}, {"bin/codeforge-run", "./cmd/codeforge-run"}, {"bin/testapi", "./e2e/testapi"}} {
		cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", b.out, b.pkg)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			tb.Fatalf("go build %s: %v\n%s", b.pkg, err, out)
		}
	}
	cmd := exec.CommandContext(ctx, filepath.Join(root, "deploy", "build-base-images.sh"))
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("deploy/build-base-images.sh: %v\n%s", err, out)
	}

	// The test's own files: a CA and a certificate for the api container,
	// the API config naming the secret's environment variable, an empty
	// env file (the developer's .env must not leak in).
	ca := testenv.NewCA(tb)
	_, certPEM, keyPEM := ca.Leaf(tb, apiHost, addedAPIHost)
	st.caPEM = ca.PEM
	if st.dir, err = os.MkdirTemp("", "cf-e2e-"); err != nil {
		tb.Fatal(err)
	}
	st.secret = "e2e-secret-" + randomHex(tb, 16)
	if err := st.writeFiles(certPEM, keyPEM); err != nil {
		os.RemoveAll(st.dir)
		tb.Fatalf("test files: %v", err)
	}
	fi, err := os.Stat(st.envFile())
	if err != nil {
		tb.Fatal(err)
	}
	st.port = freePort(tb)
	st.endpoint = fmt.Sprintf("http://127.0.0.1:%d/mcp", st.port)
	st.env = append(cleanEnv(),
		"CODEFORGE_TAG="+stackTag(root),
		"CODEFORGE_PORT="+strconv.Itoa(st.port),
		"CODEFORGE_DEBIAN_BASE="+debianBase,
		"CODEFORGE_DENO_IMAGE="+denoImage,
		"CF_E2E_DIR="+st.dir,
		"CF_E2E_ROOT="+st.root,
		"CF_E2E_PROJECT="+st.project,
		"CF_E2E_OVERRIDES="+strings.Join(st.overrides, ","),
		"E2E_API_SECRET="+st.secret,
		// the group through which the proxy reads proxy.env, as rebuild.sh
		// passes the group of .env
		"CODEFORGE_ENV_GID="+strconv.FormatUint(uint64(fi.Sys().(*syscall.Stat_t).Gid), 10),
	)
	st.startReaper(tb)
	tb.Cleanup(func() { st.down(tb) })

	if out, err := st.compose(ctx, "build"); err != nil {
		tb.Fatalf("docker compose build: %v\n%s", err, out)
	}
	if out, err := st.compose(ctx, "up", "-d"); err != nil {
		tb.Fatalf("docker compose up: %v\n%s\n%s", err, out, st.diagnostics())
	}
	st.waitReady(tb, 3*time.Minute)
	return st
}

// stackTag is the image tag of this checkout's test stacks: imageTag and a
// hash of the repository root, so that two checkouts testing at the same
// time on one engine (git worktrees) each run the images of their own code.
func stackTag(root string) string {
	sum := sha256.Sum256([]byte(root))
	return imageTag + "-" + hex.EncodeToString(sum[:4])
}

// cleanEnv is the test process's environment without anything that would
// change what compose does behind the test's back.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "COMPOSE_") || strings.HasPrefix(name, "CODEFORGE_") ||
			strings.HasPrefix(name, "CF_E2E_") || name == "E2E_API_SECRET" || name == "DOCKER_SOCKET" {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// writeFiles writes the test's files into st.dir: the CA (st.caPEM), the
// api container's certificate and key, the API config, an empty env file
// for compose and the proxy's env file (in place of .env), 0640 like the
// .env rebuild.sh makes: the proxy reads it through the file's group.
func (st *stack) writeFiles(certPEM, keyPEM []byte) error {
	if err := os.Chmod(st.dir, 0o755); err != nil {
		return err
	}
	certs := filepath.Join(st.dir, "certs")
	api := filepath.Join(st.dir, "apis", apiName)
	for _, d := range []string{certs, api} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	config := map[string]any{
		"description":        "the end-to-end tests' TLS echo API",
		"domains":            []string{apiHost},
		"credentials":        map[string]string{tokenName: "${E2E_API_SECRET}"},
		"restricted_methods": []string{"DELETE"},
	}
	cfg, err := json.MarshalIndent(config, "", "  ")
	if err != nil {
		return err
	}
	// The key is test-only and must be readable by the api container's
	// non-root user.
	for name, data := range map[string][]byte{
		filepath.Join(certs, "ca.pem"):      st.caPEM,
		filepath.Join(certs, "api.pem"):     certPEM,
		filepath.Join(certs, "api-key.pem"): keyPEM,
		filepath.Join(api, "config.json"):   cfg,
		filepath.Join(st.dir, "empty.env"):  nil,
	} {
		if err := os.WriteFile(name, data, 0o644); err != nil {
			return err
		}
	}
	env := st.envFile()
	if err := os.WriteFile(env, []byte("E2E_API_SECRET="+fileSecretLoses+"\n"), 0o640); err != nil {
		return err
	}
	return os.Chmod(env, 0o640) // whatever the umask
}

// envFile is the stack's .env: e2e/compose.test.yml mounts it into the
// proxy where docker-compose.yml mounts .env.
func (st *stack) envFile() string { return filepath.Join(st.dir, "proxy.env") }

// startReaper starts this test binary again as the reaper (TestMain), in
// its own process group so that a ^C aimed at go test leaves it alive to
// clean up.
func (st *stack) startReaper(tb testing.TB) {
	tb.Helper()
	self, err := os.Executable()
	if err != nil {
		tb.Fatalf("reaper: %v", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		tb.Fatalf("reaper: %v", err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(st.env, reaperEnv+"=1")
	cmd.Stdin = r
	// Not go test's stdout: go test would wait for the reaper to exit.
	cmd.Stdout, cmd.Stderr = nil, nil
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		tb.Fatalf("reaper: %v", err)
	}
	r.Close()
	st.reaper, st.reaperProc = w, cmd
}

// down tears the stack down (showing its state and logs first when the
// test failed) and releases the reaper.
func (st *stack) down(tb testing.TB) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if tb.Failed() {
		tb.Logf("stack %s at failure:\n%s", st.project, st.diagnostics())
	}
	if out, err := st.compose(ctx, "down", "-v", "--remove-orphans", "--timeout", "5"); err != nil {
		tb.Errorf("docker compose down: %v\n%s", err, out)
	}
	os.RemoveAll(st.dir)
	st.reaper.Write([]byte("done"))
	st.reaper.Close()
	st.reaperProc.Wait()
}

// compose runs docker compose on the stack's project and files.
func (st *stack) compose(ctx context.Context, args ...string) ([]byte, error) {
	base := []string{"compose",
		"--project-directory", st.root,
		"--env-file", filepath.Join(st.dir, "empty.env"),
		"-p", st.project,
		"-f", filepath.Join(st.root, "docker-compose.yml"),
	}
	for _, o := range st.overrides {
		base = append(base, "-f", filepath.Join(st.root, o))
	}
	base = append(base, "-f", filepath.Join(st.root, "e2e", "compose.test.yml"))
	cmd := exec.CommandContext(ctx, "docker", append(base, args...)...)
	cmd.Dir = st.root
	cmd.Env = st.env
	return cmd.CombinedOutput()
}

// mustCompose runs docker compose and fails tb on error.
func (st *stack) mustCompose(tb testing.TB, args ...string) string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := st.compose(ctx, args...)
	if err != nil {
		tb.Fatalf("docker compose %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// diagnostics is the stack's state and recent logs, for failure messages.
func (st *stack) diagnostics() string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ps, _ := st.compose(ctx, "ps", "-a")
	logs, _ := st.compose(ctx, "logs", "--no-color", "--tail", "60")
	return string(ps) + "\n" + string(logs)
}

// container returns the ID of service's container.
func (st *stack) container(tb testing.TB, service string) string {
	tb.Helper()
	id := strings.TrimSpace(st.mustCompose(tb, "ps", "-a", "-q", service))
	if id == "" || strings.Contains(id, "\n") {
		tb.Fatalf("container of service %s: got %q", service, id)
	}
	return id
}

// docker runs the real docker CLI (the harness may; the server may not).
func docker(ctx context.Context, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, "docker", args...).CombinedOutput()
	return string(out), err
}

// inspect returns a docker inspect --format value of a container.
func inspect(tb testing.TB, id, format string) string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := docker(ctx, "inspect", "--format", format, id)
	if err != nil {
		tb.Fatalf("docker inspect %s: %v: %s", id, err, out)
	}
	return strings.TrimSpace(out)
}

// sandboxExec runs a command in the sandbox container as user.
func (st *stack) sandboxExec(tb testing.TB, user string, args ...string) (string, error) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return docker(ctx, append([]string{"exec", "-u", user, st.container(tb, "sandbox")}, args...)...)
}

// sandboxRoot is the sandbox container's filesystem as its processes see
// it (root, volumes, tmpfs), through /proc/<init pid>/root on the host: the
// harness looks at everything there without needing anything inside (an
// exec as root would still lack the capabilities to read the runs' 0700
// directories). Needs root on the host, as the e2e tests do anyway.
func (st *stack) sandboxRoot(tb testing.TB) string {
	tb.Helper()
	testenv.Root(tb, "the e2e tests inspect the sandbox's filesystem through /proc/<pid>/root")
	return "/proc/" + inspect(tb, st.container(tb, "sandbox"), "{{.State.Pid}}") + "/root"
}

// health asks the server's /health once.
func (st *stack) health(ctx context.Context) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/health", st.port), nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, string(body), nil
}

// waitReady waits for /health to answer 200 (the server sees the sandbox
// and the proxy ready). Generous: a slow machine passes, a stack that
// never gets ready fails with its logs.
func (st *stack) waitReady(tb testing.TB, limit time.Duration) {
	tb.Helper()
	deadline := time.Now().Add(limit)
	var last string
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		status, body, err := st.health(ctx)
		cancel()
		if err == nil && status == http.StatusOK {
			return
		}
		last = fmt.Sprintf("status %d %s, error %v", status, strings.TrimSpace(body), err)
		if time.Now().After(deadline) {
			tb.Fatalf("the server did not get ready within %s (last /health: %s)\n%s", limit, last, st.diagnostics())
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// waitFor polls cond until it holds; a limit that passes fails tb with what.
func waitFor(tb testing.TB, limit time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %s waiting for %s", limit, what)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// waitRestarted waits until service's container has restarted (its restart
// count is no longer before) and Docker lists it as running again — the
// list, not inspect, because that is what the socket filter looks at.
func (st *stack) waitRestarted(tb testing.TB, service, before string) {
	tb.Helper()
	id := st.container(tb, service)
	waitFor(tb, 2*time.Minute, service+" to restart", func() bool {
		if inspect(tb, id, "{{.RestartCount}}") == before {
			return false
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		out, err := docker(ctx, "ps", "-q", "--no-trunc", "--filter", "id="+id, "--filter", "status=running")
		return err == nil && strings.TrimSpace(out) == id
	})
}

// events records the notifications a client session received.
type events struct {
	listChanged chan struct{}
}

func newEvents() *events { return &events{listChanged: make(chan struct{}, 100)} }

func (e *events) options() *mcp.ClientOptions {
	return &mcp.ClientOptions{
		ResourceListChangedHandler: func(context.Context, *mcp.ResourceListChangedRequest) {
			select {
			case e.listChanged <- struct{}{}:
			default:
			}
		},
	}
}

func (e *events) drain() {
	for {
		select {
		case <-e.listChanged:
		default:
			return
		}
	}
}

func (e *events) waitListChanged(tb testing.TB) {
	tb.Helper()
	select {
	case <-e.listChanged:
	case <-time.After(30 * time.Second):
		tb.Fatal("no notifications/resources/list_changed arrived")
	}
}

// connect opens an MCP client session over Streamable HTTP, closed when
// tb's test ends.
func (st *stack) connect(tb testing.TB, opts *mcp.ClientOptions) *mcp.ClientSession {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "codeforge-e2e", Version: "1"}, opts)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: st.endpoint}, nil)
	if err != nil {
		tb.Fatalf("connect to %s: %v", st.endpoint, err)
	}
	tb.Cleanup(func() { cs.Close() })
	return cs
}

// call calls a tool; a protocol error fails tb.
func call(tb testing.TB, cs *mcp.ClientSession, name string, args map[string]any) *mcp.CallToolResult {
	tb.Helper()
	res, err := callErr(cs, name, args)
	if err != nil {
		tb.Fatalf("call %s: protocol error: %v", name, err)
	}
	return res
}

func callErr(cs *mcp.ClientSession, name string, args map[string]any) (*mcp.CallToolResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	return cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
}

// run calls execute_code with code and extra arguments.
func run(tb testing.TB, cs *mcp.ClientSession, code string, extra map[string]any) *mcp.CallToolResult {
	tb.Helper()
	args := map[string]any{"code": code}
	for k, v := range extra {
		args[k] = v
	}
	return call(tb, cs, "execute_code", args)
}

// text joins a result's text blocks.
func text(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// stdout is the first text block of an execute_code result (stdout).
func stdout(res *mcp.CallToolResult) string {
	if len(res.Content) == 0 {
		return ""
	}
	if tc, ok := res.Content[0].(*mcp.TextContent); ok {
		return tc.Text
	}
	return ""
}

// runOutput is execute_code's structuredContent.
type runOutput struct {
	ExitCode    int        `json:"exit_code"`
	DurationMS  int64      `json:"duration_ms"`
	TimedOut    bool       `json:"timed_out"`
	OutOfMemory bool       `json:"out_of_memory"`
	Truncated   bool       `json:"truncated"`
	Network     []netEntry `json:"network"`
}

type netEntry struct {
	Method   string `json:"method"`
	Host     string `json:"host"`
	Path     string `json:"path"`
	Status   int    `json:"status"`
	Injected bool   `json:"credential_injected"`
	Blocked  string `json:"blocked"`
}

func structured(tb testing.TB, res *mcp.CallToolResult) runOutput {
	tb.Helper()
	var out runOutput
	if res.StructuredContent == nil {
		tb.Fatalf("execute_code result has no structuredContent: %s", text(res))
	}
	data, err := json.Marshal(res.StructuredContent)
	if err == nil {
		err = json.Unmarshal(data, &out)
	}
	if err != nil {
		tb.Fatalf("structuredContent %s: %v", data, err)
	}
	return out
}

// containerMemory is a container's memory use in bytes (docker stats).
func containerMemory(tb testing.TB, id string) int64 {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := docker(ctx, "stats", "--no-stream", "--format", "{{.MemUsage}}", id)
	if err != nil {
		tb.Fatalf("docker stats %s: %v: %s", id, err, out)
	}
	used, _, _ := strings.Cut(strings.TrimSpace(out), " / ")
	n, err := parseSize(used)
	if err != nil {
		tb.Fatalf("docker stats %s: %v", id, err)
	}
	return n
}

// parseSize parses docker's human sizes: "12.5MiB", "1.2GiB", "512KiB", "900B".
func parseSize(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   float64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"kB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"B", 1}}
	for _, u := range units {
		if num, ok := strings.CutSuffix(s, u.suffix); ok {
			f, err := strconv.ParseFloat(num, 64)
			if err != nil {
				return 0, fmt.Errorf("size %q: %w", s, err)
			}
			return int64(f * u.mult), nil
		}
	}
	return 0, fmt.Errorf("size %q: unknown unit", s)
}

// sandboxProcesses lists the sandbox container's processes (docker top),
// one "uid pid command" line each.
func (st *stack) sandboxProcesses(tb testing.TB) []string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := docker(ctx, "top", st.container(tb, "sandbox"), "-eo", "uid,pid,args")
	if err != nil {
		tb.Fatalf("docker top: %v: %s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return lines[1:] // header
}

func randomHex(tb testing.TB, n int) string {
	tb.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		tb.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// freePort returns a TCP port that was free on 127.0.0.1 a moment ago.
func freePort(tb testing.TB) int {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// tcpProbe tries a raw TCP connection from inside the sandbox, as the
// sandbox user, with bash's /dev/tcp; nil means it connected.
func (st *stack) tcpProbe(tb testing.TB, host string, port int) error {
	tb.Helper()
	out, err := st.sandboxExec(tb, "10001:10001", "bash", "-c",
		`timeout 5 bash -c 'exec 3<>"/dev/tcp/$0/$1"' "$0" "$1"`, host, strconv.Itoa(port))
	if err != nil {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(out))
	}
	return nil
}

var errNoIP = errors.New("no IP address")

// containerIP returns service's address on the network whose name ends in
// suffix (compose prefixes the project name).
func (st *stack) containerIP(tb testing.TB, service, network string) string {
	tb.Helper()
	id := st.container(tb, service)
	raw := inspect(tb, id, "{{json .NetworkSettings.Networks}}")
	var nets map[string]struct {
		IPAddress string
		Gateway   string
	}
	if err := json.Unmarshal([]byte(raw), &nets); err != nil {
		tb.Fatalf("networks of %s: %v", service, err)
	}
	for name, n := range nets {
		if strings.HasSuffix(name, "_"+network) && n.IPAddress != "" {
			return n.IPAddress
		}
	}
	tb.Fatalf("%s: %v on network %s (has %s)", service, errNoIP, network, raw)
	return ""
}

// networkGateway returns the gateway (the host's address) of a network of
// the stack.
func (st *stack) networkGateway(tb testing.TB, network string) string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := docker(ctx, "network", "inspect", "--format", "{{range .IPAM.Config}}{{.Gateway}}{{end}}", st.project+"_"+network)
	if err != nil || strings.TrimSpace(out) == "" {
		tb.Fatalf("gateway of %s: %v: %s", network, err, out)
	}
	return strings.TrimSpace(out)
}

// hostListener stands for any service on the host: a TCP listener on all
// addresses that records who connected. It returns its port and a function
// listing the peers so far; it closes with the test.
func hostListener(t *testing.T) (int, func() []string) {
	t.Helper()
	l, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	var (
		mu    sync.Mutex
		peers []string
	)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			peers = append(peers, c.RemoteAddr().String())
			mu.Unlock()
			c.Close()
		}
	}()
	return l.Addr().(*net.TCPAddr).Port, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(peers)
	}
}

// resolvedCompose is `docker compose config --format json` of
// docker-compose.yml plus the given override files (relative to the
// repository), with an empty env file: the stack exactly as Compose
// resolves it, without starting anything.
func resolvedCompose(t *testing.T, overrides ...string) []byte {
	t.Helper()
	testenv.Docker(t)
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(t.TempDir(), "empty.env")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"compose", "--project-directory", root, "--env-file", empty, "-f", filepath.Join(root, "docker-compose.yml")}
	for _, o := range overrides {
		args = append(args, "-f", filepath.Join(root, o))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "docker", append(args, "config", "--format", "json")...)
	cmd.Env = cleanEnv()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("docker compose config: %v\n%s", err, out)
	}
	return out
}

// checkEcho checks the result of echoFetch with the token name: status
// 200, the API got the real value (by its hash), the code saw only the
// name, and the secret is nowhere in the output.
func checkEcho(t *testing.T, st *stack, res *mcp.CallToolResult) {
	t.Helper()
	checkEchoSecret(t, res, tokenName, st.secret)
}

// checkEchoSecret is checkEcho for any token name and its secret.
func checkEchoSecret(t *testing.T, res *mcp.CallToolResult, tokenName, secret string) {
	t.Helper()
	out := text(res)
	status, body, _ := strings.Cut(stdout(res), "\n")
	if status != "200" {
		t.Fatalf("status %q, output %s", status, out)
	}
	var echo struct {
		Authorization string `json:"authorization"`
		AuthSHA256    string `json:"authorization_sha256"`
	}
	if err := json.Unmarshal([]byte(body), &echo); err != nil {
		t.Fatalf("echo body %q: %v", body, err)
	}
	sum := sha256.Sum256([]byte("Bearer " + secret))
	if echo.AuthSHA256 != hex.EncodeToString(sum[:]) {
		t.Errorf("the API did not receive the real credential (sha256 %s)", echo.AuthSHA256)
	}
	if echo.Authorization != "Bearer "+tokenName {
		t.Errorf("the code saw Authorization %q echoed back, want the token name", echo.Authorization)
	}
	if strings.Contains(out, secret) {
		t.Error("the secret value reached the code's output")
	}
}
