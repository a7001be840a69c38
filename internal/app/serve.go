// Package app is CodeForge's composition root: it turns flags and the
// environment into a configuration, builds the parts a command needs (the
// proxy and its CA, a sandbox backend, the skills store, the MCP server)
// and wires them together. The parts themselves know nothing of each
// other: the server consumes small interfaces (sandbox.Runner, gate.Gate)
// and this package supplies the implementations.
package app

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/codeforge/codeforge/apis"
	"github.com/codeforge/codeforge/proxy"
	"github.com/codeforge/codeforge/proxy/ca"
	"github.com/codeforge/codeforge/proxy/gate"
	"github.com/codeforge/codeforge/runs"
	"github.com/codeforge/codeforge/sandbox"
	"github.com/codeforge/codeforge/sandbox/local"
	"github.com/codeforge/codeforge/server"
	"github.com/codeforge/codeforge/settings"
	"github.com/codeforge/codeforge/skills"
)

// config is everything `codeforge serve` was told, after flags, the
// environment and defaults. Backends are built from it.
type config struct {
	// loadAPIs reads the API configs: with their secrets (local backend,
	// whose proxy runs in-process) or token names only (docker).
	loadAPIs       func(dir string) (*apis.Set, error)
	Addr           string
	Backend        string
	APIsDir        string
	SkillsDir      string // absolute, exists
	DataDir        string // absolute, exists
	AllowedHosts   []string
	AllowedOrigins []string
	Token          string

	MaxConcurrent      int
	QueueLimit         int
	MaxOutput          int
	MaxCodeBytes       int
	MaxTimeout         time.Duration
	DefaultTimeout     time.Duration
	SessionIdleTimeout time.Duration
	MemoryMB           int
	PoolSize           int

	// Runs: where run records live and what is kept.
	RunRetention     time.Duration
	RunsMaxBytes     int64
	RunFileMaxBytes  int64
	RunFilesMaxBytes int64
	InlineImageBytes int64
	MaxWait          time.Duration

	AllowPrivateUpstreams bool
	UpstreamCAFile        string
	// UpstreamRoots are the system roots plus UpstreamCAFile's certificates
	// (nil: the system roots).
	UpstreamRoots *x509.CertPool

	Settings settings.Common
	APIs     *apis.Set
	Getenv   settings.Getenv
	Logger   *slog.Logger
}

// DefaultPoolSize is how many warm Deno processes a backend keeps.
const DefaultPoolSize = sandbox.DefaultPoolSize

// shutdownGrace bounds how long serve waits for requests in flight when
// its context is cancelled.
const shutdownGrace = 10 * time.Second

// Serve runs `codeforge serve`: the MCP server on --addr with the chosen
// sandbox backend. It returns when ctx is cancelled (after a graceful
// shutdown) or when the server cannot start or keep serving.
func Serve(ctx context.Context, args []string, getenv settings.Getenv, stderr io.Writer) error {
	cfg, err := parseConfig(args, getenv, stderr)
	if err != nil {
		return err
	}
	log := cfg.Logger.With("component", "serve")

	var (
		runner  sandbox.Runner
		runGate gate.Gate
		// reloadProxy hands a reloaded API set to the in-process proxy.
		reloadProxy = func(*apis.Set) error { return nil }
	)
	switch cfg.Backend {
	case "local":
		var px *proxy.Proxy
		runner, px, err = buildLocalBackend(cfg)
		if err != nil {
			return err
		}
		defer px.Close()
		runGate, reloadProxy = px, px.Reload
	case "docker":
		runner, runGate, err = buildDockerBackend(cfg)
		if err != nil {
			return fmt.Errorf("docker sandbox: %w", err)
		}
	}
	defer runner.Close()

	store, err := skills.Open(cfg.SkillsDir)
	if err != nil {
		return fmt.Errorf("skills directory: %w", err)
	}
	runMgr, err := runs.Open(runs.Options{
		Dir:           filepath.Join(cfg.DataDir, "runs"),
		Retention:     cfg.RunRetention,
		MaxTotalBytes: cfg.RunsMaxBytes,
		Files:         runs.FileLimits{MaxFileBytes: cfg.RunFileMaxBytes, MaxRunBytes: cfg.RunFilesMaxBytes},
		Logger:        cfg.Logger,
	})
	if err != nil {
		return fmt.Errorf("runs (--data-dir, DATA_DIR): %w", err)
	}
	defer func() {
		// Runs still in flight are stopped and recorded as interrupted.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownGrace)
		defer cancel()
		if err := runMgr.Close(cctx); err != nil {
			log.Warn("close run store", "err", err)
		}
	}()
	var current atomic.Pointer[apis.Set]
	current.Store(cfg.APIs)
	srv, err := server.New(server.Options{
		Runner:             runner,
		Gate:               runGate,
		APIs:               current.Load,
		Skills:             store,
		Settings:           cfg.Settings,
		Runs:               runMgr,
		MaxWait:            cfg.MaxWait,
		InlineImageBytes:   cfg.InlineImageBytes,
		MaxConcurrent:      cfg.MaxConcurrent,
		QueueLimit:         cfg.QueueLimit,
		DefaultTimeout:     cfg.DefaultTimeout,
		MaxTimeout:         cfg.MaxTimeout,
		MaxCodeBytes:       cfg.MaxCodeBytes,
		MaxOutput:          cfg.MaxOutput,
		MemoryMB:           cfg.MemoryMB,
		AllowedHosts:       cfg.AllowedHosts,
		AllowedOrigins:     cfg.AllowedOrigins,
		Token:              cfg.Token,
		SessionIdleTimeout: cfg.SessionIdleTimeout,
		Logger:             cfg.Logger,
	})
	if err != nil {
		return err
	}

	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w (choose another address with --addr or CODEFORGE_ADDR)", cfg.Addr, err)
	}
	hs := &http.Server{
		Handler:           srv.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(cfg.Logger.With("component", "http").Handler(), slog.LevelWarn),
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	log.Info("codeforge serving",
		"url", "http://"+ln.Addr().String()+"/mcp",
		"backend", cfg.Backend,
		"apis", len(cfg.APIs.Active()),
		"network", networkSummary(runGate, cfg.Settings.YOLO),
		"token", cfg.Token != "",
		"skills_dir", cfg.SkillsDir,
		"max_concurrent", cfg.MaxConcurrent)

	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
wait:
	for {
		select {
		case err := <-served:
			return fmt.Errorf("serve: %w", err)
		case <-hup:
			reloadAPIs(cfg, &current, reloadProxy, log)
		case <-ctx.Done():
			break wait
		}
	}
	log.Info("shutting down", "grace", shutdownGrace)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownGrace)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		// Long-lived SSE streams never go idle: cut what is left.
		hs.Close()
	}
	<-served
	log.Info("stopped")
	return nil
}

// reloadAPIs re-reads the API configs on SIGHUP. An invalid new set is
// logged and the old one kept, in the server and its in-process proxy alike.
func reloadAPIs(cfg *config, current *atomic.Pointer[apis.Set], reloadProxy func(*apis.Set) error, log *slog.Logger) {
	set, err := cfg.loadAPIs(cfg.APIsDir)
	if err == nil {
		err = reloadProxy(set)
	}
	if err != nil {
		log.Error("API configs not reloaded; keeping the previous ones", "dir", cfg.APIsDir, "err", err)
		return
	}
	current.Store(set)
	log.Info("API configs reloaded", "dir", cfg.APIsDir, "apis", set.Names())
}

// buildLocalBackend starts the in-process proxy on a loopback port and a
// local Deno runner that trusts its CA.
func buildLocalBackend(cfg *config) (sandbox.Runner, *proxy.Proxy, error) {
	deno, err := local.FindDeno(cfg.Getenv)
	if err != nil {
		return nil, nil, fmt.Errorf("local sandbox: %w", err)
	}
	authority, err := ca.LoadOrCreate(filepath.Join(cfg.DataDir, "ca"))
	if err != nil {
		return nil, nil, fmt.Errorf("proxy CA: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, fmt.Errorf("proxy listen: %w", err)
	}
	px, err := proxy.New(proxy.Options{
		PublicURL:             "http://" + ln.Addr().String(),
		APIs:                  cfg.APIs,
		CA:                    authority,
		Settings:              cfg.Settings,
		Logger:                cfg.Logger,
		UpstreamRoots:         cfg.UpstreamRoots,
		AllowPrivateUpstreams: cfg.AllowPrivateUpstreams,
	})
	if err != nil {
		ln.Close()
		return nil, nil, err
	}
	go func() {
		if err := px.Serve(ln); err != nil && !errors.Is(err, net.ErrClosed) && !errors.Is(err, http.ErrServerClosed) {
			cfg.Logger.Error("proxy stopped", "component", "proxy", "err", err)
		}
	}()
	runner, err := local.New(local.Options{
		DenoPath:    deno,
		SkillsDir:   cfg.SkillsDir,
		ScratchRoot: filepath.Join(cfg.DataDir, "scratch"),
		CACertFile:  px.CACertFile(),
		MemoryMB:    cfg.MemoryMB,
		PoolSize:    cfg.PoolSize,
		Logger:      cfg.Logger,
	})
	if err != nil {
		px.Close()
		return nil, nil, err
	}
	return runner, px, nil
}

func networkSummary(g gate.Gate, yolo bool) string {
	switch {
	case g == nil:
		return "none"
	case yolo:
		return "any host (YOLO)"
	default:
		return "API domains only"
	}
}

// parseConfig decodes the flags (each defaulting to its environment
// variable, settings.Flags) into a config, checks it, then provisions what
// it names (files, directories, API configs). Every error names the flag
// and variable to fix.
func parseConfig(args []string, getenv settings.Getenv, stderr io.Writer) (*config, error) {
	fl := settings.NewFlags("codeforge serve", getenv, stderr)
	var (
		addr, backend, apisDir, skillsDir, dataDir, allowedHosts, allowedOrigins, tokenFile string
		maxConcurrent, queueLimit, maxOutput, maxCode, maxTimeout, defTimeout, idleTimeout  string
		memoryMB, poolSize, upstreamCA                                                      string
		runRetention, runsMaxBytes, runFileMax, runFilesMax, inlineImageMax, maxWait        string
		allowPrivate                                                                        bool
	)
	fl.String(&addr, "addr", "CODEFORGE_ADDR", "127.0.0.1:8080", "listen address")
	fl.String(&backend, "sandbox", "SANDBOX_BACKEND", "local", "sandbox backend: local or docker")
	fl.String(&apisDir, "apis-dir", "APIS_DIR", "./apis", "directory of API configs <name>/config.json")
	fl.String(&skillsDir, "skills-dir", "SKILLS_DIR", "./data/skills", "directory of saved skills")
	fl.String(&dataDir, "data-dir", "DATA_DIR", "./data", "directory for the proxy CA and run scratch space")
	fl.String(&allowedHosts, "allowed-hosts", "CODEFORGE_ALLOWED_HOSTS", "", "comma-separated Host values to accept; default localhost names with the listening port")
	fl.String(&allowedOrigins, "allowed-origins", "CODEFORGE_ALLOWED_ORIGINS", "", "comma-separated Origin values to accept; default http://localhost:<port> and http://127.0.0.1:<port>")
	fl.String(&tokenFile, "token-file", "CODEFORGE_TOKEN_FILE", "", "file holding the bearer token clients must send (or set CODEFORGE_TOKEN)")
	fl.String(&maxConcurrent, "max-concurrent", "MAX_CONCURRENT_RUNS", strconv.Itoa(defaultConcurrency()), "runs at once")
	fl.String(&queueLimit, "queue-limit", "MAX_QUEUED_RUNS", strconv.Itoa(server.DefaultQueueLimit), "runs that may wait for a slot before calls get \"server busy\"")
	fl.String(&maxOutput, "max-output", "MAX_OUTPUT_BYTES", strconv.Itoa(server.DefaultMaxOutput), "bytes kept of stdout and of stderr per run")
	fl.String(&maxCode, "max-code-bytes", "MAX_CODE_BYTES", strconv.Itoa(server.DefaultMaxCodeBytes), "largest code accepted, in bytes")
	fl.String(&maxTimeout, "max-timeout", "MAX_TIMEOUT", "300s", "largest timeout a call may ask for, e.g. 300s or 300")
	fl.String(&defTimeout, "default-timeout", "DEFAULT_TIMEOUT", "30s", "timeout of a call that gives none")
	fl.String(&idleTimeout, "session-idle-timeout", "SESSION_IDLE_TIMEOUT", "30m", "close MCP sessions idle this long")
	fl.String(&memoryMB, "memory-mb", "SANDBOX_MEMORY_MB", "512", "memory limit of each run in MB")
	fl.String(&poolSize, "pool-size", "SANDBOX_POOL_SIZE", strconv.Itoa(DefaultPoolSize), "warm Deno processes kept started for the next runs; 0 turns warming off")
	fl.Bool(&allowPrivate, "allow-private-upstreams", "ALLOW_PRIVATE_UPSTREAMS", false, "let the proxy reach loopback and private addresses")
	fl.String(&runRetention, "run-retention", "RUN_RETENTION", "24h", "how long ended runs are kept")
	fl.String(&runsMaxBytes, "runs-max-bytes", "RUNS_MAX_BYTES", strconv.Itoa(runs.DefaultMaxTotalBytes), "output and files of all kept runs together, in bytes; the oldest go first")
	fl.String(&runFileMax, "run-file-max-bytes", "RUN_FILE_MAX_BYTES", strconv.Itoa(runs.DefaultMaxFileBytes), "largest file kept from a run's out/")
	fl.String(&runFilesMax, "run-files-max-bytes", "RUN_FILES_MAX_BYTES", strconv.Itoa(runs.DefaultMaxRunBytes), "most bytes of files kept per run")
	fl.String(&inlineImageMax, "inline-image-max-bytes", "INLINE_IMAGE_MAX_BYTES", strconv.Itoa(server.DefaultInlineImageBytes), "images up to this size come back inline")
	fl.String(&maxWait, "max-wait", "MAX_WAIT", "120s", "longest run_wait timeout a call may ask for")
	fl.String(&upstreamCA, "upstream-ca", "UPSTREAM_CA", "", "PEM file of extra CA certificates the proxy trusts for upstream APIs")
	if err := fl.Parse(args); err != nil {
		return nil, err
	}

	common, err := settings.FromEnv(getenv)
	if err != nil {
		return nil, fmt.Errorf("settings: %w", err)
	}
	cfg := &config{
		Addr:                  addr,
		Backend:               backend,
		APIsDir:               apisDir,
		AllowedHosts:          settings.SplitList(allowedHosts),
		AllowedOrigins:        settings.SplitList(allowedOrigins),
		UpstreamCAFile:        upstreamCA,
		AllowPrivateUpstreams: allowPrivate,
		Settings:              common,
		Getenv:                getenv,
		Logger:                settings.NewLogger(stderr, common.Debug),
	}
	if cfg.Backend != "local" && cfg.Backend != "docker" {
		return nil, fmt.Errorf("--sandbox (SANDBOX_BACKEND) is %q: want local or docker", cfg.Backend)
	}
	if cfg.Backend == "local" && common.YOLO {
		return nil, fmt.Errorf("--sandbox local (SANDBOX_BACKEND) with YOLO_MODE=true: %w", local.ErrAllHosts)
	}
	if _, _, err := net.SplitHostPort(cfg.Addr); err != nil {
		return nil, fmt.Errorf("--addr (CODEFORGE_ADDR) is %q: want host:port, e.g. 127.0.0.1:8080", cfg.Addr)
	}
	ints := []struct {
		dst       *int
		val, name string
		min       int
	}{
		{&cfg.MaxConcurrent, maxConcurrent, "--max-concurrent (MAX_CONCURRENT_RUNS)", 1},
		{&cfg.QueueLimit, queueLimit, "--queue-limit (MAX_QUEUED_RUNS)", 1},
		{&cfg.MaxOutput, maxOutput, "--max-output (MAX_OUTPUT_BYTES)", 1024},
		{&cfg.MaxCodeBytes, maxCode, "--max-code-bytes (MAX_CODE_BYTES)", 1024},
		{&cfg.MemoryMB, memoryMB, "--memory-mb (SANDBOX_MEMORY_MB)", 16},
		{&cfg.PoolSize, poolSize, "--pool-size (SANDBOX_POOL_SIZE)", 0},
	}
	for _, f := range ints {
		n, err := strconv.Atoi(strings.TrimSpace(f.val))
		if err != nil || n < f.min {
			return nil, fmt.Errorf("%s is %q: want a whole number of at least %d", f.name, f.val, f.min)
		}
		*f.dst = n
	}
	int64s := []struct {
		dst       *int64
		val, name string
		min       int64
	}{
		{&cfg.RunsMaxBytes, runsMaxBytes, "--runs-max-bytes (RUNS_MAX_BYTES)", 1 << 20},
		{&cfg.RunFileMaxBytes, runFileMax, "--run-file-max-bytes (RUN_FILE_MAX_BYTES)", 1},
		{&cfg.RunFilesMaxBytes, runFilesMax, "--run-files-max-bytes (RUN_FILES_MAX_BYTES)", 1},
		{&cfg.InlineImageBytes, inlineImageMax, "--inline-image-max-bytes (INLINE_IMAGE_MAX_BYTES)", 1},
	}
	for _, f := range int64s {
		n, err := strconv.ParseInt(strings.TrimSpace(f.val), 10, 64)
		if err != nil || n < f.min {
			return nil, fmt.Errorf("%s is %q: want a whole number of bytes, at least %d", f.name, f.val, f.min)
		}
		*f.dst = n
	}
	durations := []struct {
		dst       *time.Duration
		val, name string
	}{
		{&cfg.MaxTimeout, maxTimeout, "--max-timeout (MAX_TIMEOUT)"},
		{&cfg.DefaultTimeout, defTimeout, "--default-timeout (DEFAULT_TIMEOUT)"},
		{&cfg.SessionIdleTimeout, idleTimeout, "--session-idle-timeout (SESSION_IDLE_TIMEOUT)"},
		{&cfg.RunRetention, runRetention, "--run-retention (RUN_RETENTION)"},
		{&cfg.MaxWait, maxWait, "--max-wait (MAX_WAIT)"},
	}
	for _, d := range durations {
		v, err := parseDuration(d.val)
		if err != nil {
			return nil, fmt.Errorf("%s is %q: want seconds (300) or a duration (5m)", d.name, d.val)
		}
		*d.dst = v
	}
	if cfg.DefaultTimeout > cfg.MaxTimeout {
		return nil, fmt.Errorf("--default-timeout (DEFAULT_TIMEOUT) %s is over --max-timeout (MAX_TIMEOUT) %s", cfg.DefaultTimeout, cfg.MaxTimeout)
	}
	if err := cfg.provision(tokenFile, dataDir, skillsDir); err != nil {
		return nil, err
	}
	return cfg, nil
}

// provision reads the files and makes the directories a checked
// configuration names: the bearer token, the upstream CA, the data and
// skills directories, and the API configs (with their secrets on the
// local backend, token names only on docker).
func (cfg *config) provision(tokenFile, dataDir, skillsDir string) error {
	var err error
	if cfg.Token, err = readToken(tokenFile, cfg.Getenv); err != nil {
		return err
	}
	if cfg.UpstreamCAFile != "" {
		if cfg.UpstreamRoots, err = ca.LoadUpstreamRoots(cfg.UpstreamCAFile); err != nil {
			return fmt.Errorf("--upstream-ca (UPSTREAM_CA): %w", err)
		}
	}
	if cfg.DataDir, err = ensureDir(dataDir, "--data-dir (DATA_DIR)", 0o700); err != nil {
		return err
	}
	if cfg.SkillsDir, err = ensureDir(skillsDir, "--skills-dir (SKILLS_DIR)", 0o755); err != nil {
		return err
	}
	// The Docker deployment keeps every secret in the proxy container: its
	// server reads token names only. The local backend's in-process proxy
	// needs the values.
	cfg.loadAPIs = func(dir string) (*apis.Set, error) { return apis.Load(dir, cfg.Getenv) }
	if cfg.Backend == "docker" {
		cfg.loadAPIs = apis.LoadNames
	}
	if cfg.APIs, err = cfg.loadAPIs(cfg.APIsDir); err != nil {
		return fmt.Errorf("API configs in %s (--apis-dir, APIS_DIR):\n%w", cfg.APIsDir, err)
	}
	return nil
}

func defaultConcurrency() int {
	return max(1, runtime.NumCPU())
}

// readToken takes the bearer token from CODEFORGE_TOKEN or the token file
// (not both, so no one wonders which one applies).
func readToken(file string, getenv settings.Getenv) (string, error) {
	fromEnv, _ := getenv("CODEFORGE_TOKEN")
	fromEnv = strings.TrimSpace(fromEnv)
	if file == "" {
		return fromEnv, nil
	}
	if fromEnv != "" {
		return "", errors.New("both CODEFORGE_TOKEN and --token-file (CODEFORGE_TOKEN_FILE) are set: keep one")
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("--token-file (CODEFORGE_TOKEN_FILE): %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("--token-file (CODEFORGE_TOKEN_FILE) %s is empty: put the token in it", file)
	}
	return tok, nil
}

// ensureDir makes dir (and parents) when missing and returns its absolute path.
func ensureDir(dir, what string, perm os.FileMode) (string, error) {
	if strings.TrimSpace(dir) == "" {
		return "", fmt.Errorf("%s is empty: give a directory", what)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("%s: %w", what, err)
	}
	if err := os.MkdirAll(abs, perm); err != nil {
		return "", fmt.Errorf("%s: %w", what, err)
	}
	return abs, nil
}

// parseDuration accepts plain seconds ("300", "2.5") or a Go duration ("5m").
func parseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if sec, err := strconv.ParseFloat(s, 64); err == nil {
		if sec <= 0 {
			return 0, errors.New("not positive")
		}
		return time.Duration(sec * float64(time.Second)), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, errors.New("not a positive duration")
	}
	return d, nil
}
