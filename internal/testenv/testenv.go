// Package testenv finds (or installs) the real tools the tests drive: Deno
// and the Docker engine. A missing tool fails the test with a message saying
// how to install it; it never turns into a silent skip.
package testenv

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"
)

// DenoVersion is the Deno release the project pins (npm @deno/linux-x64-glibc).
const DenoVersion = "2.9.6"

var denoOnce = sync.OnceValues(findOrInstallDeno)

// Deno returns the path of a deno binary: $DENO_BIN, then PATH, then the
// repository's npm cache (.cache/deno), installing it there from npm when
// it is missing. It fails the test when none can be had.
func Deno(t testing.TB) string {
	t.Helper()
	p, err := denoOnce()
	if err != nil {
		t.Fatalf("deno is required for this test and could not be found or installed: %v\n"+
			"install it with: npm install --prefix .cache/deno @deno/linux-x64-glibc@%s (or run ./test.sh)", err, DenoVersion)
	}
	return p
}

func findOrInstallDeno() (string, error) {
	if p := os.Getenv("DENO_BIN"); p != "" {
		return p, nil
	}
	if p, err := exec.LookPath("deno"); err == nil {
		return p, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	prefix := filepath.Join(root, ".cache", "deno")
	bin := filepath.Join(prefix, "node_modules", "@deno", "linux-x64-glibc", "deno")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "install", "--no-audit", "--no-fund", "--prefix", prefix, "@deno/linux-x64-glibc@"+DenoVersion)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", &installError{err: err, out: string(out)}
	}
	if err := os.Chmod(bin, 0o755); err != nil {
		return "", err
	}
	return bin, nil
}

type installError struct {
	err error
	out string
}

func (e *installError) Error() string { return "npm install: " + e.err.Error() + ": " + e.out }

// RepoRoot returns the module's root directory (where go.mod is).
func RepoRoot() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", os.ErrNotExist
	}
	return filepath.Abs(filepath.Join(filepath.Dir(file), "..", ".."))
}

// Docker fails the test unless a Docker engine answers `docker info`.
func Docker(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		t.Fatalf("a running Docker engine is required for this test: %v: %s\n"+
			"install and start it with: apt-get install -y docker.io iptables && dockerd & (or run ./test.sh)", err, out)
	}
}
