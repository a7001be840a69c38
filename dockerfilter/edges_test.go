package dockerfilter

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/codeforge/codeforge/sandbox/runpolicy"
)

// envWithTimeout is validEnv with CODEFORGE_TIMEOUT set to v.
func envWithTimeout(v string) []string {
	var env []string
	for _, e := range validEnv {
		if !strings.HasPrefix(e, "CODEFORGE_TIMEOUT=") {
			env = append(env, e)
		}
	}
	return append(env, "CODEFORGE_TIMEOUT="+v)
}

// TestRunTimeoutBounds pins both ends of CODEFORGE_TIMEOUT: above 0 and at
// most runpolicy.MaxTimeout (a day), also where the pattern alone would let a
// larger number through (5 digits allow 99999).
func TestRunTimeoutBounds(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"0.001", "1", "5", "86399.999", "86400", "86400.0", "86400.000"} {
		if _, err := runpolicy.ParseEnv(envWithTimeout(v)); err != nil {
			t.Errorf("CODEFORGE_TIMEOUT=%s refused: %v", v, err)
		}
	}
	for _, v := range []string{"0", "0.0", "0.000", "86400.001", "86401", "90000", "99999", "99999.999", "-1", "1e3", "", " 5"} {
		_, err := runpolicy.ParseEnv(envWithTimeout(v))
		if err == nil {
			t.Errorf("CODEFORGE_TIMEOUT=%q accepted", v)
			continue
		}
		if !strings.Contains(err.Error(), "CODEFORGE_TIMEOUT") {
			t.Errorf("CODEFORGE_TIMEOUT=%q: error %q does not name the variable", v, err)
		}
	}
	// The rebuilt environment keeps the value as given, in its fixed place.
	out, d := checkRunEnv(envWithTimeout("86400"))
	if d != nil || !slices.Contains(out, "CODEFORGE_TIMEOUT=86400") || out[1] != "CODEFORGE_TIMEOUT=86400" {
		t.Errorf("rebuilt env = %q (%v)", out, d)
	}
}

// TestRunTimeoutAboveADayRefusedByTheFilter sends a run whose timeout is
// over a day through the real filter: 403, and no exec appears.
func TestRunTimeoutAboveADayRefusedByTheFilter(t *testing.T) {
	tf := sandboxFilter(t)
	real := realClient(t)
	for _, v := range []string{"86401", "99999", "86400.5"} {
		before := execIDs(t, real, shared.sandboxID)
		resp := rawRequest(t, tf.socket, createHead, createBody(t, replaceEnv("CODEFORGE_TIMEOUT", v)))
		assertRefused(t, resp, "timeout "+v)
		if strings.Contains(resp.body, "s3cretvalue") {
			t.Errorf("timeout %s: the refusal echoes the run's proxy credential: %s", v, resp.body)
		}
		if after := execIDs(t, real, shared.sandboxID); !slices.Equal(before, after) {
			t.Errorf("timeout %s: execs on the sandbox changed: %v -> %v", v, before, after)
		}
	}
	// Control: exactly a day is accepted and creates one exec.
	before := execIDs(t, real, shared.sandboxID)
	resp := rawRequest(t, tf.socket, createHead, createBody(t, replaceEnv("CODEFORGE_TIMEOUT", "86400")))
	if resp.status != http.StatusCreated {
		t.Fatalf("timeout of exactly a day: status %d (%s), want 201", resp.status, resp.body)
	}
	if after := execIDs(t, real, shared.sandboxID); len(after) != len(before)+1 {
		t.Errorf("timeout of a day: execs %d -> %d, want one more", len(before), len(after))
	}
}

// TestRefusedWithoutAnEngine: every refusal about the request itself — the
// path, the method, override headers, the exec body and the run's
// environment — is decided before the engine is asked. The filter here
// points at a socket where nothing listens: a request that got as far as
// the engine would fail closed with 503, not be refused with 403. This
// needs no Docker, so it also serves as the fast tier of mutation testing
// (tools/mutation.sh dockerfilter).
func TestRefusedWithoutAnEngine(t *testing.T) {
	t.Parallel()
	dir, err := os.MkdirTemp("", "cf-dfilter-dead-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	tf := startFilter(t, Options{DockerHost: "unix://" + filepath.Join(dir, "nothing.sock"), SandboxContainer: "sandbox"})
	big := strings.Repeat("x", 70<<10)
	unknownExec := strings.Repeat("ab", 32)
	startHead := "POST /v1.41/exec/" + unknownExec + "/start HTTP/1.1\r\nContent-Type: application/json\r\nConnection: Upgrade\r\nUpgrade: tcp"
	cases := []struct {
		name string
		head string
		body []byte
	}{
		{"privileged", createHead, createBody(t, set("Privileged", true))},
		{"tty", createHead, createBody(t, set("Tty", true))},
		{"user root", createHead, createBody(t, set("User", "root"))},
		{"user other", createHead, createBody(t, set("User", "10002:10002"))},
		{"working dir", createHead, createBody(t, set("WorkingDir", "/"))},
		{"detach keys", createHead, createBody(t, set("DetachKeys", "ctrl-p"))},
		{"console size", createHead, createBody(t, set("ConsoleSize", []int{24, 80}))},
		{"attach not bool", createHead, createBody(t, set("AttachStdout", "yes"))},
		{"user not string", createHead, createBody(t, set("User", 0))},
		{"user null", createHead, createBody(t, set("User", nil))},
		{"cmd shell", createHead, createBody(t, set("Cmd", []string{"sh", "-c", "id"}))},
		{"cmd extra arg", createHead, createBody(t, set("Cmd", []string{"codeforge-run", "--idle"}))},
		{"cmd not array", createHead, createBody(t, set("Cmd", "codeforge-run"))},
		{"cmd kill bad id", createHead, createBody(t, func(m map[string]any) { m["Cmd"] = []string{"codeforge-run", "--kill", "../x"}; m["Env"] = nil })},
		{"cmd kill with env", createHead, createBody(t, set("Cmd", []string{"codeforge-run", "--kill", "run1"}))},
		{"cmd check with env", createHead, createBody(t, set("Cmd", []string{"codeforge-run", "--check"}))},
		{"cmd kill short", createHead, createBody(t, func(m map[string]any) { m["Cmd"] = []string{"codeforge-run", "--kill"}; m["Env"] = nil })},
		{"env not strings", createHead, createBody(t, set("Env", []any{"CODEFORGE_RUN_ID=a", 1}))},
		{"env other key", createHead, createBody(t, withEnv(append(slices.Clone(validEnv), "LD_PRELOAD=/tmp/x.so")...))},
		{"env duplicate", createHead, createBody(t, withEnv(append(slices.Clone(validEnv), "CODEFORGE_TIMEOUT=9")...))},
		{"env not key=value", createHead, createBody(t, withEnv(append(slices.Clone(validEnv), "CODEFORGE_READ")...))},
		{"env no run id", createHead, createBody(t, withEnv("CODEFORGE_TIMEOUT=5"))},
		{"env no timeout", createHead, createBody(t, withEnv("CODEFORGE_RUN_ID=abc"))},
		{"env timeout over a day", createHead, createBody(t, replaceEnv("CODEFORGE_TIMEOUT", "86401"))},
		{"env net injection", createHead, createBody(t, replaceEnv("CODEFORGE_ALLOW_NET", "api.test --allow-all"))},
		{"env read traversal", createHead, createBody(t, replaceEnv("CODEFORGE_READ", "/skills/../etc/shadow"))},
		{"env read traversal later", createHead, createBody(t, replaceEnv("CODEFORGE_READ", "/a,/b/..,/c"))},
		{"unknown field", createHead, createBody(t, set("HostConfig", map[string]any{}))},
		{"key in other case", createHead, createBody(t, set("privileged", true))},
		{"duplicate key", createHead, []byte(`{"User":"","User":"root","Cmd":["codeforge-run"],"Env":["CODEFORGE_RUN_ID=a","CODEFORGE_TIMEOUT=1"]}`)},
		{"trailing data", createHead, append(createBody(t, nil), []byte(`{}`)...)},
		{"not an object", createHead, []byte(`["codeforge-run"]`)},
		{"invalid json", createHead, []byte(`{"Cmd":["codeforge-run"]`)},
		{"bad value", createHead, []byte(`{"Cmd":}`)},
		{"oversized body", createHead, createBody(t, replaceEnv("CODEFORGE_READ", "/"+big))},
		{"oversized chunked body", "POST /containers/sandbox/exec HTTP/1.1\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked",
			[]byte(fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(big)+2, `{"`+big))},
		{"content type", "POST /containers/sandbox/exec HTTP/1.1\r\nContent-Type: text/plain", createBody(t, nil)},
		{"no content type", "POST /containers/sandbox/exec HTTP/1.1", createBody(t, nil)},
		{"query", "POST /containers/sandbox/exec?x=1 HTTP/1.1\r\nContent-Type: application/json", createBody(t, nil)},
		{"empty query", "POST /containers/sandbox/exec? HTTP/1.1\r\nContent-Type: application/json", createBody(t, nil)},
		{"method override", createHead + "\r\nX-HTTP-Method-Override: PUT", createBody(t, nil)},
		{"method override 2", createHead + "\r\nX-Method-Override: DELETE", createBody(t, nil)},
		{"method override 3", createHead + "\r\nX-HTTP-Method: DELETE", createBody(t, nil)},
		{"encoded slash", "POST /containers/sandbox%2Fexec HTTP/1.1\r\nContent-Type: application/json", createBody(t, nil)},
		{"dot dot", "POST /v1.41/containers/other/../sandbox/exec HTTP/1.1\r\nContent-Type: application/json", createBody(t, nil)},
		{"dot", "POST /containers/./sandbox/exec HTTP/1.1\r\nContent-Type: application/json", createBody(t, nil)},
		{"double slash", "POST //containers/sandbox/exec HTTP/1.1\r\nContent-Type: application/json", createBody(t, nil)},
		{"trailing slash", "POST /containers/sandbox/exec/ HTTP/1.1\r\nContent-Type: application/json", createBody(t, nil)},
		{"absolute form", "POST http://docker/containers/sandbox/exec HTTP/1.1\r\nContent-Type: application/json", createBody(t, nil)},
		{"bad version", "POST /v2/containers/sandbox/exec HTTP/1.1\r\nContent-Type: application/json", createBody(t, nil)},
		{"two versions", "POST /v1.41/v1.41/containers/sandbox/exec HTTP/1.1\r\nContent-Type: application/json", createBody(t, nil)},
		{"bad container name", "POST /containers/-x/exec HTTP/1.1\r\nContent-Type: application/json", createBody(t, nil)},
		{"exec put", "PUT /containers/sandbox/exec HTTP/1.1\r\nContent-Type: application/json", createBody(t, nil)},
		{"containers create", "POST /v1.41/containers/create HTTP/1.1\r\nContent-Type: application/json", []byte(`{}`)},
		{"ping post", "POST /_ping HTTP/1.1", nil},
		{"ping body", "GET /_ping HTTP/1.1\r\nContent-Type: text/plain", []byte("x")},
		{"version post", "POST /version HTTP/1.1", nil},
		{"version body", "GET /version HTTP/1.1\r\nContent-Type: application/json", []byte("{}")},
		{"root", "GET / HTTP/1.1", nil},
		{"exec start unknown", startHead, []byte(`{"Detach":false,"Tty":false}`)},
		{"exec start not an id", "POST /exec/abc/start HTTP/1.1\r\nContent-Type: application/json\r\nConnection: Upgrade\r\nUpgrade: tcp", []byte(`{}`)},
		{"exec inspect unknown", "GET /exec/" + unknownExec + "/json HTTP/1.1", nil},
		{"exec inspect post", "POST /exec/" + unknownExec + "/json HTTP/1.1", nil},
		{"exec resize", "POST /exec/" + unknownExec + "/resize HTTP/1.1", nil},
	}
	for _, tc := range cases {
		assertRefused(t, rawRequest(t, tf.socket, tc.head, tc.body), tc.name)
	}
	// Each refusal says what was wrong.
	for _, m := range []struct {
		body []byte
		want string
	}{
		{[]byte(`["codeforge-run"]`), "not a JSON object"},
		{[]byte(`"codeforge-run"`), "not a JSON object"},
		{createBody(t, set("Privileged", true)), "Privileged must be false"},
		{createBody(t, set("Cmd", "codeforge-run")), "Cmd must be an array of strings"},
	} {
		if resp := rawRequest(t, tf.socket, createHead, m.body); !strings.Contains(resp.body, m.want) {
			t.Errorf("body %.60s: answer %q, want it to say %q", m.body, strings.TrimSpace(resp.body), m.want)
		}
	}
	// Controls: requests that pass every check reach for the engine and,
	// with none there, fail closed: an exec create cannot find the sandbox
	// (503), anything else cannot reach the engine (502); never 2xx.
	atCap := createBody(t, nil)
	atCap = append(atCap, []byte(strings.Repeat(" ", maxBody-len(atCap)))...)
	for _, c := range []struct {
		name, head string
		body       []byte
		status     int
	}{
		{"valid exec create", createHead, createBody(t, nil), http.StatusServiceUnavailable},
		{"valid exec create of exactly the size cap", createHead, atCap, http.StatusServiceUnavailable},
		{"valid kill", createHead, createBody(t, func(m map[string]any) { m["Cmd"] = []string{"codeforge-run", "--kill", "run1"}; m["Env"] = nil }), http.StatusServiceUnavailable},
		{"valid check", createHead, createBody(t, func(m map[string]any) { m["Cmd"] = []string{"codeforge-run", "--check"}; m["Env"] = nil }), http.StatusServiceUnavailable},
		{"valid kill without an Env key", createHead, createBody(t, func(m map[string]any) { m["Cmd"] = []string{"codeforge-run", "--kill", "run1"}; delete(m, "Env") }), http.StatusServiceUnavailable},
		{"timeout of exactly a day", createHead, createBody(t, replaceEnv("CODEFORGE_TIMEOUT", "86400")), http.StatusServiceUnavailable},
		{"ping", "GET /_ping HTTP/1.1", nil, http.StatusBadGateway},
		{"versioned ping", "HEAD /v1.41/_ping HTTP/1.1", nil, http.StatusBadGateway},
		{"version", "GET /v1.41/version HTTP/1.1", nil, http.StatusBadGateway},
	} {
		resp := rawRequest(t, tf.socket, c.head, c.body)
		if resp.status != c.status {
			t.Errorf("control %s: status %d (%s), want %d from the missing engine", c.name, resp.status, strings.TrimSpace(resp.body), c.status)
		}
	}
}
