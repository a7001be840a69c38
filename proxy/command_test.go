package proxy

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/codeforge/codeforge/proxy/ca"
)

// waitLog polls the log until re matches, failing the test if the command
// exits first or the (generous) deadline passes.
func waitLog(t *testing.T, logs *syncBuffer, re *regexp.Regexp, from int, done <-chan error) []string {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		s := logs.String()
		if m := re.FindStringSubmatch(s[min(from, len(s)):]); m != nil {
			return m
		}
		select {
		case err := <-done:
			t.Fatalf("command exited waiting for %s: %v\n%s", re, err, s)
		case <-time.After(10 * time.Millisecond):
		}
	}
	t.Fatalf("no log line matching %s:\n%s", re, logs.String())
	return nil
}

// TestCommand runs `codeforge proxy` with a control listener, drives a run
// through it, and reloads its API configs with SIGHUP: an invalid config is
// logged and the old one kept, a valid one takes over. Not parallel: it
// signals the test process.
func TestCommand(t *testing.T) {
	dir := t.TempDir()
	apisDir := filepath.Join(dir, "apis")
	var (
		mu          sync.Mutex
		localSecret string // what ${LOCAL_SECRET} resolves to
	)
	writeLocal := func(value string, extra map[string]any) {
		cfg := map[string]any{"domains": []string{"localhost"}, "credentials": map[string]string{"LOCAL_TOKEN": "${LOCAL_SECRET}"}, "ports": upstreamPorts(t)}
		for k, v := range extra {
			cfg[k] = v
		}
		writeAPI(t, apisDir, "local", cfg)
		mu.Lock()
		localSecret = value
		mu.Unlock()
	}
	writeLocal("first-secret-value", nil)
	upstreamCA := filepath.Join(dir, "upstream-ca.pem")
	if err := os.WriteFile(upstreamCA, testPKI(t).ca.PEM, 0o644); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"PROXY_LISTEN":            "127.0.0.1:1", // the flag below wins
		"APIS_DIR":                apisDir,
		"CA_DIR":                  filepath.Join(dir, "ca"),
		"CA_CERT_OUT":             filepath.Join(dir, "ca-out.pem"),
		"UPSTREAM_CA":             upstreamCA,
		"ALLOW_PRIVATE_UPSTREAMS": "true",
		"PROXY_CONTROL_LISTEN":    "127.0.0.1:0",
		"USER_AGENT":              "codeforge-cmd-test",
	}
	getenv := func(k string) (string, bool) {
		if k == "LOCAL_SECRET" {
			mu.Lock()
			defer mu.Unlock()
			return localSecret, true
		}
		v, ok := env[k]
		return v, ok
	}
	tokenFile := filepath.Join(dir, "secrets", "control-token")
	logs := &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- Command(ctx, []string{"--listen", "127.0.0.1:0", "--control-token-file", tokenFile}, getenv, logs)
	}()
	addr := waitLog(t, logs, regexp.MustCompile(`msg=listening component=proxy addr=(\S+)`), 0, done)[1]
	ctlAddr := waitLog(t, logs, regexp.MustCompile(`msg="control listening" component=proxy addr=(\S+)`), 0, done)[1]

	token, err := os.ReadFile(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(tokenFile); fi.Mode().Perm() != 0o600 || !regexp.MustCompile(`^[0-9a-f]{64}\n$`).Match(token) {
		t.Errorf("token file: mode %v, content %q", fi.Mode().Perm(), token)
	}
	caOut, err := os.ReadFile(filepath.Join(dir, "ca-out.pem"))
	if err != nil || !strings.Contains(string(caOut), "BEGIN CERTIFICATE") {
		t.Fatalf("CA certificate not published: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "ca", "ca.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("CA key: %v %v", fi, err)
	}

	up := newUpstream(t, nil)
	cc, err := NewControlClient("http://"+ctlAddr, strings.TrimSpace(string(token)), "http://"+addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	tp := &testProxy{addr: addr, ca: mustLoadCA(t, filepath.Join(dir, "ca"))}
	try := func(wantSecret string) {
		t.Helper()
		run, err := cc.Open(context.Background(), RunSpec{})
		if err != nil {
			t.Fatal(err)
		}
		c := tp.client(t, run.ProxyURL())
		resp, body := do(t, c, "GET", up.url("localhost", "/x"), nil, map[string]string{"Authorization": "Bearer LOCAL_TOKEN"})
		if resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		seen := up.seen()
		s := seen[len(seen)-1]
		if got := s.Header.Get("Authorization"); got != "Bearer "+wantSecret {
			t.Errorf("upstream Authorization = %q, want the value %q", got, wantSecret)
		}
		if ua := s.Header.Get("User-Agent"); ua != "codeforge-cmd-test" {
			t.Errorf("User-Agent = %q", ua)
		}
		if _, err := run.Finish(context.Background()); err != nil {
			t.Error(err)
		}
	}
	try("first-secret-value")

	// An invalid config: logged, the old set stays.
	mark := len(logs.String())
	writeLocal("second-secret-value", map[string]any{"domain": "typo"})
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitLog(t, logs, regexp.MustCompile(`level=ERROR msg="reload failed; keeping the previous API configs".*unknown field`), mark, done)
	try("first-secret-value")

	// A valid one takes over.
	mark = len(logs.String())
	writeLocal("third-secret-value", nil)
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitLog(t, logs, regexp.MustCompile(`msg=reload component=proxy apis=1`), mark, done)
	try("third-secret-value")

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Command returned %v", err)
	}
	for _, secret := range []string{"first-secret-value", "second-secret-value", "third-secret-value"} {
		if strings.Contains(logs.String(), secret) {
			t.Errorf("log holds %q", secret)
		}
	}
}

func mustLoadCA(t *testing.T, dir string) *ca.CA {
	t.Helper()
	c, err := ca.LoadOrCreate(dir)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestCommandFlagErrors(t *testing.T) {
	t.Parallel()
	none := func(string) (string, bool) { return "", false }
	env := func(k, v string) func(string) (string, bool) {
		return func(name string) (string, bool) {
			if name == k {
				return v, true
			}
			return "", false
		}
	}
	cases := []struct {
		args   []string
		getenv func(string) (string, bool)
		want   string
	}{
		{[]string{"--mode", "sideways"}, none, `--mode "sideways"`},
		{[]string{}, env("PROXY_MODE", "sideways"), `--mode "sideways"`},
		{[]string{"extra"}, none, "unexpected arguments"},
		{[]string{"--control-listen", ":0"}, none, "--control-token-file"},
		{[]string{"--no-such-flag"}, none, "no-such-flag"},
		{[]string{}, env("YOLO_MODE", "maybe"), "YOLO_MODE"},
		{[]string{}, env("ALLOW_PRIVATE_UPSTREAMS", "perhaps"), "ALLOW_PRIVATE_UPSTREAMS"},
		{[]string{"--transparent-uid", "10001"}, none, "--transparent-uid applies to --mode transparent only"},
		{[]string{"--run-as", "10001:10002"}, none, "--run-as applies to --mode transparent only"},
		{[]string{"--mode", "transparent", "--transparent-uid", "sandbox"}, none, `--transparent-uid "sandbox": want a numeric id`},
		{[]string{"--mode", "transparent", "--transparent-uid", "0"}, none, "above 0"},
		{[]string{"--mode", "transparent"}, env("PROXY_TRANSPARENT_GID", "-3"), `--transparent-gid "-3"`},
		{[]string{"--mode", "transparent", "--run-as", "10001"}, none, `--run-as "10001": want uid:gid`},
		{[]string{"--mode", "transparent", "--run-as", "0:0"}, none, "--run-as"},
		// The proxy would lock itself out: refused before anything happens.
		{[]string{"--mode", "transparent", "--listen", "127.0.0.1:0", "--transparent-uid", "10001", "--transparent-gid", "10001", "--run-as", "10001:10001"}, none, "loop back"},
		{[]string{"--mode", "transparent", "--listen", "127.0.0.1:0", "--transparent-uid", "10001", "--run-as", "10001:10002"}, none, "loop back"},
		// Invalid rules are refused before iptables is touched.
		{[]string{"--mode", "transparent", "--listen", "127.0.0.1:0", "--transparent-uid", "10001", "--transparent-interface", "eth0"}, none, "one or the other"},
		{[]string{"--mode", "transparent", "--listen", "127.0.0.1:0", "--transparent-uid", "10001", "--transparent-dns", "dns.local"}, none, `resolver "dns.local"`},
	}
	for _, tc := range cases {
		err := Command(context.Background(), tc.args, tc.getenv, &syncBuffer{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err = %v, want it to mention %q", tc.args, err, tc.want)
		}
	}
	// Errors after parsing name what is wrong too.
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.pem")
	_ = os.WriteFile(bad, []byte("not a certificate"), 0o644)
	writeAPI(t, filepath.Join(dir, "apis"), "broken", map[string]any{"domains": []string{"https://x.test"}})
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--listen", "127.0.0.1:0", "--ca-dir", filepath.Join(dir, "ca"), "--apis-dir", filepath.Join(dir, "none"), "--upstream-ca", bad}, "no PEM certificates"},
		{[]string{"--listen", "127.0.0.1:0", "--ca-dir", filepath.Join(dir, "ca"), "--apis-dir", filepath.Join(dir, "apis")}, "remove the scheme"},
	} {
		err := Command(context.Background(), tc.args, none, &syncBuffer{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err = %v, want it to mention %q", tc.args, err, tc.want)
		}
	}
}
