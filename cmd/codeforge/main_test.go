package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/codeforge/codeforge/internal/testenv"
)

func TestRunUsage(t *testing.T) {
	for _, args := range [][]string{nil, {"-h"}, {"help"}} {
		var stderr bytes.Buffer
		err := run(context.Background(), args, &stderr)
		if !errors.Is(err, errUsage) || !strings.Contains(stderr.String(), "serve") || !strings.Contains(stderr.String(), "dockerfilter") {
			t.Errorf("args %q: err %v, stderr %q; want the usage text", args, err, stderr.String())
		}
	}
}

func TestRunUnknownCommand(t *testing.T) {
	var stderr bytes.Buffer
	err := run(context.Background(), []string{"serv"}, &stderr)
	if !errors.Is(err, errUsage) || !strings.Contains(stderr.String(), `unknown command "serv"`) {
		t.Errorf("err %v, stderr %q; want an unknown-command message with the usage", err, stderr.String())
	}
}

func TestEveryCommandIsWired(t *testing.T) {
	cmds := commands()
	for _, name := range []string{"serve", "proxy", "dockerfilter"} {
		if cmds[name] == nil {
			t.Errorf("command %q is not wired", name)
		}
		if !strings.Contains(usage, "  "+name) {
			t.Errorf("command %q is missing from the usage text", name)
		}
	}
}

func TestSubcommandFlagErrorsAreReported(t *testing.T) {
	t.Setenv("CODEFORGE_ENV_FILE", "")
	for _, name := range []string{"serve", "proxy", "dockerfilter"} {
		var stderr bytes.Buffer
		err := run(context.Background(), []string{name, "--no-such-flag"}, &stderr)
		if err == nil {
			t.Errorf("%s --no-such-flag: no error", name)
			continue
		}
		if !strings.Contains(err.Error()+stderr.String(), "no-such-flag") {
			t.Errorf("%s --no-such-flag: err %v, stderr %q; want the bad flag named", name, err, stderr.String())
		}
	}
}

func TestHealth(t *testing.T) {
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, `{"status":"ok"}`) }))
	defer ok.Close()
	starting := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, `{"status":"starting","reason":"proxy not up"}`)
	}))
	defer starting.Close()
	ctx := context.Background()
	if err := run(ctx, []string{"health", ok.URL + "/health"}, io.Discard); err != nil {
		t.Errorf("healthy: %v", err)
	}
	if err := run(ctx, []string{"health", starting.URL}, io.Discard); err == nil || !strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), "proxy not up") {
		t.Errorf("starting: %v; want the status and the reason", err)
	}
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	if err := run(ctx, []string{"health", closed.URL}, io.Discard); err == nil {
		t.Error("nothing listening: no error")
	}
	for _, args := range [][]string{{"health"}, {"health", "a", "b"}, {"health", "--help"}} {
		if err := run(ctx, args, io.Discard); !errors.Is(err, errUsage) {
			t.Errorf("%q: %v; want usage", args, err)
		}
	}
	if err := run(ctx, []string{"health", "127.0.0.1:8080/health"}, io.Discard); err == nil || !strings.Contains(err.Error(), "want an http(s) URL") {
		t.Errorf("URL without scheme: %v", err)
	}
}

// TestBinaryLinksNoTestSupport: test helpers (package testing and what
// imports it) stay out of the binary; they live in _test.go files and
// under internal/ packages that only tests import.
func TestBinaryLinksNoTestSupport(t *testing.T) {
	t.Parallel()
	deps := testenv.Deps(t, "github.com/codeforge/codeforge/cmd/codeforge")
	if !slices.Contains(deps, "github.com/codeforge/codeforge/server") {
		t.Fatalf("the dependency list lacks the server; the listing is broken: %v", deps)
	}
	for _, d := range deps {
		if d == "testing" || strings.HasPrefix(d, "testing/") || strings.HasSuffix(d, "/internal/testenv") ||
			strings.HasSuffix(d, "/internal/dockertest") || strings.HasSuffix(d, "/internal/fakerunner") {
			t.Errorf("codeforge links %s: test support must not reach the binary", d)
		}
	}
}

// TestExitCodes: -h is a success for every command, a wrong command line
// exits 2, any other failure 1 (main once exited 2 for everything, and
// `proxy -h` failed with "flag: help requested").
func TestExitCodes(t *testing.T) {
	t.Setenv("CODEFORGE_ENV_FILE", "")
	ctx := context.Background()
	for _, name := range []string{"serve", "proxy", "dockerfilter"} {
		for _, args := range [][]string{{name, "-h"}, {name, "--help"}} {
			var stderr bytes.Buffer
			err := run(ctx, args, &stderr)
			if code := exitCode(err); code != 0 || !strings.Contains(stderr.String(), "-listen") && !strings.Contains(stderr.String(), "-addr") {
				t.Errorf("%q: exit %d (err %v), help %q; want 0 and the flags", args, code, err, stderr.String())
			}
		}
		if code := exitCode(run(ctx, []string{name, "--no-such-flag"}, io.Discard)); code != 2 {
			t.Errorf("%s --no-such-flag: exit %d, want 2", name, code)
		}
		if code := exitCode(run(ctx, []string{name, "stray"}, io.Discard)); code != 2 {
			t.Errorf("%s stray: exit %d, want 2", name, code)
		}
	}
	if code := exitCode(run(ctx, nil, io.Discard)); code != 2 {
		t.Errorf("no command: exit %d, want 2", code)
	}
	// A runtime failure: the proxy cannot listen on a port in use.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dir := t.TempDir()
	err = run(ctx, []string{"proxy", "--listen", ln.Addr().String(), "--ca-dir", dir + "/ca", "--apis-dir", dir + "/apis"}, io.Discard)
	if code := exitCode(err); err == nil || code != 1 {
		t.Errorf("proxy on a busy port: err %v, exit %d; want 1", err, code)
	}
}
