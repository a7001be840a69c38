package dockerfilter

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codeforge/codeforge/internal/testenv"
	"github.com/moby/moby/client"
)

// The filter tests run against the real engine. They share one image (a
// static Go stand-in for codeforge-run, imported from a tar built here, so
// nothing is pulled) and two containers started from it: the sandbox and
// another container the filter must never exec in. TestMain removes the
// containers.

var (
	setupOnce sync.Once
	setupErr  error
	shared    struct {
		image     string
		sandbox   string // container name
		sandboxID string
		other     string
		otherID   string
	}
	cleanupMu  sync.Mutex
	containers []string
)

func TestMain(m *testing.M) {
	code := m.Run()
	cleanupMu.Lock()
	for _, c := range containers {
		_ = exec.Command("docker", "rm", "-f", c).Run()
	}
	cleanupMu.Unlock()
	os.Exit(code)
}

// trackContainer removes a container when the test binary ends.
func trackContainer(name string) {
	cleanupMu.Lock()
	defer cleanupMu.Unlock()
	containers = append(containers, name)
}

func randomSuffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// docker runs the docker CLI against the real engine and returns its
// trimmed stdout.
func docker(t testing.TB, stdin io.Reader, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "docker", args...)
	cmd.Stdin = stdin
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("docker %s: %v: %s", strings.Join(args, " "), err, errb.String())
	}
	return strings.TrimSpace(out.String())
}

// setup builds the stand-in image and starts the two containers once.
func setup(t *testing.T) {
	t.Helper()
	testenv.Docker(t)
	setupOnce.Do(func() {
		setupErr = errors.New("shared setup did not finish: see the first failing test")
		setupErr = doSetup(t)
	})
	if setupErr != nil {
		t.Fatalf("test setup: %v", setupErr)
	}
}

func doSetup(t *testing.T) error {
	dir := t.TempDir()
	bin := filepath.Join(dir, "standin")
	root, err := testenv.RepoRoot()
	if err != nil {
		return err
	}
	build := exec.Command("go", "build", "-o", bin, "./dockerfilter/testdata/standin")
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("build stand-in: %v: %s", err, out)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(data)
	shared.image = "codeforge-test/dockerfilter-standin:" + hex.EncodeToString(sum[:6])
	if exec.Command("docker", "image", "inspect", shared.image).Run() != nil {
		var tarball bytes.Buffer
		if err := writeRootfs(&tarball, data); err != nil {
			return err
		}
		docker(t, &tarball, "import", "--change", `CMD ["/usr/local/bin/codeforge-run","--idle"]`, "-", shared.image)
	}
	testenv.ReapStaleContainers()
	suffix := randomSuffix()
	shared.sandbox = "cf-dfilter-sandbox-" + suffix
	shared.other = "cf-dfilter-other-" + suffix
	shared.sandboxID = startContainer(t, shared.sandbox)
	shared.otherID = startContainer(t, shared.other)
	return nil
}

// startContainer starts an idle stand-in container hardened like the
// compose sandbox, and returns its ID.
func startContainer(t testing.TB, name string, extra ...string) string {
	t.Helper()
	trackContainer(name)
	args := append([]string{"run", "-d", "--name", name, "--label", testenv.OwnerLabelArg(),
		"--read-only", "--tmpfs", "/tmp:size=16m", "--cap-drop", "ALL",
		"--security-opt", "no-new-privileges", "--network", "none",
		"--memory", "64m", "--pids-limit", "64"}, extra...)
	return docker(t, nil, append(args, shared.image)...)
}

// writeRootfs writes a root filesystem holding only the stand-in, as
// /usr/local/bin/codeforge-run, and an empty /tmp.
func writeRootfs(w io.Writer, standin []byte) error {
	tw := tar.NewWriter(w)
	for _, d := range []string{"usr/", "usr/local/", "usr/local/bin/", "tmp/"} {
		mode := int64(0o755)
		if d == "tmp/" {
			mode = 0o1777
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: mode}); err != nil {
			return err
		}
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "usr/local/bin/codeforge-run", Mode: 0o755, Size: int64(len(standin))}); err != nil {
		return err
	}
	if _, err := tw.Write(standin); err != nil {
		return err
	}
	return tw.Close()
}

// testFilter is a filter served in-process on a unix socket, pointing at
// the real engine.
type testFilter struct {
	f      *Filter
	socket string
	logs   *syncBuffer
}

// syncBuffer is a log sink safe for concurrent writes.
type syncBuffer = testenv.LogBuffer

func startFilter(t *testing.T, opts Options) *testFilter {
	t.Helper()
	logs := &syncBuffer{}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	f, err := New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	// Unix socket paths are limited to 108 bytes; t.TempDir can be long.
	dir, err := os.MkdirTemp("", "cf-dfilter-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "docker.sock")
	ln, err := Listen(sock, 0o600, "")
	if err != nil {
		t.Fatalf("Listen: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
		f.Close()
	})
	return &testFilter{f: f, socket: sock, logs: logs}
}

// sandboxFilter is a filter for the shared sandbox container.
func sandboxFilter(t *testing.T) *testFilter {
	setup(t)
	return startFilter(t, Options{SandboxContainer: shared.sandbox})
}

// newClient is a moby client talking to host ("unix:///…").
func newClient(t testing.TB, host string) *client.Client {
	t.Helper()
	c, err := client.New(client.WithHost(host))
	if err != nil {
		t.Fatalf("docker client: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// realClient talks to the real engine, bypassing the filter.
func realClient(t testing.TB) *client.Client {
	return newClient(t, DefaultDockerHost)
}

// execIDs returns the exec IDs the engine knows for a container.
func execIDs(t testing.TB, c *client.Client, container string) []string {
	t.Helper()
	res, err := c.ContainerInspect(context.Background(), container, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatalf("inspect %s: %v", container, err)
	}
	ids := slices.Clone(res.Container.ExecIDs)
	slices.Sort(ids)
	return ids
}

// rawResponse is what the filter answered to a raw request.
type rawResponse struct {
	status int
	header http.Header
	body   string
}

// rawRequest writes request (a full HTTP/1.1 request head, without the
// final blank line) and body to the filter's socket byte for byte, so no
// client library cleans the path first, and reads the answer.
func rawRequest(t testing.TB, socket, head string, body []byte) rawResponse {
	t.Helper()
	conn, err := net.Dial("unix", socket)
	if err != nil {
		t.Fatalf("dial filter: %v", err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	var req bytes.Buffer
	req.WriteString(head)
	if !strings.Contains(head, "\r\nHost:") {
		req.WriteString("\r\nHost: docker")
	}
	if body != nil && !strings.Contains(head, "Content-Length:") && !strings.Contains(head, "Transfer-Encoding:") {
		fmt.Fprintf(&req, "\r\nContent-Length: %d", len(body))
	}
	req.WriteString("\r\nConnection: close\r\n\r\n")
	req.Write(body)
	if _, err := conn.Write(req.Bytes()); err != nil {
		t.Fatalf("write request: %v", err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("read response to %q: %v", strings.SplitN(head, "\r\n", 2)[0], err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return rawResponse{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

// newTestFilterlessTransport dials the real engine socket directly.
func newTestFilterlessTransport() *http.Transport {
	return &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", "/var/run/docker.sock")
	}}
}
