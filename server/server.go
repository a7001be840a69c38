// Package server is CodeForge's MCP server: the execute_code, list_apis,
// get_instructions, update_skill and delete_skill tools, the skill://
// resources and the run_skill prompt, served as Streamable HTTP at /mcp
// behind Host/Origin/token checks, with GET /health beside it. Runs go to a
// sandbox.Runner through a bounded queue; their network identity comes from
// a proxy.Gate.
package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/codeforge/codeforge/apis"
	"github.com/codeforge/codeforge/proxy"
	"github.com/codeforge/codeforge/runs"
	"github.com/codeforge/codeforge/sandbox"
	"github.com/codeforge/codeforge/settings"
	"github.com/codeforge/codeforge/skills"
)

// Defaults for the zero values of Options.
const (
	DefaultQueueLimit         = 100
	DefaultTimeout            = 30 * time.Second
	DefaultMaxTimeout         = 300 * time.Second
	DefaultMaxCodeBytes       = 256 << 10
	DefaultMaxOutput          = 1 << 20
	DefaultSessionIdleTimeout = 30 * time.Minute
	DefaultMaxBodyBytes       = 4 << 20
	DefaultInlineImageBytes   = 1 << 20
)

// Version is reported to clients in the initialize handshake.
const Version = "0.1.0"

// Options configure a Server. Zero values mean the documented defaults.
type Options struct {
	// Runner runs the code (required).
	Runner sandbox.Runner
	// Gate hands out per-run proxy identities. Nil means runs have no
	// network at all; the instructions then say so.
	Gate proxy.Gate
	// APIs returns the current API set (required; it may change on reload).
	APIs func() *apis.Set
	// Skills is the skills store (required).
	Skills *skills.Store
	// Settings are the shared settings (YOLO, debug, …).
	Settings settings.Common
	// Runs keeps the runs: in flight and, in its store, ended (required).
	Runs *runs.Manager
	// MaxWait caps run_wait's timeout (default 120s).
	MaxWait time.Duration
	// InlineImageBytes: PNG, JPEG, GIF and WebP files a run leaves in out/
	// up to this size come back inline as image content; larger ones as
	// resource links (default 1 MiB).
	InlineImageBytes int64

	// MaxConcurrent is how many runs execute at once (default runtime.NumCPU()).
	MaxConcurrent int
	// QueueLimit is how many runs may wait for a slot (default 100); beyond
	// it a call gets a "server busy" tool error.
	QueueLimit int
	// DefaultTimeout applies when a call gives none (default 30s);
	// MaxTimeout is the largest a call may ask for (default 300s).
	DefaultTimeout, MaxTimeout time.Duration
	// MaxCodeBytes caps the code argument (default 256 KiB).
	MaxCodeBytes int
	// MaxOutput caps stdout and stderr each, in bytes (default 1 MiB).
	MaxOutput int
	// MemoryMB is the sandbox's memory limit, for messages and the
	// instructions only (the runner enforces it); 0 leaves it unsaid.
	MemoryMB int

	// AllowedHosts are the Host header values /mcp and /health accept.
	// Empty means localhost, 127.0.0.1 and [::1], each bare and with the
	// port the request arrived on.
	AllowedHosts []string
	// AllowedOrigins are the Origin header values accepted when a request
	// carries one. Empty means http://localhost, http://127.0.0.1 and
	// http://[::1] with the port the request arrived on.
	AllowedOrigins []string
	// Token, when set, is the bearer token every /mcp request must carry.
	Token string
	// SessionIdleTimeout closes MCP sessions idle this long (default 30 min).
	SessionIdleTimeout time.Duration
	// MaxBodyBytes caps request bodies (default 4 MiB).
	MaxBodyBytes int64

	// Logger receives the server's log lines (nil: discard).
	Logger *slog.Logger
}

// Server is the MCP server. Create it with New; serve Handler().
type Server struct {
	opts         Options
	log          *slog.Logger
	skillLog     *slog.Logger
	mcp          *mcp.Server
	queue        *queue
	instructions string
	env          sandbox.Environment
	runMgr       *runs.Manager

	// syncMu serialises skill rescans; mirrored is what the MCP server
	// currently lists, by skill name.
	syncMu      sync.Mutex
	synced      bool
	fingerprint string
	mirrored    map[string]skillInfo

	// runsMu guards runs: the cancel funcs of calls in flight, by MCP
	// session id, so that ending a session ends its runs.
	runsMu sync.Mutex
	runs   map[string]map[*int]context.CancelFunc
}

// New builds a Server from opts, filling in defaults.
func New(opts Options) (*Server, error) {
	if opts.Runner == nil {
		return nil, errors.New("server: Options.Runner is required")
	}
	if opts.APIs == nil {
		return nil, errors.New("server: Options.APIs is required")
	}
	if opts.Skills == nil {
		return nil, errors.New("server: Options.Skills is required")
	}
	if opts.Runs == nil {
		return nil, errors.New("server: Options.Runs is required")
	}
	if opts.MaxWait <= 0 {
		opts.MaxWait = DefaultMaxWait
	}
	if opts.InlineImageBytes <= 0 {
		opts.InlineImageBytes = DefaultInlineImageBytes
	}
	if opts.MaxConcurrent <= 0 {
		opts.MaxConcurrent = runtime.NumCPU()
	}
	if opts.QueueLimit <= 0 {
		opts.QueueLimit = DefaultQueueLimit
	}
	if opts.DefaultTimeout <= 0 {
		opts.DefaultTimeout = DefaultTimeout
	}
	if opts.MaxTimeout <= 0 {
		opts.MaxTimeout = DefaultMaxTimeout
	}
	if opts.DefaultTimeout > opts.MaxTimeout {
		return nil, fmt.Errorf("server: default timeout %s is over the maximum timeout %s", opts.DefaultTimeout, opts.MaxTimeout)
	}
	if opts.MaxCodeBytes <= 0 {
		opts.MaxCodeBytes = DefaultMaxCodeBytes
	}
	if opts.MaxOutput <= 0 {
		opts.MaxOutput = DefaultMaxOutput
	}
	if opts.SessionIdleTimeout <= 0 {
		opts.SessionIdleTimeout = DefaultSessionIdleTimeout
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if opts.MaxBodyBytes <= int64(opts.MaxCodeBytes) {
		return nil, fmt.Errorf("server: request body cap %d bytes must be larger than the code cap %d bytes", opts.MaxBodyBytes, opts.MaxCodeBytes)
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{
		opts:     opts,
		log:      opts.Logger.With("component", "server"),
		skillLog: opts.Logger.With("component", "skill"),
		queue:    newQueue(opts.MaxConcurrent, opts.QueueLimit),
		env:      opts.Runner.Env(),
		runMgr:   opts.Runs,
		mirrored: map[string]skillInfo{},
		runs:     map[string]map[*int]context.CancelFunc{},
	}
	s.instructions = s.buildInstructions()
	s.mcp = mcp.NewServer(&mcp.Implementation{Name: "codeforge", Title: "CodeForge", Version: Version}, &mcp.ServerOptions{
		Instructions: s.instructions,
		Logger:       opts.Logger.With("component", "mcp"),
		Capabilities: &mcp.ServerCapabilities{
			Tools:       &mcp.ToolCapabilities{ListChanged: false},
			Resources:   &mcp.ResourceCapabilities{ListChanged: true, Subscribe: true},
			Prompts:     &mcp.PromptCapabilities{ListChanged: false},
			Logging:     &mcp.LoggingCapabilities{},
			Completions: &mcp.CompletionCapabilities{},
		},
		CompletionHandler:  s.complete,
		SubscribeHandler:   s.subscribe,
		UnsubscribeHandler: s.unsubscribe,
	})
	s.addTools()
	s.addSkillFeatures()
	s.addRunFeatures()
	if err := s.syncSkills(context.Background()); err != nil {
		return nil, fmt.Errorf("server: list skills: %w", err)
	}
	return s, nil
}

// Instructions returns the usage primer (the initialize instructions and
// the get_instructions text).
func (s *Server) Instructions() string { return s.instructions }

// MCPServer exposes the underlying go-sdk server (for in-process
// transports in tests and tools).
func (s *Server) MCPServer() *mcp.Server { return s.mcp }

// Handler serves /mcp (Streamable HTTP, stateful, SSE responses) and
// GET /health, behind the Host, Origin, token and body-size checks.
func (s *Server) Handler() http.Handler {
	streamable := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.mcp }, &mcp.StreamableHTTPOptions{
		JSONResponse:   false,
		SessionTimeout: s.opts.SessionIdleTimeout,
		Logger:         s.opts.Logger.With("component", "mcp"),
		// Our own guard checks Host against an explicit allowlist, which is
		// stricter than the SDK's loopback rule and, unlike it, can be
		// widened for a published Docker port; Origin likewise.
		DisableLocalhostProtection: true,
		MaxRequestBodyBytes:        s.opts.MaxBodyBytes,
	})
	mux := http.NewServeMux()
	mux.Handle("/mcp", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The SDK closes a session on DELETE only after its requests in
		// flight finish; end the session's runs first so that a client
		// that goes away does not leave them running to their timeout.
		if r.Method == http.MethodDelete {
			if id := r.Header.Get("Mcp-Session-Id"); id != "" {
				s.cancelSessionRuns(id)
			}
		}
		streamable.ServeHTTP(w, r)
	}))
	mux.HandleFunc("GET /health", s.health)
	return &guard{
		next:           mux,
		allowedHosts:   lower(s.opts.AllowedHosts),
		allowedOrigins: lower(s.opts.AllowedOrigins),
		token:          s.opts.Token,
		maxBody:        s.opts.MaxBodyBytes,
		log:            s.opts.Logger.With("component", "http"),
	}
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	// A fresh check: /health reports an outage while it lasts, even when
	// runs still trust a success of a moment ago.
	if err := s.opts.Runner.Ready(sandbox.FreshReady(ctx)); err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		json.NewEncoder(w).Encode(map[string]string{"status": "starting", "reason": err.Error()})
		return
	}
	json.NewEncoder(w).Encode(map[string]string{"status": "ok"})
}

// trackRun registers a call's cancel func under its session and returns
// the func that forgets it.
func (s *Server) trackRun(ss *mcp.ServerSession, cancel context.CancelFunc) (untrack func()) {
	if ss == nil || ss.ID() == "" {
		return func() {}
	}
	id, key := ss.ID(), new(int)
	s.runsMu.Lock()
	if s.runs[id] == nil {
		s.runs[id] = map[*int]context.CancelFunc{}
	}
	s.runs[id][key] = cancel
	s.runsMu.Unlock()
	return func() {
		s.runsMu.Lock()
		delete(s.runs[id], key)
		if len(s.runs[id]) == 0 {
			delete(s.runs, id)
		}
		s.runsMu.Unlock()
	}
}

// cancelSessionRuns cancels every call in flight of the session id.
func (s *Server) cancelSessionRuns(id string) {
	s.runsMu.Lock()
	cancels := s.runs[id]
	delete(s.runs, id)
	s.runsMu.Unlock()
	if len(cancels) > 0 {
		s.log.Info("session closed: stopping its runs", "runs", len(cancels))
	}
	for _, cancel := range cancels {
		cancel()
	}
}
