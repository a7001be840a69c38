package server

import (
	"context"
	"crypto/x509"
	"errors"
	"flag"
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
	"github.com/codeforge/codeforge/runs"
	"github.com/codeforge/codeforge/sandbox"
	"github.com/codeforge/codeforge/sandbox/local"
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

// shutdownGrace bounds how long serve waits for requests in flight when
// its context is cancelled.
const shutdownGrace = 10 * time.Second

// Command runs `codeforge serve`: the MCP server on --addr with the chosen
// sandbox backend. It returns when ctx is cancelled (after a graceful
// shutdown) or when the server cannot start or keep serving.
func Command(ctx context.Context, args []string, getenv settings.Getenv, stderr io.Writer) error {
	cfg, err := parseConfig(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	log := cfg.Logger.With("component", "serve")

	var (
		runner sandbox.Runner
		gate   proxy.Gate
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
		gate, reloadProxy = px, px.Reload
	case "docker":
		runner, gate, err = buildDockerBackend(ctx, cfg)
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
	srv, err := New(Options{
		Runner:             runner,
		Gate:               gate,
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
		"network", networkSummary(gate, cfg.Settings.YOLO),
		"token", cfg.Token != "",
		"skills_dir", cfg.SkillsDir,
		"max_concurrent", srv.opts.MaxConcurrent)

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
		Logger:      cfg.Logger,
	})
	if err != nil {
		px.Close()
		return nil, nil, err
	}
	return runner, px, nil
}

func networkSummary(gate proxy.Gate, yolo bool) string {
	switch {
	case gate == nil:
		return "none"
	case yolo:
		return "any host (YOLO)"
	default:
		return "API domains only"
	}
}

// parseConfig reads flags, each defaulting to its environment variable,
// then validates and prepares directories. Every error names the flag and
// variable to fix.
func parseConfig(args []string, getenv settings.Getenv, stderr io.Writer) (*config, error) {
	env := func(name, def string) string {
		if v, ok := getenv(name); ok && strings.TrimSpace(v) != "" {
			return strings.TrimSpace(v)
		}
		return def
	}
	fs := flag.NewFlagSet("codeforge serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		addr           = fs.String("addr", env("CODEFORGE_ADDR", "127.0.0.1:8080"), "listen address (CODEFORGE_ADDR)")
		backend        = fs.String("sandbox", env("SANDBOX_BACKEND", "local"), "sandbox backend: local or docker (SANDBOX_BACKEND)")
		apisDir        = fs.String("apis-dir", env("APIS_DIR", "./apis"), "directory of API configs <name>/config.json (APIS_DIR)")
		skillsDir      = fs.String("skills-dir", env("SKILLS_DIR", "./data/skills"), "directory of saved skills (SKILLS_DIR)")
		dataDir        = fs.String("data-dir", env("DATA_DIR", "./data"), "directory for the proxy CA and run scratch space (DATA_DIR)")
		allowedHosts   = fs.String("allowed-hosts", env("CODEFORGE_ALLOWED_HOSTS", ""), "comma-separated Host values to accept; default localhost names with the listening port (CODEFORGE_ALLOWED_HOSTS)")
		allowedOrigins = fs.String("allowed-origins", env("CODEFORGE_ALLOWED_ORIGINS", ""), "comma-separated Origin values to accept; default http://localhost:<port> and http://127.0.0.1:<port> (CODEFORGE_ALLOWED_ORIGINS)")
		tokenFile      = fs.String("token-file", env("CODEFORGE_TOKEN_FILE", ""), "file holding the bearer token clients must send (CODEFORGE_TOKEN_FILE; or set CODEFORGE_TOKEN)")
		maxConcurrent  = fs.String("max-concurrent", env("MAX_CONCURRENT_RUNS", strconv.Itoa(defaultConcurrency())), "runs at once (MAX_CONCURRENT_RUNS)")
		queueLimit     = fs.String("queue-limit", env("MAX_QUEUED_RUNS", strconv.Itoa(DefaultQueueLimit)), "runs that may wait for a slot before calls get \"server busy\" (MAX_QUEUED_RUNS)")
		maxOutput      = fs.String("max-output", env("MAX_OUTPUT_BYTES", strconv.Itoa(DefaultMaxOutput)), "bytes kept of stdout and of stderr per run (MAX_OUTPUT_BYTES)")
		maxCode        = fs.String("max-code-bytes", env("MAX_CODE_BYTES", strconv.Itoa(DefaultMaxCodeBytes)), "largest code accepted, in bytes (MAX_CODE_BYTES)")
		maxTimeout     = fs.String("max-timeout", env("MAX_TIMEOUT", "300s"), "largest timeout a call may ask for, e.g. 300s or 300 (MAX_TIMEOUT)")
		defTimeout     = fs.String("default-timeout", env("DEFAULT_TIMEOUT", "30s"), "timeout of a call that gives none (DEFAULT_TIMEOUT)")
		idleTimeout    = fs.String("session-idle-timeout", env("SESSION_IDLE_TIMEOUT", "30m"), "close MCP sessions idle this long (SESSION_IDLE_TIMEOUT)")
		memoryMB       = fs.String("memory-mb", env("SANDBOX_MEMORY_MB", "512"), "memory limit of each run in MB (SANDBOX_MEMORY_MB)")
		allowPrivate   = fs.String("allow-private-upstreams", env("ALLOW_PRIVATE_UPSTREAMS", "false"), "let the proxy reach loopback and private addresses (ALLOW_PRIVATE_UPSTREAMS)")
		runRetention   = fs.String("run-retention", env("RUN_RETENTION", "24h"), "how long ended runs are kept (RUN_RETENTION)")
		runsMaxBytes   = fs.String("runs-max-bytes", env("RUNS_MAX_BYTES", strconv.Itoa(runs.DefaultMaxTotalBytes)), "output and files of all kept runs together, in bytes; the oldest go first (RUNS_MAX_BYTES)")
		runFileMax     = fs.String("run-file-max-bytes", env("RUN_FILE_MAX_BYTES", strconv.Itoa(runs.DefaultMaxFileBytes)), "largest file kept from a run's out/ (RUN_FILE_MAX_BYTES)")
		runFilesMax    = fs.String("run-files-max-bytes", env("RUN_FILES_MAX_BYTES", strconv.Itoa(runs.DefaultMaxRunBytes)), "most bytes of files kept per run (RUN_FILES_MAX_BYTES)")
		inlineImageMax = fs.String("inline-image-max-bytes", env("INLINE_IMAGE_MAX_BYTES", strconv.Itoa(DefaultInlineImageBytes)), "images up to this size come back inline (INLINE_IMAGE_MAX_BYTES)")
		maxWait        = fs.String("max-wait", env("MAX_WAIT", "120s"), "longest run_wait timeout a call may ask for (MAX_WAIT)")
		upstreamCA     = fs.String("upstream-ca", env("UPSTREAM_CA", ""), "PEM file of extra CA certificates the proxy trusts for upstream APIs (UPSTREAM_CA)")
	)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("serve: unexpected argument %q (flags only; see codeforge serve -h)", fs.Arg(0))
	}

	common, err := settings.FromEnv(getenv)
	if err != nil {
		return nil, fmt.Errorf("settings: %w", err)
	}
	cfg := &config{
		Addr:           *addr,
		Backend:        *backend,
		APIsDir:        *apisDir,
		AllowedHosts:   splitList(*allowedHosts),
		AllowedOrigins: splitList(*allowedOrigins),
		UpstreamCAFile: *upstreamCA,
		Settings:       common,
		Getenv:         getenv,
		Logger:         settings.NewLogger(stderr, common.Debug),
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
		{&cfg.MaxConcurrent, *maxConcurrent, "--max-concurrent (MAX_CONCURRENT_RUNS)", 1},
		{&cfg.QueueLimit, *queueLimit, "--queue-limit (MAX_QUEUED_RUNS)", 1},
		{&cfg.MaxOutput, *maxOutput, "--max-output (MAX_OUTPUT_BYTES)", 1024},
		{&cfg.MaxCodeBytes, *maxCode, "--max-code-bytes (MAX_CODE_BYTES)", 1024},
		{&cfg.MemoryMB, *memoryMB, "--memory-mb (SANDBOX_MEMORY_MB)", 16},
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
		{&cfg.RunsMaxBytes, *runsMaxBytes, "--runs-max-bytes (RUNS_MAX_BYTES)", 1 << 20},
		{&cfg.RunFileMaxBytes, *runFileMax, "--run-file-max-bytes (RUN_FILE_MAX_BYTES)", 1},
		{&cfg.RunFilesMaxBytes, *runFilesMax, "--run-files-max-bytes (RUN_FILES_MAX_BYTES)", 1},
		{&cfg.InlineImageBytes, *inlineImageMax, "--inline-image-max-bytes (INLINE_IMAGE_MAX_BYTES)", 1},
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
		{&cfg.MaxTimeout, *maxTimeout, "--max-timeout (MAX_TIMEOUT)"},
		{&cfg.DefaultTimeout, *defTimeout, "--default-timeout (DEFAULT_TIMEOUT)"},
		{&cfg.SessionIdleTimeout, *idleTimeout, "--session-idle-timeout (SESSION_IDLE_TIMEOUT)"},
		{&cfg.RunRetention, *runRetention, "--run-retention (RUN_RETENTION)"},
		{&cfg.MaxWait, *maxWait, "--max-wait (MAX_WAIT)"},
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
	if cfg.AllowPrivateUpstreams, err = strconv.ParseBool(*allowPrivate); err != nil {
		return nil, fmt.Errorf("--allow-private-upstreams (ALLOW_PRIVATE_UPSTREAMS) is %q: want true or false", *allowPrivate)
	}

	if cfg.Token, err = readToken(*tokenFile, getenv); err != nil {
		return nil, err
	}
	if cfg.UpstreamCAFile != "" {
		if cfg.UpstreamRoots, err = loadRoots(cfg.UpstreamCAFile); err != nil {
			return nil, err
		}
	}
	if cfg.DataDir, err = ensureDir(*dataDir, "--data-dir (DATA_DIR)", 0o700); err != nil {
		return nil, err
	}
	if cfg.SkillsDir, err = ensureDir(*skillsDir, "--skills-dir (SKILLS_DIR)", 0o755); err != nil {
		return nil, err
	}
	// The Docker deployment keeps every secret in the proxy container: its
	// server reads token names only. The local backend's in-process proxy
	// needs the values.
	cfg.loadAPIs = func(dir string) (*apis.Set, error) { return apis.Load(dir, getenv) }
	if cfg.Backend == "docker" {
		cfg.loadAPIs = apis.LoadNames
	}
	if cfg.APIs, err = cfg.loadAPIs(cfg.APIsDir); err != nil {
		return nil, fmt.Errorf("API configs in %s (--apis-dir, APIS_DIR):\n%w", cfg.APIsDir, err)
	}
	return cfg, nil
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

func loadRoots(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("--upstream-ca (UPSTREAM_CA): %w", err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("--upstream-ca (UPSTREAM_CA) %s holds no PEM certificate", file)
	}
	return pool, nil
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

func splitList(s string) []string {
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
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
