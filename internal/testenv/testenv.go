// Package testenv finds (or installs) the real tools the tests drive: Deno
// and the Docker engine. A missing tool (or root) stops the test with a
// message saying how to get it: under ./test.sh, which sets
// CODEFORGE_TEST_STRICT=1, that is a failure; run by hand without it, a
// skip that says why (Missing). It is never a silent skip. It also holds what
// several packages' tests share: throwaway TLS certificate authorities (CA)
// and the removal of test containers a killed test process left behind.
package testenv

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// DenoVersion is the Deno release the project pins (npm @deno/linux-x64-glibc).
const DenoVersion = "2.9.6"

var (
	denoOnce     = sync.OnceValues(findOrInstallDeno)
	isolatedOnce = sync.OnceValues(writeIsolatedDeno)
)

// DenoBinary returns the path of the real deno binary: $DENO_BIN, then
// PATH, then the repository's npm cache (.cache/deno), installing it there
// from npm when it is missing. It stops the test (Missing) when none can
// be had.
// Tests whose code may reach a host name use Deno instead.
func DenoBinary(t testing.TB) string {
	t.Helper()
	p, err := denoOnce()
	if err != nil {
		Missing(t, "deno is required for this test and could not be found or installed: %v\n"+
			"install it with: npm install --prefix .cache/deno @deno/linux-x64-glibc@%s (or run ./test.sh)", err, DenoVersion)
	}
	return p
}

// Deno returns a deno executable whose name lookups never leave the
// machine. Deno resolves a fetch's host name itself even when it goes
// through a proxy, so test code fetching "https://api.test/" would ask the
// machine's DNS server. The returned wrapper runs the real deno in a
// private mount namespace whose /etc/hosts maps the tests' names (TestHosts)
// to 127.0.0.1 and whose /etc/resolv.conf names only 127.0.0.1. It needs
// root (CAP_SYS_ADMIN), as the test suite has in CI.
func Deno(t testing.TB) string {
	t.Helper()
	DenoBinary(t)
	p, err := isolatedOnce()
	if err != nil {
		Missing(t, "cannot run deno with loopback-only name resolution (%v); the tests need root for a private mount namespace (run ./test.sh as root)", err)
	}
	return p
}

// TestHosts are the host names test code may fetch; in Deno's view they
// resolve to 127.0.0.1 (the proxy under test decides where they really go).
var TestHosts = []string{
	"api.test", "api.codeforge.test", "anything.codeforge.test", "other.codeforge.test",
	"alpha.test", "beta.test", "demo.test", "first.test", "second.test", "other.test", "x.test",
}

func writeIsolatedDeno() (string, error) {
	real, err := denoOnce()
	if err != nil {
		return "", err
	}
	if os.Geteuid() != 0 {
		return "", fmt.Errorf("not root (euid %d)", os.Geteuid())
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		return "", err
	}
	hosts := "127.0.0.1 localhost\n::1 localhost\n127.0.0.1 " + strings.Join(TestHosts, " ") + "\n"
	resolv := "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n"
	// One directory per content, shared by the test processes of a run
	// (and later runs): named by a hash, files written by rename.
	sum := sha256.Sum256([]byte(unshare + "\x00" + real + "\x00" + hosts + resolv))
	dir := filepath.Join(os.TempDir(), "codeforge-test-deno-"+hex.EncodeToString(sum[:8]))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	script := fmt.Sprintf(`#!/bin/sh
# deno for tests: private /etc/hosts and /etc/resolv.conf, so no name lookup
# leaves the machine (internal/testenv.Deno).
exec %s --mount --propagation private -- /bin/sh -c '
	mount --bind "$1" /etc/hosts && mount --bind "$2" /etc/resolv.conf || exit 125
	deno=$3; shift 3; unset PWD OLDPWD; exec "$deno" "$@"' codeforge-test-deno %s %s %s "$@"
`, shellQuote(unshare), shellQuote(filepath.Join(dir, "hosts")), shellQuote(filepath.Join(dir, "resolv.conf")), shellQuote(real))
	wrapper := filepath.Join(dir, "deno")
	for name, f := range map[string]struct {
		content string
		mode    os.FileMode
	}{"hosts": {hosts, 0o644}, "resolv.conf": {resolv, 0o644}, "deno": {script, 0o755}} {
		if err := writeFileAtomic(filepath.Join(dir, name), f.content, f.mode); err != nil {
			return "", err
		}
	}
	out, err := exec.Command(wrapper, "--version").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s --version: %v: %s", wrapper, err, out)
	}
	return wrapper, nil
}

// writeFileAtomic writes path by rename, so a concurrent reader (another
// test process) sees the old or the new file, never half of one.
func writeFileAtomic(path, content string, mode os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.WriteString(content); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

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

// Docker stops the test (Missing) unless a Docker engine answers
// `docker info`.
func Docker(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		Missing(t, "a running Docker engine is required for this test: %v: %s\n"+
			"install and start it with: apt-get install -y docker.io iptables && dockerd & (or run ./test.sh)", err, out)
	}
}
