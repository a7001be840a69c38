package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/codeforge/codeforge/sandbox"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func TestExecuteHelloWorld(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessConfig{})
	res := h.run(`console.log("hello, world")`)
	if res.IsError {
		t.Fatalf("IsError for a clean run: %q", allText(res))
	}
	if got := texts(res); len(got) != 1 || got[0] != "hello, world\n" {
		t.Fatalf("content = %q, want exactly stdout %q", got, "hello, world\n")
	}
	out := output(t, res)
	if out.ExitCode != 0 || out.TimedOut || out.OutOfMemory || out.Truncated || out.Network == nil || len(out.Network) != 0 {
		t.Fatalf("structuredContent = %+v", out)
	}
	if out.DurationMS <= 0 {
		t.Fatalf("duration_ms = %d, want > 0", out.DurationMS)
	}
}

func TestExecuteStderrLabelled(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessConfig{})
	res := h.run(`console.log("out"); console.error("oops")`)
	got := texts(res)
	if res.IsError || len(got) != 2 || got[0] != "out\n" || got[1] != "stderr:\noops\n" {
		t.Fatalf("IsError=%v content=%q, want stdout then \"stderr:\\noops\\n\"", res.IsError, got)
	}
}

func TestExecuteExitCode(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessConfig{})
	res := h.run(`console.log("before"); Deno.exit(3)`)
	got := texts(res)
	if !res.IsError || len(got) != 2 || got[0] != "before\n" || got[1] != "exit code 3" {
		t.Fatalf("IsError=%v content=%q, want stdout and \"exit code 3\"", res.IsError, got)
	}
	if out := output(t, res); out.ExitCode != 3 || out.TimedOut || out.OutOfMemory {
		t.Fatalf("structuredContent = %+v", out)
	}

	res = h.run(`throw new Error("boom")`)
	text := allText(res)
	if !res.IsError || !strings.Contains(text, "stderr:\n") || !strings.Contains(text, "boom") || !strings.Contains(text, "exit code 1") {
		t.Fatalf("uncaught error: IsError=%v content=%q", res.IsError, text)
	}
}

func TestExecuteTimeoutKeepsPartialOutput(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessConfig{})
	// 6 s: deno must start and print first, on a busy shared machine.
	res := h.run(`console.log("started"); await new Promise((r) => setTimeout(r, 120_000)); console.log("never")`, "timeout", 6)
	got := texts(res)
	if !res.IsError || len(got) != 2 || got[0] != "started\n" || !strings.HasPrefix(got[1], "timed out after 6s (partial output above") {
		t.Fatalf("IsError=%v content=%q, want the partial output then the timeout note", res.IsError, got)
	}
	if out := output(t, res); !out.TimedOut || out.OutOfMemory {
		t.Fatalf("structuredContent = %+v, want timed_out", out)
	}
	// A fraction of a second is a valid timeout too.
	res = h.run(`await new Promise((r) => setTimeout(r, 120_000))`, "timeout", 0.5)
	if got := allText(res); !res.IsError || !strings.Contains(got, "timed out after 0.5s (no output before it") {
		t.Fatalf("content = %q", got)
	}
}

func TestExecuteOutOfMemory(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessConfig{})
	res := h.run(`const keep = []; for (;;) keep.push(new Array(1_000_000).fill({ x: Math.random() }));`, "timeout", 120)
	text := allText(res)
	want := fmt.Sprintf("out of memory: the run exceeded the sandbox memory limit (%d MB)", testMemoryMB)
	if !res.IsError || !strings.Contains(text, want) {
		t.Fatalf("IsError=%v content=%q, want %q", res.IsError, text, want)
	}
	if strings.Contains(text, "exit code") {
		t.Fatalf("out-of-memory result also says exit code: %q", text)
	}
	if out := output(t, res); !out.OutOfMemory || out.TimedOut {
		t.Fatalf("structuredContent = %+v, want out_of_memory", out)
	}
}

func TestExecuteOutputCap(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessConfig{edit: func(o *Options) { o.MaxOutput = 1000 }})
	res := h.run(`await Deno.stdout.write(new TextEncoder().encode("x".repeat(5000)))`)
	got := texts(res)
	if len(got) != 2 || got[0] != strings.Repeat("x", 1000) || got[1] != "output truncated: 4000 bytes cut (limit 1000 bytes per stream)" {
		t.Fatalf("content = %q", got)
	}
	if res.IsError {
		t.Fatal("truncation alone must not be an error")
	}
	if out := output(t, res); !out.Truncated {
		t.Fatalf("structuredContent = %+v, want truncated", out)
	}
}

func TestExecuteNoOutput(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessConfig{})
	res := h.run(`const x = 1 + 1;`)
	if got := texts(res); res.IsError || len(got) != 1 || got[0] != "(no output)" {
		t.Fatalf("IsError=%v content=%q", res.IsError, got)
	}
}

func TestExecuteSandboxSeesNoNetworkWithoutGate(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessConfig{})
	if !strings.Contains(h.srv.Instructions(), "no network at all") {
		t.Fatalf("instructions without a gate do not say there is no network:\n%s", h.srv.Instructions())
	}
	res := h.run(`try { await fetch("http://127.0.0.1:65000/"); console.log("reached") } catch (e) { console.log("refused:", e.name) }`)
	if got := allText(res); !strings.Contains(got, "refused: NotCapable") {
		t.Fatalf("fetch without network: %q", got)
	}
}

// TestExecuteBadInput: every bad argument is a tool error in plain words,
// and nothing ran and nothing changed.
func TestExecuteBadInput(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessConfig{apisDir: writeAPIs(t, map[string]string{
		"alpha": `{"description": "Alpha", "domains": ["alpha.test"]}`,
		"beta":  `{"description": "Beta", "domains": ["beta.test"]}`,
	})})
	writeFile(t, h.skillsDir+"/keep.ts", "// @description keep me\nconsole.log(1)\n")
	before := snapshot(t, h.skillsDir)

	big := strings.Repeat("a", DefaultMaxCodeBytes+1)
	cases := []struct {
		name string
		args string // raw JSON arguments
		want []string
	}{
		{"empty code", `{"code": ""}`, []string{"code is empty"}},
		{"blank code", `{"code": "  \n\t"}`, []string{"code is empty"}},
		{"missing code", `{}`, []string{"code is required"}},
		{"null code", `{"code": null}`, []string{"code is required"}},
		{"code not a string", `{"code": 42}`, []string{"code must be a string", "42"}},
		{"code over the cap", `{"code": "` + big + `"}`, []string{fmt.Sprintf("code is %d bytes", len(big)), fmt.Sprintf("limit of %d bytes", DefaultMaxCodeBytes)}},
		{"NUL byte", `{"code": "console.log(1)\u0000"}`, []string{"NUL byte at offset 14"}},
		{"invalid UTF-8", "{\"code\": \"console.log('\xff\xfe')\"}", []string{"not valid UTF-8"}},
		{"lone surrogate", `{"code": "console.log('\ud800')"}`, []string{"not valid UTF-8"}},
		{"timeout zero", `{"code": "console.log(1)", "timeout": 0}`, []string{"timeout must be more than 0 seconds, got 0"}},
		{"timeout negative", `{"code": "console.log(1)", "timeout": -5}`, []string{"timeout must be more than 0 seconds, got -5"}},
		{"timeout string", `{"code": "console.log(1)", "timeout": "5"}`, []string{"timeout must be a number of seconds", `the string "5"`}},
		{"timeout boolean", `{"code": "console.log(1)", "timeout": true}`, []string{"timeout must be a number of seconds", "boolean true"}},
		{"timeout list", `{"code": "console.log(1)", "timeout": [5]}`, []string{"timeout must be a number of seconds", "an array"}},
		{"timeout out of float range", `{"code": "console.log(1)", "timeout": 1e400}`, []string{"timeout must be a number of seconds", "1e400"}},
		{"timeout over the maximum", `{"code": "console.log(1)", "timeout": 301}`, []string{"timeout 301s is over the maximum of 300s"}},
		{"unknown API", `{"code": "console.log(1)", "apis": ["alpha", "nope"]}`, []string{`unknown API "nope"`, "valid: alpha, beta"}},
		{"empty API name", `{"code": "console.log(1)", "apis": [""]}`, []string{`unknown API ""`, "valid: alpha, beta"}},
		{"apis not a list", `{"code": "console.log(1)", "apis": "alpha"}`, []string{"apis must be a list of API names", `the string "alpha"`}},
		{"apis list of numbers", `{"code": "console.log(1)", "apis": [1]}`, []string{"apis must be a list of API names"}},
		{"unknown argument", `{"code": "console.log(1)", "timeout_s": 5}`, []string{`unknown argument "timeout_s"`, `"code", "apis", "timeout"`}},
		{"arguments not an object", `["console.log(1)"]`, []string{"arguments must be a JSON object"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := h.refused(t, "execute_code", json.RawMessage(tc.args), tc.want, before)
			if res.StructuredContent != nil {
				t.Errorf("a refused call has structuredContent %v", res.StructuredContent)
			}
		})
	}
}

func TestProgressNotifications(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessConfig{})
	ctx := context.Background()
	params := &mcp.CallToolParams{
		Name:      "execute_code",
		Arguments: map[string]any{"code": `for (let i = 0; i < 3; i++) { await new Promise((r) => setTimeout(r, 1000)); console.log(i) }`},
	}
	params.SetProgressToken("tok-1")
	res, err := h.session.CallTool(ctx, params)
	if err != nil || res.IsError {
		t.Fatalf("call: %v %v", err, res)
	}
	var running []*mcp.ProgressNotificationParams
	for _, p := range h.events.progressSnapshot() {
		if p.ProgressToken != "tok-1" {
			t.Fatalf("progress token %v, want tok-1", p.ProgressToken)
		}
		if strings.HasPrefix(p.Message, "running ") {
			running = append(running, p)
		}
	}
	if len(running) < 2 {
		t.Fatalf("got %d \"running\" progress notifications for a 3 s run, want at least 2: %+v", len(running), h.events.progressSnapshot())
	}
	for i := 1; i < len(running); i++ {
		if running[i].Progress <= running[i-1].Progress {
			t.Fatalf("progress did not increase: %v then %v", running[i-1].Progress, running[i].Progress)
		}
	}
	// Without a token, no progress is sent.
	n := len(h.events.progressSnapshot())
	h.run(`await new Promise((r) => setTimeout(r, 1500))`)
	if m := len(h.events.progressSnapshot()); m != n {
		t.Fatalf("%d progress notifications without a progress token", m-n)
	}
}

func TestProgressWhileQueued(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessConfig{edit: func(o *Options) { o.MaxConcurrent = 1 }})
	blockCtx, unblock := context.WithCancel(context.Background())
	defer unblock()
	blocked := make(chan struct{})
	go func() {
		defer close(blocked)
		h.session.CallTool(blockCtx, &mcp.CallToolParams{Name: "execute_code",
			Arguments: map[string]any{"code": `await new Promise((r) => setTimeout(r, 120_000))`, "timeout": 120}})
	}()
	waitFor(t, "the blocking run to start", func() bool { return h.runner.inFlight.Load() == 1 })

	done := make(chan *mcp.CallToolResult, 1)
	go func() {
		params := &mcp.CallToolParams{Name: "execute_code", Arguments: map[string]any{"code": `console.log("second")`, "timeout": 120}}
		params.SetProgressToken(7)
		res, err := h.session.CallTool(context.Background(), params)
		if err != nil {
			t.Errorf("queued call: %v", err)
		}
		done <- res
	}()
	waitFor(t, "a \"queued\" progress notification", func() bool {
		for _, p := range h.events.progressSnapshot() {
			if p.Message == "queued" {
				return true
			}
		}
		return false
	})
	unblock() // cancelling the first call frees the slot
	res := <-done
	if res == nil || res.IsError || allText(res) != "second\n" {
		t.Fatalf("queued call result: %v", res)
	}
	<-blocked
}

func TestStdoutLinesAsLogNotifications(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessConfig{})
	ctx := context.Background()

	// Before logging/setLevel: no log notifications.
	h.run(`console.log("quiet")`)
	if err := h.session.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "info"}); err != nil {
		t.Fatal(err)
	}
	h.run(`console.log("line one"); console.log("line two")`)
	var got []string
	timeout := time.After(20 * time.Second)
	for len(got) < 2 {
		select {
		case m := <-h.events.logs:
			if m.Logger != "stdout" || m.Level != "info" {
				t.Fatalf("log notification logger=%q level=%q, want stdout/info", m.Logger, m.Level)
			}
			got = append(got, fmt.Sprint(m.Data))
		case <-timeout:
			t.Fatalf("log notifications so far: %q", got)
		}
	}
	if got[0] != "line one" || got[1] != "line two" {
		t.Fatalf("log lines = %q (the line before setLevel must not be sent)", got)
	}
}

// TestCancellationKillsTheRun: a client's cancellation ends the deno
// process, and the call returns promptly.
func TestCancellationKillsTheRun(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessConfig{})
	ctx := context.Background()
	if err := h.session.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "info"}); err != nil {
		t.Fatal(err)
	}
	callCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		_, err := h.session.CallTool(callCtx, &mcp.CallToolParams{Name: "execute_code", Arguments: map[string]any{
			"code":    `console.log(Deno.pid); await new Promise((r) => setTimeout(r, 120_000))`,
			"timeout": 120,
		}})
		errc <- err
	}()
	var pid int
	select {
	case m := <-h.events.logs:
		var err error
		if pid, err = strconv.Atoi(fmt.Sprint(m.Data)); err != nil {
			t.Fatalf("first stdout line %q is not a pid", m.Data)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the run never printed its pid")
	}
	if err := syscall.Kill(pid, 0); err != nil {
		t.Fatalf("deno process %d not running before the cancel: %v", pid, err)
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled call returned %v", err)
	}
	waitFor(t, "the deno process to be gone", func() bool {
		return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
	})
	waitFor(t, "the slot to be free", func() bool { return h.runner.inFlight.Load() == 0 })
}

// TestConcurrentCallsQueue: 50 calls at once with two slots all complete,
// never more than two running.
func TestConcurrentCallsQueue(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessConfig{edit: func(o *Options) { o.MaxConcurrent = 2 }})
	const calls = 50 // docs/ARCHITECTURE.md: 50 concurrent calls complete or queue cleanly
	var wg sync.WaitGroup
	results := make([]*mcp.CallToolResult, calls)
	errs := make([]error, calls)
	for i := range calls {
		wg.Go(func() {
			results[i], errs[i] = h.session.CallTool(context.Background(), &mcp.CallToolParams{Name: "execute_code",
				Arguments: map[string]any{"code": fmt.Sprintf("console.log(%d)", i), "timeout": 300}})
		})
	}
	wg.Wait()
	for i := range calls {
		if errs[i] != nil {
			t.Fatalf("call %d: %v", i, errs[i])
		}
		if got := allText(results[i]); results[i].IsError || got != fmt.Sprintf("%d\n", i) {
			t.Fatalf("call %d: IsError=%v %q", i, results[i].IsError, got)
		}
	}
	if peak := h.runner.peak.Load(); peak > 2 {
		t.Fatalf("%d runs at once with MaxConcurrent 2", peak)
	}
	if n := h.runner.runs.Load(); n != calls {
		t.Fatalf("%d runs for %d calls", n, calls)
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

// notReadyRunner is the real local runner with a backend that reports it
// is still starting, as the Docker backend does until the sandbox trusts
// the proxy's CA.
type notReadyRunner struct{ sandbox.Runner }

func (notReadyRunner) Ready(context.Context) error {
	return errors.New("starting: sandbox has no CA certificate yet")
}

func TestExecuteWhileStarting(t *testing.T) {
	t.Parallel()
	var runner *countingRunner
	h := newHarness(t, harnessConfig{edit: func(o *Options) {
		runner = o.Runner.(*countingRunner)
		o.Runner = notReadyRunner{Runner: runner}
	}})
	res := h.run(`console.log("ran")`)
	text := allText(res)
	if !res.IsError || !strings.Contains(text, "still starting") || !strings.Contains(text, "no CA certificate") || !strings.Contains(text, "nothing ran") {
		t.Errorf("IsError %v, text %q; want a clear starting error", res.IsError, text)
	}
	if n := runner.runs.Load(); n != 0 {
		t.Errorf("%d runs started while the backend was not ready", n)
	}
}
