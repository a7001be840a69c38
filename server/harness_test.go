package server

import (
	"context"
	"encoding/json"
	"io/fs"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/codeforge/codeforge/apis"
	"github.com/codeforge/codeforge/internal/fakerunner"
	"github.com/codeforge/codeforge/internal/testenv"
	"github.com/codeforge/codeforge/proxy"
	"github.com/codeforge/codeforge/runs"
	"github.com/codeforge/codeforge/sandbox"
	"github.com/codeforge/codeforge/sandbox/local"
	"github.com/codeforge/codeforge/skills"
)

// testMemoryMB is the heap cap of test runs: small, so the out-of-memory
// test is quick.
const testMemoryMB = 128

// countingRunner wraps the real local runner to count runs and the peak
// number running at once; everything else is the real thing.
type countingRunner struct {
	sandbox.Runner
	runs     atomic.Int64
	inFlight atomic.Int64
	peak     atomic.Int64
}

func (c *countingRunner) Run(ctx context.Context, req sandbox.Request) (*sandbox.Result, error) {
	c.runs.Add(1)
	n := c.inFlight.Add(1)
	defer c.inFlight.Add(-1)
	for {
		p := c.peak.Load()
		if n <= p || c.peak.CompareAndSwap(p, n) {
			break
		}
	}
	return c.Runner.Run(ctx, req)
}

// events records what the server sent the test client.
type events struct {
	mu          sync.Mutex
	progress    []*mcp.ProgressNotificationParams
	listChanged chan struct{}
	logs        chan *mcp.LoggingMessageParams
}

func newEvents() *events {
	return &events{listChanged: make(chan struct{}, 100), logs: make(chan *mcp.LoggingMessageParams, 1000)}
}

func (e *events) clientOptions() *mcp.ClientOptions {
	return &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			e.mu.Lock()
			e.progress = append(e.progress, req.Params)
			e.mu.Unlock()
		},
		LoggingMessageHandler: func(_ context.Context, req *mcp.LoggingMessageRequest) {
			e.logs <- req.Params
		},
		ResourceListChangedHandler: func(context.Context, *mcp.ResourceListChangedRequest) {
			select {
			case e.listChanged <- struct{}{}:
			default:
			}
		},
	}
}

func (e *events) progressSnapshot() []*mcp.ProgressNotificationParams {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]*mcp.ProgressNotificationParams(nil), e.progress...)
}

// drainListChanged forgets notifications received so far.
func (e *events) drainListChanged() {
	for {
		select {
		case <-e.listChanged:
		default:
			return
		}
	}
}

// waitListChanged waits (generously: a missing notification fails, a slow
// one does not) for a notifications/resources/list_changed.
func (e *events) waitListChanged(t *testing.T) {
	t.Helper()
	select {
	case <-e.listChanged:
	case <-time.After(20 * time.Second):
		t.Fatal("no notifications/resources/list_changed arrived")
	}
}

type harness struct {
	t         testing.TB
	srv       *Server
	hs        *httptest.Server
	runner    *countingRunner
	local     *local.Runner
	skillsDir string
	events    *events
	session   *mcp.ClientSession
	logs      *strings.Builder
	logMu     *sync.Mutex
	token     string
}

type harnessConfig struct {
	// edit adjusts the server options before New.
	edit func(*Options)
	// apisDir holds the API configs (default: an empty set).
	apisDir string
	// getenv resolves ${VAR} credentials in the API configs.
	getenv func(string) (string, bool)
	// gate is the run network gate (default none: no network).
	gate func(*apis.Set) proxy.Gate
	// caCert is the CA file the runner trusts (with gate).
	caCert string
	// clientToken is the bearer token the harness's client sends.
	clientToken string
	// noClient skips connecting the default client session.
	noClient bool
	// runsDir is the run store's directory (default: a new temp dir).
	runsDir string
	// backend, if set, replaces the local runner (e.g. the Docker one).
	backend sandbox.Runner
	// memoryMB replaces testMemoryMB as the runs' memory cap.
	memoryMB int
	// denoPath replaces testenv.Deno (benchmarks use the bare binary: the
	// test wrapper's mount namespace costs a few ms per run).
	denoPath string
	// poolSize is the local runner's warm pool (default 0: every run cold).
	poolSize int
	// fake runs the server on a fakerunner.Runner that reports the local
	// backend's environment but runs nothing: for contract tests (tool
	// schemas, instructions, argument checks) that need neither Deno nor
	// root.
	fake bool
}

// newHarness starts a real server (real local Deno runner, real skills
// store) on an httptest server and connects a go-sdk client over
// Streamable HTTP.
func newHarness(t testing.TB, cfg harnessConfig) *harness {
	t.Helper()
	skillsDir := t.TempDir()
	var (
		backend sandbox.Runner
		lr      *local.Runner
		err     error
	)
	memoryMB := testMemoryMB
	if cfg.memoryMB > 0 {
		memoryMB = cfg.memoryMB
	}
	if cfg.fake {
		backend = &fakerunner.Runner{Environment: sandbox.Environment{
			Backend: "local", ScratchNote: local.ScratchNote, SkillsDir: skillsDir, OutDir: local.OutDirDescription,
		}}
	} else {
		deno := cfg.denoPath
		if deno == "" {
			deno = testenv.Deno(t)
		}
		lr, err = local.New(local.Options{
			DenoPath:    deno,
			SkillsDir:   skillsDir,
			ScratchRoot: t.TempDir(),
			MemoryMB:    memoryMB,
			CACertFile:  cfg.caCert,
			PoolSize:    cfg.poolSize,
		})
		if err != nil {
			t.Fatalf("local runner: %v", err)
		}
		t.Cleanup(func() { lr.Close() })
		backend = lr
	}
	store, err := skills.Open(skillsDir)
	if err != nil {
		t.Fatalf("skills store: %v", err)
	}
	set := &apis.Set{}
	if cfg.apisDir != "" {
		getenv := cfg.getenv
		if getenv == nil {
			getenv = func(string) (string, bool) { return "", false }
		}
		if set, err = apis.Load(cfg.apisDir, getenv); err != nil {
			t.Fatalf("load APIs: %v", err)
		}
	}
	logs := &strings.Builder{}
	logMu := &sync.Mutex{}
	logger := slog.New(slog.NewTextHandler(&lockedWriter{mu: logMu, w: logs}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	runsDir := cfg.runsDir
	if runsDir == "" {
		runsDir = t.TempDir()
	}
	mgr, err := runs.Open(runs.Options{Dir: runsDir, Logger: logger})
	if err != nil {
		t.Fatalf("runs: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		mgr.Close(ctx)
	})
	if cfg.backend != nil {
		backend = cfg.backend
	}
	runner := &countingRunner{Runner: backend}
	opts := Options{
		Runs:          mgr,
		Runner:        runner,
		APIs:          func() *apis.Set { return set },
		Skills:        store,
		MaxConcurrent: 2,
		MemoryMB:      memoryMB,
		Logger:        logger,
	}
	if cfg.gate != nil {
		opts.Gate = cfg.gate(set)
	}
	if cfg.edit != nil {
		cfg.edit(&opts)
	}
	srv, err := New(opts)
	if err != nil {
		t.Fatalf("server.New: %v", err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	h := &harness{t: t, srv: srv, hs: hs, runner: runner, local: lr, skillsDir: backend.Env().SkillsDir, logs: logs, logMu: logMu, token: cfg.clientToken}
	h.events = newEvents()
	if !cfg.noClient {
		h.session = h.connect(h.events.clientOptions())
	}
	return h
}

// connect opens another client session.
func (h *harness) connect(opts *mcp.ClientOptions) *mcp.ClientSession {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "codeforge-test", Version: "1"}, opts)
	transport := &mcp.StreamableClientTransport{Endpoint: h.hs.URL + "/mcp"}
	if h.token != "" {
		transport.HTTPClient = &http.Client{Transport: bearer{h.token, http.DefaultTransport}}
	}
	cs, err := client.Connect(ctx, transport, nil)
	if err != nil {
		h.t.Fatalf("connect: %v", err)
	}
	h.t.Cleanup(func() { cs.Close() })
	return cs
}

func (h *harness) logText() string {
	h.logMu.Lock()
	defer h.logMu.Unlock()
	return h.logs.String()
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *strings.Builder
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// call calls a tool; args may be a map or json.RawMessage. A protocol
// error fails the test.
func (h *harness) call(name string, args any) *mcp.CallToolResult {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := h.session.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		h.t.Fatalf("call %s: protocol error: %v", name, err)
	}
	return res
}

// run calls execute_code with code (and more arguments, if given).
func (h *harness) run(code string, more ...any) *mcp.CallToolResult {
	h.t.Helper()
	args := map[string]any{"code": code}
	for i := 0; i+1 < len(more); i += 2 {
		args[more[i].(string)] = more[i+1]
	}
	return h.call("execute_code", args)
}

// texts returns the result's text blocks.
func texts(res *mcp.CallToolResult) []string {
	var out []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			out = append(out, tc.Text)
		}
	}
	return out
}

func allText(res *mcp.CallToolResult) string { return strings.Join(texts(res), "\n") }

// output decodes execute_code's structuredContent.
func output(t *testing.T, res *mcp.CallToolResult) executeOutput {
	t.Helper()
	if res.StructuredContent == nil {
		t.Fatalf("no structuredContent in %s", allText(res))
	}
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	var out executeOutput
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&out); err != nil {
		t.Fatalf("structuredContent %s: %v", b, err)
	}
	return out
}

// snapshot reads every file under dir (names and contents).
func snapshot(t testing.TB, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == dir {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		if d.IsDir() {
			out[rel+"/"] = ""
			return nil
		}
		b, err := os.ReadFile(p)
		out[rel] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
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

// refused calls tool with args and checks the call was refused as bad
// input: a tool error whose text holds every want, no run started and the
// skills directory still equal to before. It returns the result.
func (h *harness) refused(t *testing.T, tool string, args any, want []string, before map[string]string) *mcp.CallToolResult {
	t.Helper()
	runs := h.runner.runs.Load()
	res := h.call(tool, args)
	text := allText(res)
	if !res.IsError {
		t.Fatalf("IsError=false for bad input; content %q", text)
	}
	for _, w := range want {
		if !strings.Contains(text, w) {
			t.Errorf("message %q does not contain %q", text, w)
		}
	}
	if n := h.runner.runs.Load(); n != runs {
		t.Errorf("a run started for bad input (%d runs, was %d)", n, runs)
	}
	if after := snapshot(t, h.skillsDir); !maps.Equal(before, after) {
		t.Errorf("skills directory changed: %v -> %v", before, after)
	}
	return res
}
