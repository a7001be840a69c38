// Package dockertest starts real sandboxes for tests of the Docker
// backend: a sandbox image assembled without any registry from this
// machine's own deno, dash and coreutils plus the repository's
// codeforge-run (./cmd/codeforge-run, built static), a container of it hardened like the
// compose service, and a socket filter (package dockerfilter) in-process
// in front of the real engine. Everything it starts is removed by
// t.Cleanup. A missing engine or deno stops the test (testenv.Missing).
package dockertest

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"

	"github.com/codeforge/codeforge/dockerfilter"
	"github.com/codeforge/codeforge/internal/testenv"
)

// tools are the host programs the tests use in the sandbox besides deno
// and the wrapper (the shell's builtins cover echo, printf, read, kill,
// wait, test).
var tools = []string{"dash", "timeout", "setsid", "env", "rm", "mkdir", "chmod", "sleep", "cat", "du", "find", "wc", "cut", "tar"}

var images sync.Map // wrapper-hash -> *imageOnce

type imageOnce struct {
	once sync.Once
	tag  string
	err  error
}

// Image returns the tag of a sandbox image holding /usr/local/bin/deno,
// /usr/local/bin/codeforge-run (the repository's current one), /bin/sh
// (dash), the coreutils the wrapper uses with their libraries, /skills
// owned by 10001 and a throwaway CA certificate at /ca/ca.pem. It is
// built by `docker import` once per content and reused.
func Image(t testing.TB) string {
	t.Helper()
	testenv.Docker(t)
	deno := testenv.DenoBinary(t)
	wrapper, err := os.ReadFile(testenv.WrapperBinary(t))
	if err != nil {
		t.Fatalf("read wrapper: %v", err)
	}
	files, err := hostFiles(deno)
	if err != nil {
		t.Fatalf("collect host binaries for the test image: %v", err)
	}
	h := sha256.New()
	h.Write(wrapper)
	for _, f := range files {
		fi, err := os.Stat(f.src)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(h, "%s %s %d %d\n", f.dst, f.src, fi.Size(), fi.ModTime().UnixNano())
	}
	tag := "codeforge-test/sandbox:" + hex.EncodeToString(h.Sum(nil)[:6])
	v, _ := images.LoadOrStore(tag, &imageOnce{})
	entry := v.(*imageOnce)
	entry.once.Do(func() {
		entry.tag = tag
		if exec.Command("docker", "image", "inspect", tag).Run() == nil {
			return
		}
		// A throwaway CA: the sandbox only needs the proxy's CA to
		// exist for --check.
		entry.err = buildImage(tag, wrapper, testenv.NewCA(t).PEM, files)
	})
	if entry.err != nil {
		t.Fatalf("build test sandbox image: %v", entry.err)
	}
	return entry.tag
}

type hostFile struct{ src, dst string }

// hostFiles lists deno, the tools and every library they load, with the
// path each gets in the image.
func hostFiles(deno string) ([]hostFile, error) {
	denoReal, err := filepath.EvalSymlinks(deno)
	if err != nil {
		return nil, err
	}
	files := []hostFile{{denoReal, "usr/local/bin/deno"}}
	bins := []string{denoReal}
	for _, tool := range tools {
		p, err := exec.LookPath(tool)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", tool, err)
		}
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			return nil, err
		}
		dst := "usr/bin/" + tool
		if tool == "dash" {
			dst = "bin/sh"
		}
		files = append(files, hostFile{real, dst})
		bins = append(bins, real)
	}
	libs := map[string]bool{}
	for _, b := range bins {
		out, err := exec.Command("ldd", b).Output()
		if err != nil {
			return nil, fmt.Errorf("ldd %s: %w", b, err)
		}
		for _, line := range strings.Split(string(out), "\n") {
			for _, field := range strings.Fields(line) {
				if strings.HasPrefix(field, "/") {
					libs[field] = true
				}
			}
		}
	}
	var names []string
	for l := range libs {
		names = append(names, l)
	}
	sort.Strings(names)
	for _, l := range names {
		real, err := filepath.EvalSymlinks(l)
		if err != nil {
			return nil, err
		}
		files = append(files, hostFile{real, strings.TrimPrefix(l, "/")})
	}
	return files, nil
}

func buildImage(tag string, wrapper, caPEM []byte, files []hostFile) error {
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeRootfs(pw, wrapper, caPEM, files)) }()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "docker", "import",
		"--change", `CMD ["/usr/local/bin/codeforge-run","--idle"]`,
		"--change", "USER 10001:10001",
		"--change", "WORKDIR /tmp",
		"--change", "ENV PATH=/usr/local/bin:/usr/bin:/bin",
		"-", tag)
	cmd.Stdin = pr
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("docker import: %v: %s", err, out)
	}
	// Drop the images of earlier wrapper versions (those still in use by a
	// container stay; errors do not matter).
	repo, _, _ := strings.Cut(tag, ":")
	out, _ := exec.Command("docker", "images", "--format", "{{.Repository}}:{{.Tag}}", repo).Output()
	for _, old := range strings.Fields(string(out)) {
		if old != tag {
			_ = exec.Command("docker", "image", "rm", old).Run()
		}
	}
	return nil
}

func writeRootfs(w io.Writer, wrapper, caPEM []byte, files []hostFile) error {
	tw := tar.NewWriter(w)
	dirs := map[string]bool{}
	var mkdirs func(string) error
	mkdirs = func(d string) error {
		if d == "." || d == "" || dirs[d] {
			return nil
		}
		if err := mkdirs(filepath.Dir(d)); err != nil {
			return err
		}
		dirs[d] = true
		hdr := &tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755}
		switch d {
		case "tmp":
			hdr.Mode = 0o1777
		case "skills":
			hdr.Uid, hdr.Gid = 10001, 10001
		}
		return tw.WriteHeader(hdr)
	}
	add := func(name string, mode int64, data []byte) error {
		if err := mkdirs(filepath.Dir(name)); err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data))}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	for _, d := range []string{"tmp", "skills", "ca", "etc", "proc", "dev", "sys"} {
		if err := mkdirs(d); err != nil {
			return err
		}
	}
	if err := add("etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/usr/sbin/nologin\nsandbox:x:10001:10001::/nonexistent:/usr/sbin/nologin\n")); err != nil {
		return err
	}
	if err := add("etc/group", 0o644, []byte("root:x:0:\nsandbox:x:10001:\n")); err != nil {
		return err
	}
	if err := add("ca/ca.pem", 0o644, caPEM); err != nil {
		return err
	}
	if err := add("usr/local/bin/codeforge-run", 0o755, wrapper); err != nil {
		return err
	}
	for _, f := range files {
		data, err := os.ReadFile(f.src)
		if err != nil {
			return err
		}
		if err := add(f.dst, 0o755, data); err != nil {
			return err
		}
	}
	return tw.Close()
}

// Options configures Start.
type Options struct {
	// Image is the sandbox image; empty means Image(t).
	Image string
	// MemoryMB is the container's memory limit; default 512 like compose.
	MemoryMB int
	// PidsLimit is the container's pids limit; default 128.
	PidsLimit int
	// TmpfsMB is the size of /tmp; default 64.
	TmpfsMB int
	// Args are extra `docker run` arguments (e.g. a mount over /ca).
	Args []string
	// NoFilter skips starting a socket filter.
	NoFilter bool
	// Logger receives the filter's logs; nil discards them.
	Logger *slog.Logger
}

// Sandbox is a running sandbox container and the filter in front of it.
type Sandbox struct {
	// Name and ID of the container.
	Name, ID string
	// FilterHost is the filter's socket as a Docker host, unix:///….
	FilterHost string
}

// Start runs a sandbox container with the compose service's hardening
// (read-only root, /tmp tmpfs, all capabilities dropped,
// no-new-privileges, memory and pids limits, no network, user 10001;
// /skills a writable tmpfs for the skills volume)
// and, unless opts.NoFilter, a socket filter in-process for it.
func Start(t testing.TB, opts Options) *Sandbox {
	t.Helper()
	testenv.Docker(t)
	if opts.Image == "" {
		opts.Image = Image(t)
	}
	if opts.MemoryMB == 0 {
		opts.MemoryMB = 512
	}
	if opts.PidsLimit == 0 {
		opts.PidsLimit = 128
	}
	if opts.TmpfsMB == 0 {
		opts.TmpfsMB = 64
	}
	reapOnce.Do(testenv.ReapStaleContainers)
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	name := "cf-test-sandbox-" + hex.EncodeToString(b)
	t.Cleanup(func() { _ = exec.Command("docker", "rm", "-f", name).Run() })
	args := []string{"run", "-d", "--name", name,
		"--read-only", "--tmpfs", fmt.Sprintf("/tmp:rw,nosuid,nodev,size=%dm", opts.TmpfsMB),
		// /skills is a named volume in compose; a tmpfs owned by the
		// sandbox user stands in for it.
		"--tmpfs", "/skills:rw,nosuid,nodev,size=16m,uid=10001,gid=10001,mode=0755",
		"--cap-drop", "ALL", "--security-opt", "no-new-privileges",
		"--memory", fmt.Sprintf("%dm", opts.MemoryMB), "--memory-swap", fmt.Sprintf("%dm", opts.MemoryMB),
		"--pids-limit", fmt.Sprint(opts.PidsLimit), "--network", "none", "--user", "10001:10001",
		"--label", testenv.OwnerLabelArg()}
	args = append(args, opts.Args...)
	id := run(t, append(args, opts.Image)...)
	sb := &Sandbox{Name: name, ID: id}
	if !opts.NoFilter {
		sb.FilterHost = StartFilter(t, name, opts.Logger)
	}
	return sb
}

var reapOnce sync.Once

// StartFilter serves a socket filter for the named sandbox container on a
// fresh unix socket and returns it as a Docker host (unix:///…).
func StartFilter(t testing.TB, container string, log *slog.Logger) string {
	t.Helper()
	f, err := dockerfilter.New(dockerfilter.Options{SandboxContainer: container, Logger: log})
	if err != nil {
		t.Fatalf("dockerfilter.New: %v", err)
	}
	// Unix socket paths are limited to 108 bytes; t.TempDir can be longer.
	dir, err := os.MkdirTemp("", "cf-filter-")
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "docker.sock")
	ln, err := dockerfilter.Listen(sock, 0o600, "")
	if err != nil {
		t.Fatalf("dockerfilter.Listen: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("dockerfilter.Serve: %v", err)
		}
		f.Close()
		os.RemoveAll(dir)
	})
	return "unix://" + sock
}

// Processes lists the processes in the container as `docker top` sees
// them from the host (so nothing inside the sandbox is trusted), one
// "PID COMMAND" line each.
func (s *Sandbox) Processes(t testing.TB) []string {
	t.Helper()
	out := run(t, "top", s.ID, "-o", "pid,stat,args")
	lines := strings.Split(out, "\n")
	if len(lines) > 0 {
		lines = lines[1:] // header
	}
	return lines
}

// Exec runs a command in the container via the real engine, for checks a
// test makes from outside the filter. It runs as the sandbox user 10001,
// who owns every run's files: root in the sandbox has no capabilities, so
// it could not even look into a run's 0700 directories.
func (s *Sandbox) Exec(t testing.TB, args ...string) string {
	t.Helper()
	return run(t, append([]string{"exec", "-u", "10001:10001", s.ID}, args...)...)
}

// Docker runs the docker CLI and returns its trimmed stdout.
func Docker(t testing.TB, args ...string) string {
	t.Helper()
	return run(t, args...)
}

func run(t testing.TB, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "docker", args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("docker %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return strings.TrimSpace(stdout.String())
}

// BareExec runs cmd (as user, with env, stdin on its standard input) in
// container with the Go client straight on the engine's socket: no CLI,
// no filter, no wrapper. It is the baseline of the Docker benchmarks, and
// fails the benchmark unless cmd exits 0 and prints want.
func BareExec(b testing.TB, engine *client.Client, container, user string, env, cmd []string, stdin, want string) {
	ctx := context.Background()
	created, err := engine.ExecCreate(ctx, container, client.ExecCreateOptions{
		AttachStdin: true, AttachStdout: true, AttachStderr: true, User: user, Env: env, Cmd: cmd,
	})
	if err != nil {
		b.Fatal(err)
	}
	att, err := engine.ExecAttach(ctx, created.ID, client.ExecAttachOptions{})
	if err != nil {
		b.Fatal(err)
	}
	go func() { _, _ = io.WriteString(att.Conn, stdin); _ = att.CloseWrite() }()
	var out bytes.Buffer
	_, err = stdcopy.StdCopy(&out, io.Discard, att.Reader)
	att.Close()
	if err != nil || out.String() != want {
		b.Fatalf("bare API exec: %q %v", out.String(), err)
	}
	if insp, err := engine.ExecInspect(ctx, created.ID, client.ExecInspectOptions{}); err != nil || insp.ExitCode != 0 {
		b.Fatalf("bare API exec inspect: %+v %v", insp, err)
	}
}
