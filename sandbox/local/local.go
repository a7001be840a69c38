// Package local is the sandbox backend that needs no Docker: each run is a
// fresh `deno run` subprocess on the server's own machine, confined by
// Deno's permission flags (reads and writes only in its scratch and skills
// directories, network only to the hosts the run allows — never to every
// host, see ErrAllHosts — no environment,
// subprocesses, FFI or system information), a minimal explicit
// environment that carries none of the server's secrets, a V8 heap cap and
// a data-size limit, a timeout that kills its whole process group, and
// capped output. It runs on Linux.
package local

import (
	"bytes"
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/codeforge/codeforge/sandbox"
	"github.com/codeforge/codeforge/sandbox/output"
	"github.com/codeforge/codeforge/sandbox/runpolicy"
	"github.com/codeforge/codeforge/sandbox/warmpool"
	"github.com/codeforge/codeforge/settings"
)

// Defaults for Options and Request fields left zero.
const (
	DefaultMemoryMB      = 512
	DefaultExtraMemoryMB = 1024
	DefaultMaxOutput     = 1 << 20
)

// ScratchNote is what Env says of the scratch directory: each
// run gets a fresh directory as its working directory, so code reaches it
// with relative paths or Deno.cwd().
const ScratchNote = "the current working directory (Deno.cwd()), a fresh directory per run"

// OutDirDescription is what Env reports as the directory of files kept
// with the run.
const OutDirDescription = "out/ in the current working directory"

// errNoDeno is FindDeno's answer when no deno binary is found anywhere.
var errNoDeno = errors.New(`deno not found: install it with "npm install --prefix .cache/deno @deno/linux-x64-glibc@2.9.6" or run ./run.sh`)

// errRunTimeout is the cause of a run context whose own timeout fired.
var errRunTimeout = errors.New("run timed out")

// stderrTail is how much of the end of stderr is kept to look for V8's
// out-of-memory report, even when stderr overflowed its cap.
const stderrTail = 8 << 10

// waitDelay bounds how long Wait waits for output pipes after the process
// is gone or killed (only a stray descendant could hold them open).
const waitDelay = 5 * time.Second

// Options configures a Runner. DenoPath and SkillsDir are required.
type Options struct {
	// DenoPath is the deno executable (see FindDeno).
	DenoPath string
	// SkillsDir is the absolute path of the skills directory; runs may read
	// and write it. It must exist.
	SkillsDir string
	// ScratchRoot is the parent of the per-run scratch directories; it is
	// created (0700) when missing. Default: os.TempDir()/codeforge-runs.
	ScratchRoot string
	// CACertFile is a PEM file of the proxy's CA certificate, which Deno
	// must trust (DENO_CERT). Optional.
	CACertFile string
	// MemoryMB caps the V8 heap of each run. Default DefaultMemoryMB.
	MemoryMB int
	// ExtraMemoryMB is the memory a run may use beyond its V8 heap:
	// ArrayBuffers, compiled code and deno itself, which alone reserves
	// about 550 MB. Each run's data size (RLIMIT_DATA) is capped at
	// MemoryMB+ExtraMemoryMB, so off-heap allocations fail instead of
	// exhausting the machine. Default DefaultExtraMemoryMB.
	ExtraMemoryMB int
	// PoolSize is how many warm deno processes the runner keeps started
	// and waiting for a run (each serves one run, then is replaced in the
	// background). 0 turns warming off: every run starts cold. A run no
	// warm process can serve (the pool is empty, or the run needs a
	// permission the warm processes were not started with) starts cold.
	PoolSize int
	// Logger receives lifecycle logs; nil logs nothing.
	Logger *slog.Logger
}

// Runner runs code in local Deno subprocesses. It implements
// sandbox.Runner and is safe for concurrent use.
type Runner struct {
	deno        string
	skillsDir   string
	scratchRoot string
	caCert      string
	memoryMB    int
	dataLimit   uint64 // RLIMIT_DATA of each run, in bytes
	log         *slog.Logger

	readyMu sync.Mutex
	ready   bool
	closed  atomic.Bool

	pool *warmpool.Pool[*warmProc]
	bg   sync.WaitGroup // removals of answered warm runs
}

var _ sandbox.Runner = (*Runner)(nil)

// New checks opts and returns a Runner. It creates ScratchRoot and DenoDir
// when missing and nothing else.
func New(opts Options) (*Runner, error) {
	if opts.DenoPath == "" {
		return nil, errors.New("local sandbox: DenoPath is required (see local.FindDeno)")
	}
	if err := checkExecutable(opts.DenoPath); err != nil {
		return nil, fmt.Errorf("local sandbox: deno %w", err)
	}
	skills, err := existingDir("SkillsDir", opts.SkillsDir)
	if err != nil {
		return nil, fmt.Errorf("local sandbox: %w", err)
	}
	if opts.MemoryMB < 0 {
		return nil, fmt.Errorf("local sandbox: MemoryMB is %d: want a positive number of megabytes, or 0 for the default %d", opts.MemoryMB, DefaultMemoryMB)
	}
	if opts.ExtraMemoryMB < 0 {
		return nil, fmt.Errorf("local sandbox: ExtraMemoryMB is %d: want a positive number of megabytes, or 0 for the default %d", opts.ExtraMemoryMB, DefaultExtraMemoryMB)
	}
	caCert := ""
	if opts.CACertFile != "" {
		if caCert, err = checkCACert(opts.CACertFile); err != nil {
			return nil, fmt.Errorf("local sandbox: %w", err)
		}
	}
	scratchRoot := opts.ScratchRoot
	if scratchRoot == "" {
		scratchRoot = filepath.Join(os.TempDir(), "codeforge-runs")
	}
	if !filepath.IsAbs(scratchRoot) || strings.Contains(scratchRoot, ",") {
		return nil, fmt.Errorf("local sandbox: ScratchRoot %q must be an absolute path without commas", scratchRoot)
	}
	// Only now, with every option valid, touch the filesystem.
	if err := os.MkdirAll(scratchRoot, 0o700); err != nil {
		return nil, fmt.Errorf("local sandbox: create scratch root: %w", err)
	}
	if scratchRoot, err = filepath.EvalSymlinks(scratchRoot); err != nil {
		return nil, fmt.Errorf("local sandbox: scratch root: %w", err)
	}
	memoryMB := opts.MemoryMB
	if memoryMB == 0 {
		memoryMB = DefaultMemoryMB
	}
	extraMB := opts.ExtraMemoryMB
	if extraMB == 0 {
		extraMB = DefaultExtraMemoryMB
	}
	if opts.PoolSize < 0 || opts.PoolSize > MaxPoolSize {
		return nil, fmt.Errorf("local sandbox: PoolSize is %d: want 0 (no warm processes) to %d", opts.PoolSize, MaxPoolSize)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Runner{
		deno:        opts.DenoPath,
		skillsDir:   skills,
		scratchRoot: scratchRoot,
		caCert:      caCert,
		memoryMB:    memoryMB,
		dataLimit:   uint64(memoryMB+extraMB) << 20,
		log:         log.With("component", "sandbox", "backend", "local"),
	}
	r.pool = warmpool.New(opts.PoolSize, r.startWarm, r.log)
	return r, nil
}

// MaxPoolSize bounds Options.PoolSize.
const MaxPoolSize = 64

// WarmIdle reports how many warm processes are waiting for a run.
func (r *Runner) WarmIdle() int { return r.pool.Idle() }

// Env describes what runs see.
func (r *Runner) Env() sandbox.Environment {
	return sandbox.Environment{
		Backend:     "local",
		ScratchNote: ScratchNote,
		SkillsDir:   r.skillsDir,
		OutDir:      OutDirDescription,
	}
}

// Ready checks once that deno starts; a success is remembered.
func (r *Runner) Ready(ctx context.Context) error {
	if r.closed.Load() {
		return errors.New("local sandbox is closed")
	}
	r.readyMu.Lock()
	defer r.readyMu.Unlock()
	if r.ready {
		return nil
	}
	dir, err := os.MkdirTemp(r.scratchRoot, "check-")
	if err != nil {
		return fmt.Errorf("starting: %w", r.scratchError(r.scratchRoot, err))
	}
	defer os.RemoveAll(dir)
	cmd := exec.CommandContext(ctx, r.deno, "--version")
	cmd.Env = runpolicy.Env(runpolicy.Spec{Scratch: dir, DenoDir: dir})
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("starting: %s --version: %w: %s", r.deno, err, bytes.TrimSpace(out))
	}
	if !bytes.HasPrefix(out, []byte("deno ")) {
		return fmt.Errorf("starting: %s --version printed %q, not a deno version", r.deno, firstLine(out))
	}
	r.ready = true
	return nil
}

// Close refuses further runs and ends the warm processes. Runs in
// progress finish normally.
func (r *Runner) Close() error {
	r.closed.Store(true)
	r.pool.Close()
	r.bg.Wait()
	return nil
}

// ErrAllHosts refuses unrestricted network (YOLO mode) on this backend.
// Deno has one network permission for fetch and raw sockets: granting
// every host lets run code open TCP connections with Deno.connect to
// loopback services, link-local addresses and private networks, around the
// proxy. Deno's --deny-net does check resolved addresses and CIDR ranges,
// but it cannot exempt the proxy's own loopback port, which every run
// needs, so no deny list can make this safe. The Docker deployment, whose
// sandbox's only route out is the proxy, runs YOLO mode.
var ErrAllHosts = errors.New("YOLO_MODE is not available with the local sandbox backend: Deno's --allow-net would also let run code " +
	"open raw TCP connections (Deno.connect) to this machine's loopback services, link-local addresses such as 169.254.169.254 " +
	"(a cloud machine's credential service) and private networks, around the proxy. Run YOLO mode on the Docker deployment " +
	"(--sandbox docker, see README: Docker), or set YOLO_MODE=false and add the hosts the code needs as API domains")

// Run executes req.Code in a fresh deno process. Timeout, out of memory and
// non-zero exit are reported in the Result; an error means the run could
// not be attempted, or ctx ended before it finished (the process is killed
// and the error wraps ctx.Err()).
func (r *Runner) Run(ctx context.Context, req sandbox.Request) (*sandbox.Result, error) {
	if r.closed.Load() {
		return nil, errors.New("local sandbox is closed")
	}
	if err := checkRequest(req); err != nil {
		return nil, err
	}
	defer r.pool.Run()()
	maxOutput := req.MaxOutput
	if maxOutput == 0 {
		maxOutput = DefaultMaxOutput
	}
	id, err := sandbox.NewRunID()
	if err != nil {
		return nil, err
	}
	scratch := filepath.Join(r.scratchRoot, "run-"+id)
	spec := runpolicy.Spec{
		Scratch:   scratch,
		DenoDir:   runpolicy.CacheDir(scratch),
		Skills:    r.skillsDir,
		ReadPaths: req.ReadPaths,
		// Never AllHosts (a bare --allow-net): checkRequest refused
		// it, see ErrAllHosts.
		Hosts:    req.AllowHosts,
		MemoryMB: r.memoryMB,
		ProxyURL: req.ProxyURL,
		CACert:   r.caCert,
	}
	if w, ok := r.pool.Take(warmKey(spec)); ok {
		claim, _ := runpolicy.Covers(w.spec, spec) // the run's proxy, and what it may not have
		res, err := r.runWarm(ctx, w, claim, req, maxOutput)
		if !errors.Is(err, errWarmUnusable) {
			return res, err
		}
	}
	defer r.removeRun(id, scratch)
	for _, dir := range []string{spec.Scratch, spec.DenoDir} {
		if err := os.Mkdir(dir, 0o700); err != nil {
			return nil, r.scratchError(dir, err)
		}
	}

	runCtx, cancel := context.WithTimeoutCause(ctx, req.Timeout, errRunTimeout)
	defer cancel()
	cmd := exec.CommandContext(runCtx, r.deno, runpolicy.Args(spec)...)
	cmd.Dir = scratch
	cmd.Env = runpolicy.Env(spec)
	// The code goes in through a pipe only once the run's memory limit is
	// set: deno runs nothing before it has read all of its stdin.
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("stdin pipe: %w", err)
	}
	stdout := output.NewCollector(output.Options{Limit: maxOutput, OnLine: req.OnStdoutLine})
	stderr := output.NewCollector(output.Options{Limit: maxOutput, OnLine: req.OnStderrLine})
	tail := output.NewTail(stderrTail)
	cmd.Stdout = stdout
	cmd.Stderr = io.MultiWriter(stderr, tail)
	// Its own process group, so a kill reaches everything it started; and
	// killed with the server if the server dies first (Pdeathsig follows
	// the forking OS thread, which Go keeps alive unless a goroutine exits
	// while locked to it; nothing in the server does that).
	cmd.SysProcAttr = runProcAttr()
	var killed atomic.Bool
	cmd.Cancel = func() error {
		killed.Store(true)
		return killGroup(cmd.Process.Pid)
	}
	cmd.WaitDelay = waitDelay

	r.log.Info("start", "run", id, "timeout", req.Timeout, "network", req.NetworkMode())
	start := time.Now()
	if err := cmd.Start(); err != nil {
		r.log.Warn("start failed", "run", id, "err", err)
		switch {
		case ctx.Err() != nil:
			return nil, fmt.Errorf("run canceled: %w", ctx.Err())
		case context.Cause(runCtx) == errRunTimeout:
			// The timeout was too short to even start deno.
			return &sandbox.Result{ExitCode: -1, TimedOut: true, Duration: time.Since(start)}, nil
		}
		return nil, fmt.Errorf("start deno: %w", err)
	}
	if err := limitData(cmd.Process.Pid, r.dataLimit); err != nil {
		_ = killGroup(cmd.Process.Pid)
		_ = cmd.Wait()
		r.log.Warn("memory limit failed", "run", id, "err", err)
		return nil, fmt.Errorf("limit deno's memory: %w", err)
	}
	go func() {
		// An error means deno is gone (Wait closes the pipe); its result says why.
		_, _ = io.WriteString(stdin, req.Code)
		_ = stdin.Close()
	}()
	waitErr := cmd.Wait()
	duration := time.Since(start)
	if errors.Is(waitErr, exec.ErrWaitDelay) {
		// Something outlived deno and held its output open: end it too. The
		// group still has a member, so its id cannot have been reused.
		_ = killGroup(cmd.Process.Pid)
	}
	stdout.Close()
	stderr.Close()
	if req.OnOutDir != nil && ctx.Err() == nil {
		// deno is gone (Wait returned; on a timeout or a straggler its
		// whole group was killed, and it may start no process of its
		// own): nothing writes to out/ any more.
		req.OnOutDir(filepath.Join(scratch, "out"), nil)
	}
	state := cmd.ProcessState
	if state == nil {
		return nil, fmt.Errorf("wait for deno: %w", waitErr)
	}
	res := sandbox.NewResult(stdout, stderr, exitCode(state), duration)
	res.TimedOut = killed.Load() && context.Cause(runCtx) == errRunTimeout
	res.OutOfMemory = !killed.Load() && isOOM(state, tail.String())
	r.logDone(id, res, stdout, stderr)
	if killed.Load() && !res.TimedOut {
		return nil, fmt.Errorf("run canceled: %w", ctx.Err())
	}
	r.pool.ColdOK()
	return res, nil
}

// logDone logs a run's end; a warm run answered at its end line (before
// deno exited) says early=true.
func (r *Runner) logDone(id string, res *sandbox.Result, stdout, stderr *output.Collector, more ...any) {
	r.log.Info("done", append([]any{"run", id, "duration", res.Duration, "exit_code", res.ExitCode,
		"timed_out", res.TimedOut, "oom", res.OutOfMemory,
		"stdout_bytes", stdout.Len(), "stderr_bytes", stderr.Len(), "dropped_bytes", res.DroppedBytes}, more...)...)
}

// checkRequest refuses a request the runner cannot honour exactly.
func checkRequest(req sandbox.Request) error {
	if req.AllowAllHosts {
		return ErrAllHosts
	}
	if req.Timeout <= 0 {
		return fmt.Errorf("timeout is %v: want a positive duration", req.Timeout)
	}
	if req.MaxOutput < 0 {
		return fmt.Errorf("max output is %d bytes: want a positive number, or 0 for the default %d", req.MaxOutput, DefaultMaxOutput)
	}
	for _, h := range req.AllowHosts {
		if err := runpolicy.CheckHost(h); err != nil {
			return err
		}
	}
	for _, p := range req.ReadPaths {
		if err := runpolicy.CheckReadPath(p); err != nil {
			return err
		}
	}
	if req.ProxyURL != "" {
		if err := runpolicy.CheckProxyURL(req.ProxyURL); err != nil {
			return err
		}
	}
	return nil
}

// BareCommand is a `deno run` of code with the flags and environment a
// Runner uses for a run with no network, with dir as its scratch, skills
// and cache directory, and none of a Runner's bookkeeping: the baseline for
// benchmarks of a Runner's (or the server's) overhead.
func BareCommand(ctx context.Context, denoPath, dir, code string) *exec.Cmd {
	spec := runpolicy.Spec{Scratch: dir, DenoDir: filepath.Join(dir, "deno-dir"), Skills: dir, MemoryMB: DefaultMemoryMB}
	cmd := exec.CommandContext(ctx, denoPath, runpolicy.Args(spec)...)
	cmd.Dir = dir
	cmd.Env = runpolicy.Env(spec)
	cmd.Stdin = strings.NewReader(code)
	return cmd
}

// killGroup sends SIGKILL to the process group led by pid.
func killGroup(pid int) error {
	err := syscall.Kill(-pid, syscall.SIGKILL)
	if errors.Is(err, syscall.ESRCH) {
		return os.ErrProcessDone
	}
	return err
}

// exitCode is the process's exit status, or 128+signal (as a shell reports
// it) when a signal ended it.
func exitCode(state *os.ProcessState) int {
	if ws, ok := state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return state.ExitCode()
}

// isOOM reports whether V8 aborted on its heap cap: the process died of a
// signal (V8 traps or aborts; code cannot signal itself without --allow-run,
// so printing the message alone does not count) and stderr ends with V8's
// report.
func isOOM(state *os.ProcessState, stderrTail string) bool {
	ws, ok := state.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() {
		return false
	}
	return sandbox.HasV8OOMMarker(stderrTail)
}

// removeRun deletes a run's scratch and cache directories.
func (r *Runner) removeRun(id, scratch string) {
	if err := runpolicy.RemoveRun(scratch); err != nil {
		r.log.Warn("remove run files", "run", id, "err", err)
	}
}

// scratchError words a failure to create a run's directory or file; a
// full filesystem says so plainly, naming the scratch root.
func (r *Runner) scratchError(path string, err error) error {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return fmt.Errorf("the filesystem of the scratch root %s is full (no space or no inodes left on device): cannot create %s; free space there (the server keeps it under its data directory: --data-dir, DATA_DIR)", r.scratchRoot, path)
	}
	return fmt.Errorf("create %s: %w", path, err)
}

// FindDeno looks for the deno executable: $DENO_BIN, then each directory of
// $PATH, then ./.cache/deno/node_modules/@deno/linux-x64-glibc/deno (where
// run.sh installs it). The path returned is absolute. A nil getenv reads
// the process environment.
func FindDeno(getenv settings.Getenv) (string, error) {
	if getenv == nil {
		getenv = os.LookupEnv
	}
	if p, ok := getenv("DENO_BIN"); ok && p != "" {
		if err := checkExecutable(p); err != nil {
			return "", fmt.Errorf("DENO_BIN: %w; point DENO_BIN at a deno binary or unset it", err)
		}
		return filepath.Abs(p)
	}
	path, _ := getenv("PATH")
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			continue // an empty entry means the working directory: not a place to trust
		}
		if p := filepath.Join(dir, "deno"); checkExecutable(p) == nil {
			return filepath.Abs(p)
		}
	}
	p := filepath.Join(".cache", "deno", "node_modules", "@deno", "linux-x64-glibc", "deno")
	if checkExecutable(p) == nil {
		return filepath.Abs(p)
	}
	return "", errNoDeno
}

// checkExecutable says why p is not an executable regular file.
func checkExecutable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return fmt.Errorf("%q: %w", p, err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%q is not an executable file (mode %v)", p, fi.Mode())
	}
	return nil
}

// existingDir returns the canonical form of dir, which must be an absolute
// path of an existing directory, usable in a Deno permission list.
func existingDir(field, dir string) (string, error) {
	if dir == "" {
		return "", fmt.Errorf("%s is required", field)
	}
	if !filepath.IsAbs(dir) || strings.Contains(dir, ",") {
		return "", fmt.Errorf("%s %q must be an absolute path without commas", field, dir)
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", fmt.Errorf("%s: %w (create the directory first)", field, err)
	}
	fi, err := os.Stat(real)
	if err != nil {
		return "", fmt.Errorf("%s: %w", field, err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("%s %q is not a directory", field, dir)
	}
	if strings.Contains(real, ",") {
		return "", fmt.Errorf("%s %q resolves to %q, which has a comma", field, dir, real)
	}
	return real, nil
}

// checkCACert returns the absolute path of a readable PEM file holding at
// least one certificate.
func checkCACert(file string) (string, error) {
	abs, err := filepath.Abs(file)
	if err != nil {
		return "", fmt.Errorf("CACertFile: %w", err)
	}
	data, err := os.ReadFile(abs)
	if err != nil {
		return "", fmt.Errorf("CACertFile: %w", err)
	}
	for rest := data; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return "", fmt.Errorf("CACertFile %q holds no PEM CERTIFICATE block", file)
		}
		if block.Type == "CERTIFICATE" {
			return abs, nil
		}
	}
}

func firstLine(b []byte) string {
	line, _, _ := bytes.Cut(b, []byte("\n"))
	return string(line)
}
