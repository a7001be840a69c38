package dockerfilter

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/moby/moby/client"
)

const createHead = "POST /v1.41/containers/sandbox/exec HTTP/1.1\r\nContent-Type: application/json"

// createBody is a valid exec create body as the moby client sends it,
// changed by mod.
func createBody(t *testing.T, mod func(m map[string]any)) []byte {
	t.Helper()
	m := map[string]any{
		"User": "", "Privileged": false, "Tty": false,
		"AttachStdin": true, "AttachStderr": true, "AttachStdout": true,
		"DetachKeys": "", "Env": validEnv, "WorkingDir": "", "Cmd": []string{"codeforge-run"},
	}
	if mod != nil {
		mod(m)
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func withEnv(env ...string) func(map[string]any) {
	return func(m map[string]any) { m["Env"] = env }
}

func replaceEnv(key, value string) func(map[string]any) {
	return func(m map[string]any) {
		var env []string
		for _, e := range validEnv {
			if !strings.HasPrefix(e, key+"=") {
				env = append(env, e)
			}
		}
		m["Env"] = append(env, key+"="+value)
	}
}

func set(key string, value any) func(map[string]any) {
	return func(m map[string]any) { m[key] = value }
}

// assertRefused checks a 403 with a Docker-style message.
func assertRefused(t *testing.T, resp rawResponse, what string) {
	t.Helper()
	if resp.status != http.StatusForbidden {
		t.Errorf("%s: status %d (%s), want 403", what, resp.status, strings.TrimSpace(resp.body))
		return
	}
	var msg struct{ Message string }
	if err := json.Unmarshal([]byte(resp.body), &msg); err != nil || !strings.HasPrefix(msg.Message, "dockerfilter: ") {
		t.Errorf("%s: body %q, want {\"message\": \"dockerfilter: …\"}", what, resp.body)
	}
}

// TestRefused sends every kind of request the filter must refuse, byte for
// byte, and checks each gets 403 and that no exec (or container) appears
// on the sandbox or on any other container.
func TestRefused(t *testing.T) {
	tf := sandboxFilter(t)
	real := realClient(t)
	big := strings.Repeat("x", 70<<10)
	cases := []struct {
		name string
		head string
		body []byte
	}{
		// The exec body.
		{"privileged", createHead, createBody(t, set("Privileged", true))},
		{"user root", createHead, createBody(t, set("User", "root"))},
		{"user 0", createHead, createBody(t, set("User", "0:0"))},
		{"user other", createHead, createBody(t, set("User", "10002:10002"))},
		{"tty", createHead, createBody(t, set("Tty", true))},
		{"working dir", createHead, createBody(t, set("WorkingDir", "/"))},
		{"detach keys", createHead, createBody(t, set("DetachKeys", "ctrl-p"))},
		{"console size", createHead, createBody(t, set("ConsoleSize", []int{24, 80}))},
		{"cmd shell", createHead, createBody(t, set("Cmd", []string{"sh", "-c", "id"}))},
		{"cmd absolute wrapper", createHead, createBody(t, set("Cmd", []string{DefaultWrapper}))},
		{"cmd extra arg", createHead, createBody(t, set("Cmd", []string{"codeforge-run", "--idle"}))},
		{"cmd kill traversal", createHead, createBody(t, func(m map[string]any) {
			m["Cmd"] = []string{"codeforge-run", "--kill", "../x"}
			m["Env"] = nil
		})},
		{"cmd collect traversal", createHead, createBody(t, func(m map[string]any) {
			m["Cmd"] = []string{"codeforge-run", "--collect", "../x"}
			m["Env"] = nil
		})},
		{"cmd collect with env", createHead, createBody(t, set("Cmd", []string{"codeforge-run", "--collect", "0123456789abcdef"}))},
		{"cmd collect extra arg", createHead, createBody(t, func(m map[string]any) {
			m["Cmd"] = []string{"codeforge-run", "--collect", "0123456789abcdef", "/etc"}
			m["Env"] = nil
		})},
		{"env keep out other value", createHead, createBody(t, withEnv(append(slices.Clone(validEnv), "CODEFORGE_KEEP_OUT=/etc")...))},
		{"cmd check with env", createHead, createBody(t, set("Cmd", []string{"codeforge-run", "--check"}))},
		{"cmd probe with env", createHead, createBody(t, set("Cmd", []string{"codeforge-run", "--check", "192.0.2.1:3128"}))},
		{"cmd probe host name", createHead, createBody(t, func(m map[string]any) {
			m["Cmd"] = []string{"codeforge-run", "--check", "proxy:3128"}
			m["Env"] = nil
		})},
		{"cmd probe flag", createHead, createBody(t, func(m map[string]any) {
			m["Cmd"] = []string{"codeforge-run", "--check", "--kill"}
			m["Env"] = nil
		})},
		{"cmd probe no port", createHead, createBody(t, func(m map[string]any) {
			m["Cmd"] = []string{"codeforge-run", "--check", "192.0.2.1"}
			m["Env"] = nil
		})},
		{"cmd probe octet out of range", createHead, createBody(t, func(m map[string]any) {
			m["Cmd"] = []string{"codeforge-run", "--check", "192.0.2.256:3128"}
			m["Env"] = nil
		})},
		{"cmd probe two args", createHead, createBody(t, func(m map[string]any) {
			m["Cmd"] = []string{"codeforge-run", "--check", "192.0.2.1:3128", "x"}
			m["Env"] = nil
		})},
		{"cmd missing", createHead, createBody(t, set("Cmd", nil))},
		{"cmd not strings", createHead, createBody(t, set("Cmd", []any{"codeforge-run", 1}))},
		{"env other key", createHead, createBody(t, withEnv(append(slices.Clone(validEnv), "LD_PRELOAD=/tmp/x.so")...))},
		{"env lowercase proxy", createHead, createBody(t, withEnv(append(slices.Clone(validEnv), "https_proxy=http://proxy:3128")...))},
		{"env duplicate key", createHead, createBody(t, withEnv(append(slices.Clone(validEnv), "CODEFORGE_TIMEOUT=9")...))},
		{"env not key=value", createHead, createBody(t, withEnv(append(slices.Clone(validEnv), "CODEFORGE_READ")...))},
		{"env no run id", createHead, createBody(t, withEnv("CODEFORGE_TIMEOUT=5"))},
		{"env run id traversal", createHead, createBody(t, replaceEnv("CODEFORGE_RUN_ID", "../../etc"))},
		{"env timeout zero", createHead, createBody(t, replaceEnv("CODEFORGE_TIMEOUT", "0"))},
		{"env timeout flag", createHead, createBody(t, replaceEnv("CODEFORGE_TIMEOUT", "5 --foreground"))},
		{"env net flag injection", createHead, createBody(t, replaceEnv("CODEFORGE_ALLOW_NET", "api.test --allow-all"))},
		{"env net empty item", createHead, createBody(t, replaceEnv("CODEFORGE_ALLOW_NET", "api.test,,x.test"))},
		{"env read traversal", createHead, createBody(t, replaceEnv("CODEFORGE_READ", "/skills/../etc/shadow"))},
		{"env read relative", createHead, createBody(t, replaceEnv("CODEFORGE_READ", "etc/passwd"))},
		{"env memory", createHead, createBody(t, replaceEnv("CODEFORGE_MEMORY_MB", "0"))},
		{"env proxy newline", createHead, createBody(t, replaceEnv("HTTPS_PROXY", "http://proxy:3128\nX=1"))},
		{"env proxy scheme", createHead, createBody(t, replaceEnv("HTTP_PROXY", "socks5://proxy:1080"))},
		// Strict decoding.
		{"unknown field", createHead, createBody(t, set("HostConfig", map[string]any{"Privileged": true}))},
		{"key in other case", createHead, createBody(t, set("privileged", true))},
		{"duplicate key", createHead, []byte(`{"User":"","User":"root","Cmd":["codeforge-run"],"Env":["CODEFORGE_RUN_ID=a","CODEFORGE_TIMEOUT=1"]}`)},
		{"bool as string", createHead, createBody(t, set("Privileged", "false"))},
		{"bool null", createHead, createBody(t, set("AttachStdin", nil))},
		{"trailing data", createHead, append(createBody(t, nil), []byte(`{"Privileged":true}`)...)},
		{"not an object", createHead, []byte(`["codeforge-run"]`)},
		{"invalid json", createHead, []byte(`{"Cmd":["codeforge-run"]`)},
		{"oversized body", createHead, createBody(t, replaceEnv("CODEFORGE_READ", "/"+big))},
		{"oversized chunked body", "POST /containers/sandbox/exec HTTP/1.1\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked",
			[]byte(fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(big)+2, `{"`+big))},
		{"content type", "POST /containers/sandbox/exec HTTP/1.1\r\nContent-Type: text/plain", createBody(t, nil)},
		{"query string", "POST /containers/sandbox/exec?privileged=1 HTTP/1.1\r\nContent-Type: application/json", createBody(t, nil)},
		{"method override", createHead + "\r\nX-HTTP-Method-Override: PUT", createBody(t, nil)},
		{"method override 2", createHead + "\r\nX-Method-Override: DELETE", createBody(t, nil)},
		// Other containers and other endpoints.
		{"other container by name", "POST /containers/" + shared.other + "/exec HTTP/1.1\r\nContent-Type: application/json", createBody(t, nil)},
		{"other container by id", "POST /v1.41/containers/" + shared.otherID + "/exec HTTP/1.1\r\nContent-Type: application/json", createBody(t, nil)},
		{"container id prefix", "POST /containers/" + shared.sandboxID[:12] + "/exec HTTP/1.1\r\nContent-Type: application/json", createBody(t, nil)},
		{"containers create", "POST /v1.41/containers/create HTTP/1.1\r\nContent-Type: application/json", []byte(`{"Image":"` + shared.image + `","HostConfig":{"Privileged":true}}`)},
		{"archive get", "GET /containers/sandbox/archive?path=/etc HTTP/1.1", nil},
		{"archive get plain", "GET /v1.41/containers/sandbox/archive HTTP/1.1", nil},
		{"archive put", "PUT /containers/sandbox/archive HTTP/1.1\r\nContent-Type: application/x-tar", []byte("x")},
		{"images list", "GET /images/json HTTP/1.1", nil},
		{"images create", "POST /v1.41/images/create HTTP/1.1", nil},
		{"containers list", "GET /containers/json HTTP/1.1", nil},
		{"container inspect", "GET /containers/sandbox/json HTTP/1.1", nil},
		{"container kill", "POST /containers/sandbox/kill HTTP/1.1", nil},
		{"exec put", "PUT /containers/sandbox/exec HTTP/1.1\r\nContent-Type: application/json", createBody(t, nil)},
		{"ping post", "POST /_ping HTTP/1.1", nil},
		{"version body", "GET /version HTTP/1.1\r\nContent-Type: application/json", []byte("{}")},
		{"root", "GET / HTTP/1.1", nil},
		{"swarm", "GET /swarm HTTP/1.1", nil},
		// Paths that only reach exec after normalisation.
		{"encoded slash", "POST /containers/sandbox%2Fexec HTTP/1.1\r\nContent-Type: application/json", createBody(t, nil)},
		{"encoded slash lower", "POST /containers%2fsandbox/exec HTTP/1.1\r\nContent-Type: application/json", createBody(t, nil)},
		{"encoded dots", "POST /v1.41/containers/x/%2e%2e/sandbox/exec HTTP/1.1\r\nContent-Type: application/json", createBody(t, nil)},
		{"encoded letter", "POST /v1.41/containers/%73andbox/exec HTTP/1.1\r\nContent-Type: application/json", createBody(t, nil)},
		{"encoded percent", "POST /containers/sandbox%25/exec HTTP/1.1\r\nContent-Type: application/json", createBody(t, nil)},
		{"dot dot", "POST /v1.41/containers/other/../sandbox/exec HTTP/1.1\r\nContent-Type: application/json", createBody(t, nil)},
		{"dot dot version", "POST /v1.41/../containers/sandbox/exec HTTP/1.1\r\nContent-Type: application/json", createBody(t, nil)},
		{"dot", "POST /containers/./sandbox/exec HTTP/1.1\r\nContent-Type: application/json", createBody(t, nil)},
		{"double slash", "POST //containers/sandbox/exec HTTP/1.1\r\nContent-Type: application/json", createBody(t, nil)},
		{"double slash inside", "POST /containers//sandbox/exec HTTP/1.1\r\nContent-Type: application/json", createBody(t, nil)},
		{"trailing slash", "POST /containers/sandbox/exec/ HTTP/1.1\r\nContent-Type: application/json", createBody(t, nil)},
		{"trailing junk", "POST /containers/sandbox/exec;x HTTP/1.1\r\nContent-Type: application/json", createBody(t, nil)},
		{"fragment", "POST /containers/sandbox/exec#x HTTP/1.1\r\nContent-Type: application/json", createBody(t, nil)},
		{"backslash", "POST /containers\\sandbox/exec HTTP/1.1\r\nContent-Type: application/json", createBody(t, nil)},
		{"absolute form", "POST http://docker/containers/sandbox/exec HTTP/1.1\r\nContent-Type: application/json", createBody(t, nil)},
		{"bad version", "POST /v2/containers/sandbox/exec HTTP/1.1\r\nContent-Type: application/json", createBody(t, nil)},
		{"two versions", "POST /v1.41/v1.41/containers/sandbox/exec HTTP/1.1\r\nContent-Type: application/json", createBody(t, nil)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			beforeSandbox := execIDs(t, real, shared.sandboxID)
			beforeOther := execIDs(t, real, shared.otherID)
			assertRefused(t, rawRequest(t, tf.socket, tc.head, tc.body), tc.name)
			if after := execIDs(t, real, shared.sandboxID); !slices.Equal(beforeSandbox, after) {
				t.Errorf("execs on the sandbox changed: %v -> %v", beforeSandbox, after)
			}
			if after := execIDs(t, real, shared.otherID); !slices.Equal(beforeOther, after) {
				t.Errorf("execs on the other container changed: %v -> %v", beforeOther, after)
			}
		})
	}
	// The same raw request with a valid body is accepted: the refusals
	// above are about what each case changed, not about the raw client.
	t.Run("control", func(t *testing.T) {
		before := execIDs(t, real, shared.sandboxID)
		resp := rawRequest(t, tf.socket, createHead, createBody(t, nil))
		if resp.status != http.StatusCreated {
			t.Fatalf("valid raw exec create: status %d (%s), want 201", resp.status, resp.body)
		}
		if after := execIDs(t, real, shared.sandboxID); len(after) != len(before)+1 {
			t.Errorf("valid create: execs %d -> %d, want one more", len(before), len(after))
		}
	})
	list, err := real.ContainerList(context.Background(), client.ContainerListOptions{All: true, Filters: make(client.Filters).Add("ancestor", shared.image)})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range list.Items {
		if n := strings.TrimPrefix(c.Names[0], "/"); n != shared.sandbox && n != shared.other && !strings.HasPrefix(n, "cf-dfilter-") {
			t.Errorf("container %s from the test image appeared", n)
		}
	}
}

// TestStartAndInspectOnlyOwnExecs: an exec created on the engine by
// anyone else cannot be started or inspected through the filter; an exec
// the filter created starts only attached, without TTY, and only once.
func TestStartAndInspectOnlyOwnExecs(t *testing.T) {
	tf := sandboxFilter(t)
	real := realClient(t)
	ctx := context.Background()
	startHead := func(id string) string {
		return "POST /v1.41/exec/" + id + "/start HTTP/1.1\r\nContent-Type: application/json\r\nConnection: Upgrade\r\nUpgrade: tcp"
	}
	startBody := []byte(`{"Detach":false,"Tty":false}`)

	foreign, err := real.ExecCreate(ctx, shared.sandboxID, client.ExecCreateOptions{Cmd: []string{DefaultWrapper}, AttachStdout: true})
	if err != nil {
		t.Fatal(err)
	}
	assertRefused(t, rawRequest(t, tf.socket, startHead(foreign.ID), startBody), "start of a foreign exec")
	assertRefused(t, rawRequest(t, tf.socket, "GET /exec/"+foreign.ID+"/json HTTP/1.1", nil), "inspect of a foreign exec")
	if pc := realExecInspect(t, foreign.ID); pc.Running || pc.Pid != 0 || pc.ExitCode != nil {
		t.Errorf("foreign exec ran: %+v", pc)
	}

	c := newClient(t, "unix://"+tf.socket)
	own, err := c.ExecCreate(ctx, "sandbox", runOpts(validEnv))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, head string
		body       []byte
	}{
		{"detach", startHead(own.ID), []byte(`{"Detach":true,"Tty":false}`)},
		{"tty", startHead(own.ID), []byte(`{"Detach":false,"Tty":true}`)},
		{"console size", startHead(own.ID), []byte(`{"Detach":false,"Tty":false,"ConsoleSize":[1,1]}`)},
		{"unknown field", startHead(own.ID), []byte(`{"Detach":false,"Tty":false,"Privileged":true}`)},
		{"no upgrade", "POST /exec/" + own.ID + "/start HTTP/1.1\r\nContent-Type: application/json", startBody},
		{"method override", startHead(own.ID) + "\r\nX-HTTP-Method-Override: DELETE", startBody},
		{"resize", "POST /exec/" + own.ID + "/resize HTTP/1.1", nil},
		{"short id", startHead(own.ID[:12]), startBody},
		{"inspect with query", "GET /exec/" + own.ID + "/json?x=1 HTTP/1.1", nil},
	} {
		assertRefused(t, rawRequest(t, tf.socket, tc.head, tc.body), tc.name)
	}
	if pc := realExecInspect(t, own.ID); pc.Running || pc.Pid != 0 || pc.ExitCode != nil {
		t.Fatalf("own exec started by a refused request: %+v", pc)
	}
	// Now the real start, through the client, works once.
	att, err := c.ExecAttach(ctx, own.ID, client.ExecAttachOptions{})
	if err != nil {
		t.Fatalf("attach own exec: %v", err)
	}
	_ = att.CloseWrite()
	buf := make([]byte, 1<<16)
	for {
		if _, err := att.Reader.Read(buf); err != nil {
			break
		}
	}
	att.Close()
	if _, err := c.ExecAttach(ctx, own.ID, client.ExecAttachOptions{}); err == nil {
		t.Errorf("second start of the same exec was allowed")
	}
	insp, err := c.ExecInspect(ctx, own.ID, client.ExecInspectOptions{})
	if err != nil || insp.ExitCode != 7 {
		t.Errorf("inspect own exec: %+v, %v; want exit code 7", insp, err)
	}
}
