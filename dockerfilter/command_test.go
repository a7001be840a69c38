package dockerfilter

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/client"
)

// TestComposeDiscovery: without --sandbox-container the filter finds the
// sandbox as the running container of service "sandbox" in its own compose
// project (learned from its own container, found by hostname), never one
// of another project, and answers 503 while the sandbox is down.
func TestComposeDiscovery(t *testing.T) {
	setup(t)
	sfx := randomSuffix()
	projA, projB := "cfa"+sfx, "cfb"+sfx
	label := func(project, service string) []string {
		return []string{"--label", labelProject + "=" + project, "--label", labelService + "=" + service}
	}
	sandboxA := startContainer(t, "cf-dfilter-a-sandbox-"+sfx, label(projA, "sandbox")...)
	filterA := startContainer(t, "cf-dfilter-a-filter-"+sfx, label(projA, "dockerfilter")...)
	sandboxB := startContainer(t, "cf-dfilter-b-sandbox-"+sfx, label(projB, "sandbox")...)

	tf := startFilter(t, Options{Hostname: filterA[:12]})
	c := newClient(t, "unix://"+tf.socket)
	out := runExec(t, c, "sandbox", runOpts(validEnv), "")
	var rep standinReport
	if err := json.Unmarshal([]byte(out.stdout), &rep); err != nil {
		t.Fatalf("stand-in report %q: %v", out.stdout, err)
	}
	if !slices.Contains(rep.Env, "HOSTNAME="+sandboxA[:12]) {
		t.Errorf("exec ran in a container with env %q, want project %s's sandbox %s", rep.Env, projA, sandboxA[:12])
	}
	if got := realExecInspect(t, out.id).ContainerID; got != sandboxA {
		t.Errorf("exec ran on container %s, want project A's sandbox %s", got, sandboxA)
	}
	real := realClient(t)
	before := execIDs(t, real, sandboxB)
	assertRefused(t, rawRequest(t, tf.socket, "POST /containers/"+sandboxB+"/exec HTTP/1.1\r\nContent-Type: application/json", createBody(t, nil)), "other project's sandbox")
	if after := execIDs(t, real, sandboxB); !slices.Equal(before, after) {
		t.Errorf("execs on the other project's sandbox changed: %v -> %v", before, after)
	}

	docker(t, nil, "stop", "-t", "1", sandboxA)
	resp := rawRequest(t, tf.socket, createHead, createBody(t, nil))
	if resp.status != http.StatusServiceUnavailable || !strings.Contains(resp.body, "sandbox unavailable") {
		t.Errorf("exec create with the sandbox stopped: %d %s, want 503 sandbox unavailable", resp.status, resp.body)
	}
	docker(t, nil, "start", sandboxA)
	runExec(t, c, "sandbox", runOpts(validEnv), "")
}

// TestCommand runs the subcommand itself: it serves on its socket with the
// mode asked for, and returns nil when its context ends.
func TestCommand(t *testing.T) {
	setup(t)
	dir, err := os.MkdirTemp("", "cf-dfcmd-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "f.sock")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- Command(ctx, []string{"--listen", "unix://" + sock, "--sandbox-container", shared.sandbox, "--socket-mode", "0660", "--socket-owner", "10001:10001"},
			func(string) (string, bool) { return "", false }, &stderr)
	}()
	// Wait for the socket (no timing is asserted; the deadline only stops
	// a hung test).
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("Command ended early: %v\n%s", err, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("socket never appeared:\n%s", stderr.String())
		}
	}
	fi, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if fi.Mode().Perm() != 0o660 || st.Uid != 10001 || st.Gid != 10001 {
		t.Errorf("socket mode %v owner %d:%d, want 0660 10001:10001", fi.Mode().Perm(), st.Uid, st.Gid)
	}
	c := newClient(t, "unix://"+sock)
	if _, err := c.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		t.Errorf("ping through Command's socket: %v", err)
	}
	if _, err := c.ContainerList(ctx, client.ContainerListOptions{}); err == nil || !strings.Contains(err.Error(), "dockerfilter") {
		t.Errorf("container list through Command's socket: %v, want the filter's refusal", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Command after cancel: %v", err)
	}
	if !strings.Contains(stderr.String(), "component=dockerfilter") {
		t.Errorf("Command logged no dockerfilter lines:\n%s", stderr.String())
	}
}

// TestCommandRejectsBadFlags: each bad setting is refused at start with a
// message naming it, and nothing is listened on.
func TestCommandRejectsBadFlags(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--run-user", "0:0"}, "run user"},
		{[]string{"--run-user", "root"}, "run user"},
		{[]string{"--docker-host", "tcp://127.0.0.1:2375"}, "docker host"},
		{[]string{"--listen", "0.0.0.0:2375"}, "loopback only"},
		{[]string{"--socket-mode", "999"}, "socket-mode"},
		{[]string{"--socket-owner", "sandbox"}, "socket owner"},
		{[]string{"--wrapper", "codeforge-run"}, "wrapper"},
		{[]string{"--sandbox-service", "a/b"}, "sandbox service"},
		{[]string{"extra"}, `unexpected argument "extra"`},
	} {
		args := append([]string{"--listen", filepath.Join(dir, "s.sock")}, tc.args...)
		var stderr bytes.Buffer
		err := Command(context.Background(), args, func(string) (string, bool) { return "", false }, &stderr)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Command %q: %v, want an error about %q", tc.args, err, tc.want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "s.sock")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused start left a socket behind: %v", err)
	}
}

// TestExecRegistry: IDs are remembered for ttl, at most max of them, and
// each starts once.
func TestExecRegistry(t *testing.T) {
	now := time.Unix(1000, 0)
	r := newExecRegistry(3, time.Minute, func() time.Time { return now })
	for i := range 4 {
		r.add(fmt.Sprint("id", i))
		now = now.Add(time.Second)
	}
	if r.known("id0") {
		t.Errorf("id0 still known with max 3 and 4 added")
	}
	if !r.known("id1") || !r.known("id3") {
		t.Errorf("recent IDs forgotten")
	}
	if !r.start("id2") || r.start("id2") {
		t.Errorf("id2 must start exactly once")
	}
	if r.start("nope") {
		t.Errorf("unknown ID started")
	}
	now = now.Add(time.Minute)
	if r.known("id3") || r.start("id3") {
		t.Errorf("IDs older than the ttl are still known")
	}
}
