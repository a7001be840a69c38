package dockerfilter

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"
)

// validEnv is a run's environment as the server's runner sends it.
var validEnv = []string{
	"CODEFORGE_RUN_ID=0123456789abcdef",
	"CODEFORGE_TIMEOUT=5",
	"CODEFORGE_ALLOW_NET=api.test,other.test:8443",
	"CODEFORGE_MEMORY_MB=256",
	"CODEFORGE_READ=/skills/types/a.d.ts,/apis/b.d.ts",
	"HTTPS_PROXY=http://run-1f2e:s3cretvalue@proxy:3128",
	"HTTP_PROXY=http://run-1f2e:s3cretvalue@proxy:3128",
}

// standinReport is what the stand-in codeforge-run prints.
type standinReport struct {
	UID    int      `json:"uid"`
	GID    int      `json:"gid"`
	Groups []int    `json:"groups"`
	Args   []string `json:"args"`
	Env    []string `json:"env"`
	Cwd    string   `json:"cwd"`
	Stdin  string   `json:"stdin"`
}

type execOutcome struct {
	id             string
	stdout, stderr string
	exitCode       int
}

// runExec creates, starts (attached, stdin written then closed) and
// inspects an exec through c, failing the test on any error.
func runExec(t *testing.T, c *client.Client, container string, opts client.ExecCreateOptions, stdin string) execOutcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	created, err := c.ExecCreate(ctx, container, opts)
	if err != nil {
		t.Fatalf("exec create: %v", err)
	}
	att, err := c.ExecAttach(ctx, created.ID, client.ExecAttachOptions{})
	if err != nil {
		t.Fatalf("exec attach: %v", err)
	}
	defer att.Close()
	if opts.AttachStdin {
		if _, err := io.WriteString(att.Conn, stdin); err != nil {
			t.Fatalf("write stdin: %v", err)
		}
		if err := att.CloseWrite(); err != nil {
			t.Fatalf("close stdin: %v", err)
		}
	}
	var stdout, stderr bytes.Buffer
	if _, err := stdcopy.StdCopy(&stdout, &stderr, att.Reader); err != nil {
		t.Fatalf("read exec output: %v", err)
	}
	var insp client.ExecInspectResult
	for {
		if insp, err = c.ExecInspect(ctx, created.ID, client.ExecInspectOptions{}); err != nil {
			t.Fatalf("exec inspect: %v", err)
		}
		if !insp.Running {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	return execOutcome{id: created.ID, stdout: stdout.String(), stderr: stderr.String(), exitCode: insp.ExitCode}
}

// processConfig is the part of the engine's exec inspect answer that says
// how the process really ran.
type processConfig struct {
	ProcessConfig struct {
		User       string   `json:"user"`
		Privileged bool     `json:"privileged"`
		Tty        bool     `json:"tty"`
		Entrypoint string   `json:"entrypoint"`
		Arguments  []string `json:"arguments"`
	}
	ContainerID string
	ExitCode    *int
	Pid         int
	Running     bool
}

// realExecInspect reads an exec's configuration straight from the engine.
func realExecInspect(t *testing.T, id string) processConfig {
	t.Helper()
	hc := &http.Client{Transport: newTestFilterlessTransport()}
	resp, err := hc.Get("http://docker/exec/" + id + "/json")
	if err != nil {
		t.Fatalf("inspect exec %s: %v", id, err)
	}
	defer resp.Body.Close()
	var pc processConfig
	if err := json.NewDecoder(resp.Body).Decode(&pc); err != nil {
		t.Fatalf("decode exec inspect: %v", err)
	}
	return pc
}

func runOpts(env []string) client.ExecCreateOptions {
	return client.ExecCreateOptions{AttachStdin: true, AttachStdout: true, AttachStderr: true, Env: env, Cmd: []string{"codeforge-run"}}
}

// TestExecThroughFilter: the runner's exec goes through, runs the wrapper
// as 10001:10001 unprivileged with exactly the run's environment, stdin
// reaches it and is closed, stdout and stderr come back demultiplexed, and
// the exit code is read back through the filter.
func TestExecThroughFilter(t *testing.T) {
	tf := sandboxFilter(t)
	c := newClient(t, "unix://"+tf.socket)
	for _, target := range []string{"sandbox", shared.sandbox, shared.sandboxID} {
		t.Run(target[:min(len(target), 20)], func(t *testing.T) {
			out := runExec(t, c, target, runOpts(validEnv), "console.log(1)\n")
			if out.exitCode != 7 {
				t.Errorf("exit code %d, want the stand-in's 7", out.exitCode)
			}
			if out.stderr != "standin stderr line\n" {
				t.Errorf("stderr %q, want the stand-in's line", out.stderr)
			}
			var rep standinReport
			if err := json.Unmarshal([]byte(out.stdout), &rep); err != nil {
				t.Fatalf("stand-in report %q: %v", out.stdout, err)
			}
			if rep.UID != 10001 || rep.GID != 10001 {
				t.Errorf("ran as %d:%d, want 10001:10001", rep.UID, rep.GID)
			}
			if !slices.Equal(rep.Args, []string{DefaultWrapper}) {
				t.Errorf("argv %q, want only the wrapper's absolute path", rep.Args)
			}
			if rep.Stdin != "console.log(1)\n" {
				t.Errorf("stdin %q, want the code the client wrote", rep.Stdin)
			}
			for _, e := range validEnv {
				if !slices.Contains(rep.Env, e) {
					t.Errorf("env lacks %s", strings.SplitN(e, "=", 2)[0])
				}
			}
			for _, e := range rep.Env {
				k, _, _ := strings.Cut(e, "=")
				if k != "PATH" && k != "HOSTNAME" && k != "HOME" && !slices.ContainsFunc(validEnv, func(v string) bool { return strings.HasPrefix(v, k+"=") }) {
					t.Errorf("env has %s, which the run did not ask for", k)
				}
			}
			pc := realExecInspect(t, out.id)
			if pc.ContainerID != shared.sandboxID {
				t.Errorf("exec ran on %s, want the sandbox %s", pc.ContainerID, shared.sandboxID)
			}
			if pc.ProcessConfig.User != DefaultRunUser || pc.ProcessConfig.Privileged || pc.ProcessConfig.Tty ||
				pc.ProcessConfig.Entrypoint != DefaultWrapper || len(pc.ProcessConfig.Arguments) != 0 {
				t.Errorf("engine ran %+v, want the wrapper as %s, unprivileged, no tty, no arguments", pc.ProcessConfig, DefaultRunUser)
			}
		})
	}
	t.Run("check, probe, kill and collect", func(t *testing.T) {
		for _, cmd := range [][]string{{"codeforge-run", "--check"}, {"codeforge-run", "--check", "192.0.2.1:3128"}, {"codeforge-run", "--kill", "0123456789abcdef"}, {"codeforge-run", "--collect", "0123456789abcdef"}} {
			out := runExec(t, c, "sandbox", client.ExecCreateOptions{AttachStdout: true, AttachStderr: true, Cmd: cmd}, "")
			var rep standinReport
			if err := json.Unmarshal([]byte(out.stdout), &rep); err != nil {
				t.Fatalf("stand-in report %q: %v", out.stdout, err)
			}
			want := append([]string{DefaultWrapper}, cmd[1:]...)
			if !slices.Equal(rep.Args, want) || rep.UID != 10001 {
				t.Errorf("ran %q as %d, want %q as 10001", rep.Args, rep.UID, want)
			}
		}
	})
	logs := tf.logs.String()
	if !strings.Contains(logs, "component=dockerfilter") || !strings.Contains(logs, "msg=allow") {
		t.Errorf("logs lack allow lines tagged component=dockerfilter:\n%s", logs)
	}
	if strings.Contains(logs, "s3cretvalue") {
		t.Errorf("logs hold the run's proxy credential:\n%s", logs)
	}
}

// TestPingAndVersion: the client's handshake endpoints are allowed, with
// and without a version prefix.
func TestPingAndVersion(t *testing.T) {
	tf := sandboxFilter(t)
	for _, head := range []string{
		"GET /_ping HTTP/1.1", "HEAD /_ping HTTP/1.1", "GET /v1.41/_ping HTTP/1.1",
		"GET /version HTTP/1.1", "GET /v1.41/version HTTP/1.1",
	} {
		resp := rawRequest(t, tf.socket, head, nil)
		if resp.status != http.StatusOK || resp.header.Get("Api-Version") == "" {
			t.Errorf("%s: status %d (Api-Version %q), want 200 from the engine", head, resp.status, resp.header.Get("Api-Version"))
		}
	}
	c := newClient(t, "unix://"+tf.socket)
	if _, err := c.Ping(context.Background(), client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		t.Errorf("client ping through the filter: %v", err)
	}
}
