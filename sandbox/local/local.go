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
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/codeforge/codeforge/sandbox"
	"github.com/codeforge/codeforge/sandbox/output"
	"github.com/codeforge/codeforge/settings"
)

// Defaults for Options and Request fields left zero.
const (
	DefaultMemoryMB      = 512
	DefaultExtraMemoryMB = 1024
	DefaultMaxOutput     = 1 << 20
)

// ScratchDirDescription is what Env reports as the scratch directory: each
// run gets a fresh directory as its working directory, so code reaches it
// with relative paths or Deno.cwd().
const ScratchDirDescription = "the current working directory (Deno.cwd()), a fresh directory per run"

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

// hostPattern is what an --allow-net entry may look like: a host name or IP
// literal with an optional port. It keeps out the commas and spaces that
// would smuggle extra entries or flags into the Deno command line.
var hostPattern = regexp.MustCompile(`^[A-Za-z0-9._\-]+(:[0-9]{1,5})?$|^\[[0-9A-Fa-f:.]+\](:[0-9]{1,5})?$`)

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
	// DenoDir is Deno's own cache directory (DENO_DIR), shared by runs and
	// never writable by them. Default: ScratchRoot/deno-dir. Runs never
	// need the network for it: remote and npm modules are refused.
	DenoDir string
	// Logger receives lifecycle logs; nil logs nothing.
	Logger *slog.Logger
}

// Runner runs code in local Deno subprocesses. It implements
// sandbox.Runner and is safe for concurrent use.
type Runner struct {
	deno        string
	skillsDir   string
	scratchRoot string
	denoDir     string
	caCert      string
	memoryMB    int
	dataLimit   uint64 // RLIMIT_DATA of each run, in bytes
	log         *slog.Logger

	readyMu sync.Mutex
	ready   bool
	closed  atomic.Bool
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
	denoDir := opts.DenoDir
	if denoDir != "" && !filepath.IsAbs(denoDir) {
		return nil, fmt.Errorf("local sandbox: DenoDir %q must be an absolute path", denoDir)
	}
	// Only now, with every option valid, touch the filesystem.
	if err := os.MkdirAll(scratchRoot, 0o700); err != nil {
		return nil, fmt.Errorf("local sandbox: create scratch root: %w", err)
	}
	if scratchRoot, err = filepath.EvalSymlinks(scratchRoot); err != nil {
		return nil, fmt.Errorf("local sandbox: scratch root: %w", err)
	}
	if denoDir == "" {
		denoDir = filepath.Join(scratchRoot, "deno-dir")
	}
	if err := os.MkdirAll(denoDir, 0o700); err != nil {
		return nil, fmt.Errorf("local sandbox: create deno dir: %w", err)
	}
	memoryMB := opts.MemoryMB
	if memoryMB == 0 {
		memoryMB = DefaultMemoryMB
	}
	extraMB := opts.ExtraMemoryMB
	if extraMB == 0 {
		extraMB = DefaultExtraMemoryMB
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Runner{
		deno:        opts.DenoPath,
		skillsDir:   skills,
		scratchRoot: scratchRoot,
		denoDir:     denoDir,
		caCert:      caCert,
		memoryMB:    memoryMB,
		dataLimit:   uint64(memoryMB+extraMB) << 20,
		log:         log.With("component", "sandbox", "backend", "local"),
	}, nil
}

// Env describes what runs see.
func (r *Runner) Env() sandbox.Environment {
	return sandbox.Environment{
		Backend:    "local",
		ScratchDir: ScratchDirDescription,
		SkillsDir:  r.skillsDir,
		OutDir:     OutDirDescription,
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
	cmd := exec.CommandContext(ctx, r.deno, "--version")
	cmd.Env = baseEnv(os.TempDir(), r.denoDir)
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

// Close refuses further runs. Runs in progress finish normally.
func (r *Runner) Close() error {
	r.closed.Store(true)
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
	maxOutput := req.MaxOutput
	if maxOutput == 0 {
		maxOutput = DefaultMaxOutput
	}
	id, err := sandbox.NewRunID()
	if err != nil {
		return nil, err
	}
	scratch := filepath.Join(r.scratchRoot, "run-"+id)
	if err := os.Mkdir(scratch, 0o700); err != nil {
		return nil, fmt.Errorf("create scratch dir: %w", err)
	}
	defer r.removeScratch(id, scratch)

	runCtx, cancel := context.WithTimeoutCause(ctx, req.Timeout, errRunTimeout)
	defer cancel()
	cmd := exec.CommandContext(runCtx, r.deno, denoArgs(argSpec{
		scratch:   scratch,
		skills:    r.skillsDir,
		readPaths: req.ReadPaths,
		hosts:     req.AllowHosts,
		memoryMB:  r.memoryMB,
	})...)
	cmd.Dir = scratch
	cmd.Env = runEnv(scratch, r.denoDir, req.ProxyURL, r.caCert)
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
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
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
	res := &sandbox.Result{
		Stdout:       stdout.String(),
		Stderr:       stderr.String(),
		ExitCode:     exitCode(state),
		TimedOut:     killed.Load() && context.Cause(runCtx) == errRunTimeout,
		Truncated:    stdout.Truncated() || stderr.Truncated(),
		DroppedBytes: stdout.Dropped() + stderr.Dropped(),
		Duration:     duration,
	}
	res.OutOfMemory = !killed.Load() && isOOM(state, tail.String())
	r.log.Info("done", "run", id, "duration", duration, "exit_code", res.ExitCode,
		"timed_out", res.TimedOut, "oom", res.OutOfMemory,
		"stdout_bytes", stdout.Len(), "stderr_bytes", stderr.Len(), "dropped_bytes", res.DroppedBytes)
	if killed.Load() && !res.TimedOut {
		return nil, fmt.Errorf("run canceled: %w", ctx.Err())
	}
	return res, nil
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
		if !hostPattern.MatchString(h) {
			return fmt.Errorf("allowed host %q is not a host name or IP address with an optional port", h)
		}
	}
	for _, p := range req.ReadPaths {
		if !filepath.IsAbs(p) || strings.ContainsAny(p, ",\x00") {
			return fmt.Errorf("read path %q must be an absolute path without commas", p)
		}
	}
	if req.ProxyURL != "" {
		u, err := url.Parse(req.ProxyURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			// The URL holds the run's proxy secret: never echo it.
			return errors.New("proxy URL is not an http:// or https:// URL with a host")
		}
	}
	return nil
}

// argSpec is what the deno command line depends on.
type argSpec struct {
	scratch, skills string
	readPaths       []string
	hosts           []string
	memoryMB        int
}

// denoArgs builds the `deno run` command line for a run reading its code
// from stdin. Every permission not granted here is denied without a prompt;
// env, subprocesses, FFI, system information and remote imports are denied
// explicitly as well, so no later default can grant them.
func denoArgs(s argSpec) []string {
	read := append([]string{s.scratch, s.skills}, s.readPaths...)
	args := []string{
		"run",
		"--no-prompt",
		"--no-config",
		"--no-lock",
		"--no-remote",
		"--no-npm",
		"--ext=ts",
		"--allow-read=" + strings.Join(read, ","),
		"--allow-write=" + s.scratch + "," + s.skills,
		"--deny-env",
		"--deny-run",
		"--deny-ffi",
		"--deny-sys",
		"--deny-import",
	}
	// Never a bare --allow-net: see ErrAllHosts.
	if len(s.hosts) > 0 {
		args = append(args, "--allow-net="+strings.Join(s.hosts, ","))
	} else {
		args = append(args, "--deny-net")
	}
	return append(args, "--v8-flags=--max-old-space-size="+strconv.Itoa(s.memoryMB), "-")
}

// baseEnv is the whole environment of a deno process apart from the
// network settings: nothing is inherited from the server, which holds real
// secrets.
func baseEnv(home, denoDir string) []string {
	return []string{
		"HOME=" + home,
		"TMPDIR=" + home,
		"DENO_DIR=" + denoDir,
		"NO_COLOR=1",
		"DENO_NO_UPDATE_CHECK=1",
		"DENO_NO_PROMPT=1",
	}
}

// runEnv is a run's environment: baseEnv plus the run's proxy identity and
// the proxy CA, when it has network.
func runEnv(scratch, denoDir, proxyURL, caCert string) []string {
	env := baseEnv(scratch, denoDir)
	if proxyURL != "" {
		env = append(env,
			"HTTPS_PROXY="+proxyURL, "HTTP_PROXY="+proxyURL,
			"https_proxy="+proxyURL, "http_proxy="+proxyURL,
			"NO_PROXY=", "no_proxy=")
	}
	if caCert != "" {
		env = append(env, "DENO_CERT="+caCert)
	}
	return env
}

// BareCommand is a `deno run` of code with the flags and environment a
// Runner uses for a run with no network, with dir as its scratch, skills
// and cache directory, and none of a Runner's bookkeeping: the baseline for
// benchmarks of a Runner's (or the server's) overhead.
func BareCommand(ctx context.Context, denoPath, dir, code string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, denoPath, denoArgs(argSpec{scratch: dir, skills: dir, memoryMB: DefaultMemoryMB})...)
	cmd.Dir = dir
	cmd.Env = baseEnv(dir, filepath.Join(dir, "deno-dir"))
	cmd.Stdin = strings.NewReader(code)
	return cmd
}

// limitData caps the data size (RLIMIT_DATA: heap, anonymous and other
// private writable mappings) of process pid at limit bytes, or at its
// current hard limit if that is lower.
func limitData(pid int, limit uint64) error {
	var cur syscall.Rlimit
	if err := prlimit(pid, syscall.RLIMIT_DATA, nil, &cur); err != nil {
		return err
	}
	limit = min(limit, cur.Max)
	return prlimit(pid, syscall.RLIMIT_DATA, &syscall.Rlimit{Cur: limit, Max: limit}, nil)
}

func prlimit(pid, resource int, newLimit, old *syscall.Rlimit) error {
	_, _, errno := syscall.RawSyscall6(syscall.SYS_PRLIMIT64, uintptr(pid), uintptr(resource),
		uintptr(unsafe.Pointer(newLimit)), uintptr(unsafe.Pointer(old)), 0, 0)
	if errno != 0 {
		return fmt.Errorf("prlimit: %w", errno)
	}
	return nil
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

// removeScratch deletes a run's scratch directory, first making writable
// any directory the code made read-only.
func (r *Runner) removeScratch(id, dir string) {
	if err := os.RemoveAll(dir); err == nil {
		return
	}
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o700)
		}
		return nil
	})
	if err := os.RemoveAll(dir); err != nil {
		r.log.Warn("remove scratch dir", "run", id, "dir", dir, "err", err)
	}
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
