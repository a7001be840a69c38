package app

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/codeforge/codeforge/internal/testenv"
	"github.com/codeforge/codeforge/settings"
)

// syncBuffer is a log sink safe for concurrent writes.
type syncBuffer = testenv.LogBuffer

func envMap(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

// TestCommandServes runs `codeforge serve` as the binary would: local
// backend with the in-process proxy, real Deno, on a free port; a client
// connects and runs code; cancelling the context shuts it down.
func TestCommandServes(t *testing.T) {
	t.Parallel()
	deno := testenv.Deno(t)
	dir := t.TempDir()
	apisDir := writeAPIs(t, map[string]string{"demo": `{"description": "Demo", "domains": ["demo.test"], "credentials": {"DEMO_TOKEN": "${DEMO_KEY}"}}`})
	env := map[string]string{
		"DENO_BIN":   deno,
		"DEMO_KEY":   "demo-secret-value",
		"DEBUG_MODE": "true",
		"SKILLS_DIR": filepath.Join(dir, "skills"),
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- Serve(ctx, []string{"--addr", "127.0.0.1:0", "--apis-dir", apisDir, "--data-dir", filepath.Join(dir, "data"),
			"--max-concurrent", "3", "--memory-mb", "256"}, envMap(env), &stderr)
	}()
	urlRE := regexp.MustCompile(`url=(http://127\.0\.0\.1:\d+/mcp)`)
	var url string
	waitFor(t, "the startup line", func() bool {
		select {
		case err := <-done:
			t.Fatalf("serve exited early: %v\n%s", err, stderr.String())
		default:
		}
		if m := urlRE.FindStringSubmatch(stderr.String()); m != nil {
			url = m[1]
			return true
		}
		return false
	})
	startup := stderr.String()
	for _, w := range []string{"backend=local", "apis=1", `network="API domains only"`, "max_concurrent=3"} {
		if !strings.Contains(startup, w) {
			t.Errorf("startup line lacks %s:\n%s", w, startup)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "skills")); err != nil {
		t.Errorf("skills dir not created: %v", err)
	}

	client := mcp.NewClient(&mcp.Implementation{Name: "codeforge-test", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url}, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "execute_code", Arguments: map[string]any{"code": `console.log("served " + (6 * 7))`}})
	if err != nil || res.IsError || allText(res) != "served 42\n" {
		t.Fatalf("execute_code: %v %v", err, res)
	}
	if !strings.Contains(cs.InitializeResult().Instructions, "Memory: 256 MB per run") {
		t.Errorf("instructions do not carry the memory limit:\n%s", cs.InitializeResult().Instructions)
	}
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "list_apis", Arguments: map[string]any{}})
	if err != nil || !strings.Contains(allText(res), "DEMO_TOKEN") || strings.Contains(allText(res), "demo-secret-value") {
		t.Fatalf("list_apis: %v %v", err, res)
	}
	cs.Close()
	logs := stderr.String()
	if !strings.Contains(logs, `code="console.log(\"served \" + (6 * 7))"`) {
		t.Errorf("DEBUG_MODE did not log the submitted code:\n%s", logs)
	}
	if strings.Contains(logs, "demo-secret-value") {
		t.Errorf("a credential value reached the log:\n%s", logs)
	}
	for _, w := range []string{"component=sandbox", "msg=start", "msg=done"} {
		if !strings.Contains(logs, w) {
			t.Errorf("no run lifecycle line with %s:\n%s", w, logs)
		}
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve returned %v after cancel", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not shut down after cancel")
	}
	if !strings.Contains(stderr.String(), "msg=stopped") {
		t.Errorf("no shutdown line:\n%s", stderr.String())
	}
}

// TestCommandRefusesBadConfig: every bad setting stops serve at start
// with a message naming the flag or variable to fix.
func TestCommandRefusesBadConfig(t *testing.T) {
	t.Parallel()
	deno := testenv.Deno(t)
	badAPIs := writeAPIs(t, map[string]string{"bad": `{"domains": ["https://bad.test/"]}`})
	// A config whose secret is not in the server's environment: the docker
	// backend's server reads token names only, so it must get past loading
	// (and fail later, on the missing proxy control URL).
	secretAPIs := writeAPIs(t, map[string]string{"pay": `{"domains": ["pay.test"], "credentials": {"PAY_TOKEN": "${PAY_SECRET}"}}`})
	emptyToken := filepath.Join(t.TempDir(), "token")
	writeFile(t, emptyToken, "\n")
	cases := []struct {
		name string
		args []string
		env  map[string]string
		want []string
	}{
		{"unknown backend", []string{"--sandbox", "vm"}, nil, []string{"--sandbox (SANDBOX_BACKEND)", `"vm"`}},
		{"backend from env", nil, map[string]string{"SANDBOX_BACKEND": "podman"}, []string{"SANDBOX_BACKEND", "podman"}},
		{"docker without the proxy control API", []string{"--sandbox", "docker"}, nil, []string{"PROXY_CONTROL_URL is not set"}},
		{"local backend needs the secret", []string{"--apis-dir", secretAPIs}, nil, []string{"PAY_SECRET is not set"}},
		{"docker backend reads no secret", []string{"--sandbox", "docker", "--apis-dir", secretAPIs}, nil, []string{"PROXY_CONTROL_URL is not set"}},
		{"bad concurrency", nil, map[string]string{"MAX_CONCURRENT_RUNS": "many"}, []string{"MAX_CONCURRENT_RUNS", `"many"`}},
		{"zero concurrency", []string{"--max-concurrent", "0"}, nil, []string{"--max-concurrent", "at least 1"}},
		{"bad output cap", []string{"--max-output", "-1"}, nil, []string{"MAX_OUTPUT_BYTES"}},
		{"bad memory", nil, map[string]string{"SANDBOX_MEMORY_MB": "1GB"}, []string{"SANDBOX_MEMORY_MB"}},
		{"bad pool size", nil, map[string]string{"SANDBOX_POOL_SIZE": "-1"}, []string{"SANDBOX_POOL_SIZE"}},
		{"bad timeout", []string{"--max-timeout", "soon"}, nil, []string{"--max-timeout (MAX_TIMEOUT)", "soon"}},
		{"default over max", []string{"--default-timeout", "600", "--max-timeout", "60"}, nil, []string{"DEFAULT_TIMEOUT", "over"}},
		{"bad addr", []string{"--addr", "8080"}, nil, []string{"--addr (CODEFORGE_ADDR)", "host:port"}},
		{"bad bool", nil, map[string]string{"ALLOW_PRIVATE_UPSTREAMS": "maybe"}, []string{"ALLOW_PRIVATE_UPSTREAMS"}},
		{"bad YOLO", nil, map[string]string{"YOLO_MODE": "sure"}, []string{"YOLO_MODE"}},
		{"YOLO on the local backend", nil, map[string]string{"YOLO_MODE": "true"}, []string{"--sandbox local", "YOLO_MODE", "Deno.connect", "169.254.169.254", "Docker"}},
		{"bad API config", []string{"--apis-dir", badAPIs}, nil, []string{"config.json", "APIS_DIR"}},
		{"two tokens", []string{"--token-file", emptyToken}, map[string]string{"CODEFORGE_TOKEN": "x"}, []string{"both CODEFORGE_TOKEN and --token-file"}},
		{"empty token file", []string{"--token-file", emptyToken}, nil, []string{"is empty"}},
		{"missing upstream CA", []string{"--upstream-ca", "/nonexistent/ca.pem"}, nil, []string{"--upstream-ca (UPSTREAM_CA)"}},
		{"stray argument", []string{"extra"}, nil, []string{`unexpected argument "extra"`}},
		{"no deno", nil, map[string]string{"DENO_BIN": "", "PATH": ""}, []string{"deno not found", "npm install"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			env := map[string]string{"DENO_BIN": deno}
			for k, v := range tc.env {
				env[k] = v
			}
			if v, ok := env["DENO_BIN"]; ok && v == "" {
				delete(env, "DENO_BIN")
			}
			args := append([]string{"--addr", "127.0.0.1:0", "--apis-dir", filepath.Join(dir, "apis"),
				"--skills-dir", filepath.Join(dir, "skills"), "--data-dir", filepath.Join(dir, "data")}, tc.args...)
			var stderr syncBuffer
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			err := Serve(ctx, args, envMap(env), &stderr)
			if err == nil {
				t.Fatalf("serve started with a bad setting; log:\n%s", stderr.String())
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			if strings.Contains(stderr.String(), "codeforge serving") {
				t.Errorf("serve logged that it was serving")
			}
		})
	}
}

// TestCommandReloadsAPIsOnSIGHUP: SIGHUP re-reads the API configs for the
// server and its in-process proxy, with the .env file as it is now (a new
// API whose secret was just added to .env loads without a restart; it
// failed with "SECOND_KEY is not set" while .env was read only at start);
// an invalid new set is logged and the old one kept.
func TestCommandReloadsAPIsOnSIGHUP(t *testing.T) {
	deno := testenv.Deno(t)
	dir := t.TempDir()
	// "first" is a real TLS API on loopback (named localhost, trusted
	// through --upstream-ca), so credentialed requests put injection and
	// payload lines in the log before and after the reload.
	api := newEchoAPI(t, "localhost")
	apisDir := writeAPIs(t, map[string]string{"first": `{"domains": ["localhost"], "ports": [` + api.port + `], "credentials": {"FIRST_TOKEN": "${FIRST_KEY}"}}`})
	// As the README's "Adding an API" says: the new API's secret goes in
	// .env, then SIGHUP; no restart. main hands serve a Dotenv over the
	// process environment; here the "process environment" is a map.
	env := map[string]string{"DENO_BIN": deno, "FIRST_KEY": "first-secret", "FIRST_KEY_ROTATED": "first-rotated-secret", "DEBUG_MODE": "true"}
	dotenvPath := filepath.Join(dir, ".env")
	writeFile(t, dotenvPath, "# secrets\n")
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(dotenvPath, old, old); err != nil {
		t.Fatal(err)
	}
	dotenv, err := settings.NewDotenv(envMap(env), dotenvPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- Serve(ctx, []string{"--addr", "127.0.0.1:0", "--apis-dir", apisDir, "--data-dir", filepath.Join(dir, "data"),
			"--skills-dir", filepath.Join(dir, "skills"), "--allow-private-upstreams", "--upstream-ca", api.caFile}, dotenv.Lookup, &stderr)
	}()
	urlRE := regexp.MustCompile(`url=(http://127\.0\.0\.1:\d+/mcp)`)
	var url string
	waitFor(t, "the startup line", func() bool {
		select {
		case err := <-done:
			t.Fatalf("serve exited early: %v\n%s", err, stderr.String())
		default:
		}
		m := urlRE.FindStringSubmatch(stderr.String())
		if m != nil {
			url = m[1]
		}
		return m != nil
	})
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "reload-test", Version: "1"}, nil).
		Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	listAPIs := func() string {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "list_apis", Arguments: map[string]any{}})
		if err != nil {
			t.Fatal(err)
		}
		return allText(res)
	}
	// With the proxy's set reloaded too, a run may name the new API.
	runWith := func(api string) *mcp.CallToolResult {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "execute_code", Arguments: map[string]any{"code": `console.log("ok")`, "apis": []string{api}}})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	hupAndWait := func(line string, count int) {
		t.Helper()
		if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		waitFor(t, line, func() bool { return strings.Count(stderr.String(), line) >= count })
	}

	// callFirst sends FIRST_TOKEN to the first API from a run and checks
	// the API got want while the run saw only the name.
	callFirst := func(want string) {
		t.Helper()
		code := `const r = await fetch("https://localhost:` + api.port + `/v1", {method: "POST", headers: {Authorization: "Bearer FIRST_TOKEN"}, body: "hello"});
console.log(r.status, await r.text());`
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "execute_code", Arguments: map[string]any{"code": code, "apis": []string{"first"}}})
		if err != nil {
			t.Fatal(err)
		}
		text := allText(res)
		if res.IsError || !strings.Contains(text, "200 you sent Bearer FIRST_TOKEN") || strings.Contains(text, want) {
			t.Fatalf("credentialed run: %s", text)
		}
		if got := api.last(); got != "Bearer "+want {
			t.Fatalf("the API received %q, want %q", got, "Bearer "+want)
		}
	}

	if text := listAPIs(); !strings.Contains(text, "first") || strings.Contains(text, "SECOND_TOKEN") {
		t.Fatalf("list_apis before reload: %s", text)
	}
	callFirst("first-secret")
	writeFile(t, filepath.Join(apisDir, "second", "config.json"), `{"domains": ["second.test"], "credentials": {"SECOND_TOKEN": "${SECOND_KEY}"}}`)
	writeFile(t, dotenvPath, "# secrets\nSECOND_KEY=second-secret\n")
	writeFile(t, filepath.Join(apisDir, "first", "config.json"), `{"domains": ["localhost"], "ports": [`+api.port+`], "credentials": {"FIRST_TOKEN": "${FIRST_KEY_ROTATED}"}}`)
	hupAndWait("API configs reloaded", 1)
	callFirst("first-rotated-secret")
	if text := listAPIs(); !strings.Contains(text, "SECOND_TOKEN") {
		t.Errorf("list_apis after reload lacks the new API: %s", text)
	}
	if res := runWith("second"); res.IsError {
		t.Errorf("run with the reloaded API: %s", allText(res))
	}

	writeFile(t, filepath.Join(apisDir, "broken", "config.json"), `{"domains": ["https://broken.test/"]}`)
	hupAndWait("API configs not reloaded", 1)
	if text := listAPIs(); !strings.Contains(text, "SECOND_TOKEN") || strings.Contains(text, "broken") {
		t.Errorf("list_apis after a bad reload: %s; want the previous set", text)
	}
	if res := runWith("second"); res.IsError {
		t.Errorf("run after a bad reload: %s", allText(res))
	}
	callFirst("first-rotated-secret")
	logs := stderr.String()
	for _, secret := range []string{"first-secret", "first-rotated-secret", "second-secret"} {
		if strings.Contains(logs, secret) {
			t.Errorf("%s reached the log:\n%s", secret, logs)
		}
	}
	// The log must hold the lines about the credentialed requests, or the
	// check above proves nothing.
	if n := strings.Count(logs, "msg=inject"); n < 3 {
		t.Errorf("the log has %d injection lines, want one per credentialed request (3):\n%s", n, logs)
	}
	mustHave := []string{"msg=payload", "Bearer FIRST_TOKEN"}
	for _, want := range mustHave {
		if !strings.Contains(logs, want) {
			t.Errorf("the log lacks %q:\n%s", want, logs)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("serve: %v", err)
	}
}

// waitFor polls cond until it holds, failing after a generous bound.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// allText joins a tool result's text blocks.
func allText(res *mcp.CallToolResult) string {
	var out []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			out = append(out, tc.Text)
		}
	}
	return strings.Join(out, "\n")
}

// writeAPIs writes apis/<name>/config.json files into a new directory.
func writeAPIs(t testing.TB, configs map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, cfg := range configs {
		writeFile(t, filepath.Join(dir, name, "config.json"), cfg)
	}
	return dir
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestServeOnOffFlagsAreBooleans: --allow-private-upstreams is a boolean
// flag, as on `codeforge proxy`: given alone it means true and does not
// swallow the next flag (it was a string flag, so `--allow-private-upstreams
// --upstream-ca ca.pem` failed with unexpected argument "ca.pem").
func TestServeOnOffFlagsAreBooleans(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	caFile := testenv.NewCA(t).WritePEM(t, dir)
	base := []string{"--apis-dir", filepath.Join(dir, "apis"), "--skills-dir", filepath.Join(dir, "skills"), "--data-dir", filepath.Join(dir, "data")}
	cfg, err := parseConfig(append(base, "--allow-private-upstreams", "--upstream-ca", caFile), envMap(nil), io.Discard)
	if err != nil {
		t.Fatalf("--allow-private-upstreams --upstream-ca FILE: %v", err)
	}
	if !cfg.AllowPrivateUpstreams || cfg.UpstreamRoots == nil {
		t.Errorf("AllowPrivateUpstreams %v, UpstreamRoots %v; want both set", cfg.AllowPrivateUpstreams, cfg.UpstreamRoots)
	}
	cfg, err = parseConfig(append(base, "--allow-private-upstreams=false"), envMap(map[string]string{"ALLOW_PRIVATE_UPSTREAMS": "true"}), io.Discard)
	if err != nil || cfg.AllowPrivateUpstreams {
		t.Errorf("the flag must win over the variable: %v, %+v", err, cfg)
	}
}

// TestUpstreamCAIsLoadedStrictly: serve's in-process proxy loads
// --upstream-ca as `codeforge proxy` does: a certificate block that does
// not parse is an error naming it (serve used to skip it silently).
func TestUpstreamCAIsLoadedStrictly(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good, err := os.ReadFile(testenv.NewCA(t).WritePEM(t, dir))
	if err != nil {
		t.Fatal(err)
	}
	mixed := filepath.Join(dir, "mixed.pem")
	writeFile(t, mixed, string(good)+"-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n")
	_, err = parseConfig([]string{"--apis-dir", filepath.Join(dir, "apis"), "--skills-dir", filepath.Join(dir, "skills"),
		"--data-dir", filepath.Join(dir, "data"), "--upstream-ca", mixed}, envMap(nil), io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--upstream-ca (UPSTREAM_CA)") || !strings.Contains(err.Error(), "certificate 2") {
		t.Errorf("serve with a broken second certificate: %v; want an error naming the flag and the block", err)
	}
}

// echoAPI is a TLS API on loopback whose certificate comes from a test CA
// (written to caFile); it answers "you sent <Authorization>" with the
// Authorization, query and body it got echoed back, real values included.
type echoAPI struct {
	port   string
	caFile string
	mu     sync.Mutex
	auths  []string
}

func newEchoAPI(t *testing.T, host string) *echoAPI {
	t.Helper()
	authority := testenv.NewCA(t)
	cert, _, _ := authority.Leaf(t, host)
	a := &echoAPI{caFile: authority.WritePEM(t, t.TempDir())}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		auth := r.Header.Get("Authorization")
		a.mu.Lock()
		a.auths = append(a.auths, auth)
		a.mu.Unlock()
		fmt.Fprintf(w, "you sent %s %s %s", auth, r.URL.RawQuery, body)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	_, a.port, _ = net.SplitHostPort(srv.Listener.Addr().String())
	return a
}

func (a *echoAPI) last() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.auths) == 0 {
		return ""
	}
	return a.auths[len(a.auths)-1]
}
