package proxy

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/codeforge/codeforge/internal/testenv"
)

// commandHelperEnv makes the test binary run `codeforge proxy` with the
// JSON-encoded arguments it holds, until SIGTERM (see TestMain).
const commandHelperEnv = "CODEFORGE_PROXY_COMMAND_HELPER"

func TestMain(m *testing.M) {
	if raw, ok := os.LookupEnv(commandHelperEnv); ok {
		var args []string
		if err := json.Unmarshal([]byte(raw), &args); err != nil {
			fmt.Fprintln(os.Stderr, "command helper:", err)
			os.Exit(2)
		}
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
		defer stop()
		getenv := func(string) (string, bool) { return "", false }
		if err := Command(ctx, args, getenv, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, "command helper:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestCommandTransparentLocalMode runs `codeforge proxy --mode transparent`
// as root in a network namespace of its own, the way the compose override
// does: it installs the local-mode rules for the sandbox user, drops to
// --run-as before it reads anything, redirects the sandbox user's
// connections to itself, and on SIGTERM leaves the lockdown in place.
func TestCommandTransparentLocalMode(t *testing.T) {
	t.Parallel()
	testenv.Root(t, "it creates a network namespace and starts the proxy as root")
	b := make([]byte, 4)
	rand.Read(b)
	ns := "cf-test-" + hex.EncodeToString(b)
	sh := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	sh("ip", "netns", "add", ns)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	sh("ip", "-n", ns, "link", "set", "lo", "up")
	sh("ip", "-n", ns, "addr", "add", "10.78.0.1/32", "dev", "lo")

	// The proxy's files, writable by the user it drops to.
	dir, err := os.MkdirTemp("", "cf-proxy-cmd-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	writeAPI(t, filepath.Join(dir, "apis"), "alpha", map[string]any{"domains": []string{"api.test"}})
	for _, d := range []string{dir, filepath.Join(dir, "data")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(d, 10001, 10002); err != nil {
			t.Fatal(err)
		}
	}
	args, _ := json.Marshal([]string{"--mode=transparent", "--listen=127.0.0.1:3128",
		"--apis-dir=" + filepath.Join(dir, "apis"), "--ca-dir=" + filepath.Join(dir, "data", "ca"),
		"--control-listen=127.0.0.1:3129", "--control-token-file=" + filepath.Join(dir, "data", "token"),
		"--transparent-uid=10001", "--transparent-gid=10001", "--transparent-dns=127.0.0.11", "--run-as=10001:10002"})
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", ns, exe)
	cmd.Env = append(os.Environ(), commandHelperEnv+"="+string(args))
	var logs syncBuffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
	})
	waitLog(t, &logs, regexp.MustCompile(`msg=listening .*mode=transparent`), 0, done)
	for _, want := range []string{"transparent rules applied", "running unprivileged"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs.String())
		}
	}

	// The process (ip netns exec execs it: same pid) runs as 10001:10002
	// with no capability; its files are that user's.
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, re := range []string{`(?m)^Uid:\s+10001\s+10001\s+10001\s+10001$`, `(?m)^Gid:\s+10002\s+10002\s+10002\s+10002$`, `(?m)^CapEff:\s+0+$`, `(?m)^CapPrm:\s+0+$`} {
		if !regexp.MustCompile(re).Match(status) {
			t.Errorf("proxy process status does not match %s:\n%s", re, status)
		}
	}
	if fi, err := os.Stat(filepath.Join(dir, "data", "token")); err != nil || fi.Sys().(*syscall.Stat_t).Uid != 10001 {
		t.Errorf("control token file: %v, want it created by uid 10001", err)
	}

	// The sandbox user's plain HTTP to a host not configured reaches the
	// proxy (which refuses it); its connection to the control port does
	// not get anywhere.
	got, err := inNetnsAs(ns, 10001, 10001, func() (string, error) {
		c, err := net.DialTimeout("tcp", "10.78.0.1:80", 10*time.Second)
		if err != nil {
			return "", err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: 10.78.0.1\r\nConnection: close\r\n\r\n")
		line, err := bufio.NewReader(c).ReadString('\n')
		return line, err
	})
	if err != nil || !strings.HasPrefix(got, "HTTP/1.1 4") {
		t.Errorf("sandbox user's HTTP request through the redirect: %q, %v; want the proxy's refusal", got, err)
	}
	if _, err := inNetnsAs(ns, 10001, 10001, func() (string, error) {
		c, err := net.DialTimeout("tcp", "127.0.0.1:3129", 10*time.Second)
		if err == nil {
			c.Close()
		}
		return "", err
	}); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("sandbox user to the control port: %v; want connection refused", err)
	}

	// Stopping keeps the lockdown.
	cmd.Process.Signal(syscall.SIGTERM)
	if err := <-done; err != nil {
		t.Fatalf("proxy exited with %v\n%s", err, logs.String())
	}
	done <- nil // for the cleanup
	if !strings.Contains(logs.String(), "transparent rules kept") {
		t.Errorf("no 'transparent rules kept' line in the log:\n%s", logs.String())
	}
	if filter := sh("ip", "netns", "exec", ns, "iptables", "-S"); !strings.Contains(filter, "--uid-owner 10001 --gid-owner 10001 -j CODEFORGE-PROXY") {
		t.Errorf("the lockdown is gone after the proxy stopped:\n%s", filter)
	}
}

// inNetnsAs runs fn on a throwaway OS thread inside ns whose sockets
// belong to uid:gid as far as iptables' owner match is concerned.
func inNetnsAs(ns string, uid, gid int, fn func() (string, error)) (string, error) {
	type result struct {
		s   string
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		f, err := os.Open("/run/netns/" + ns)
		if err != nil {
			ch <- result{"", err}
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- result{"", err}
			return
		}
		if err := unix.Setfsgid(gid); err != nil {
			ch <- result{"", err}
			return
		}
		if err := unix.Setfsuid(uid); err != nil {
			ch <- result{"", err}
			return
		}
		s, err := fn()
		ch <- result{s, err}
	}()
	r := <-ch
	return r.s, r.err
}
