// Package docker is the sandbox backend that runs code in the sandbox
// container: each run is one `docker exec` of codeforge-run (the wrapper
// in the sandbox image, package sandbox/wrapper), made through the
// Docker socket filter (package dockerfilter) with
// github.com/moby/moby/client. The code goes in on the exec's stdin,
// stdout and stderr come back demultiplexed into capped collectors, and
// the exit code comes from exec inspect.
//
// The Docker API cannot kill an exec, so time limits are enforced inside
// the sandbox: the wrapper runs deno in a process group of its own and
// kills the group when the run's time is up, and when a run outlives its timeout by a grace period
// or its context ends, the runner execs `codeforge-run --kill <run id>`,
// which kills that group and removes the run's scratch directory.
package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"

	"github.com/codeforge/codeforge/sandbox"
	"github.com/codeforge/codeforge/sandbox/output"
	"github.com/codeforge/codeforge/sandbox/runpolicy"
	"github.com/codeforge/codeforge/sandbox/warmpool"
)

// Defaults for Options and Request fields left zero.
const (
	// DefaultDockerHost is where compose mounts the socket filter.
	DefaultDockerHost = "unix:///run/codeforge-filter/docker.sock"
	DefaultContainer  = "sandbox"
	DefaultSkillsDir  = "/skills"
	// DefaultMemoryMB caps each run's V8 heap. It is half of the sandbox
	// container's 512 MB, so V8's own limit (a clean out-of-memory report)
	// is reached before the container's (a SIGKILL from the kernel).
	DefaultMemoryMB  = runpolicy.SandboxMemoryMB
	DefaultMaxOutput = 1 << 20
	// DefaultGrace is how long past a run's timeout the runner waits for
	// the wrapper's own timeout before killing the run from outside.
	DefaultGrace = 3 * time.Second
)

// ScratchNote is what Env says of the scratch directory.
const ScratchNote = "the current working directory (Deno.cwd(), /tmp/runs/<run id>), a fresh directory per run, removed afterwards"

const (
	wrapper = runpolicy.WrapperName
	// wrapperPrefix starts every message codeforge-run itself writes.
	wrapperPrefix = runpolicy.MessagePrefix
	// signalTrailer is the last stderr line codeforge-run writes when a
	// signal ended deno (it is alive to write it, so the sandbox is too).
	signalTrailer = runpolicy.SignalTrailer
	// wrapperRefused is codeforge-run's exit status when it refuses a run.
	wrapperRefused = runpolicy.ExitRefused
	// checkNetworkDown is codeforge-run --check ADDR's exit status when
	// the sandbox cannot connect to the proxy.
	checkNetworkDown = runpolicy.ExitNetworkDown
	// stderrTail is how much of the end of stderr is kept to find V8's
	// out-of-memory report and the wrapper's trailer after a flood.
	stderrTail = 8 << 10
	// maxTimeout is the longest run the filter accepts (one day).
	maxTimeout = runpolicy.MaxTimeout
	// controlTimeout bounds the small execs (--kill, --check) and the
	// inspect after a run.
	controlTimeout = 15 * time.Second
	// readyFor is how long a successful Ready check is trusted.
	readyFor = 5 * time.Second
)

// Options configures a Runner.
type Options struct {
	// DockerHost is the socket filter, "unix:///path". Default
	// DefaultDockerHost.
	DockerHost string
	// Container names the sandbox to the filter. Default DefaultContainer.
	Container string
	// MemoryMB caps each run's V8 heap. Default DefaultMemoryMB.
	MemoryMB int
	// SkillsDir is the skills directory as the code sees it; the wrapper
	// grants /skills. Default DefaultSkillsDir.
	SkillsDir string
	// ScratchHint replaces ScratchNote in Env (words, not a path).
	ScratchHint string
	// Grace is how long past its timeout a run may go before the runner
	// kills it from outside. Default DefaultGrace.
	Grace time.Duration
	// PoolSize is how many warm execs the runner keeps created and
	// attached, each holding a deno started and waiting for one run. 0
	// turns warming off. A run no warm exec can serve starts cold.
	PoolSize int
	// ProbeAddr is the proxy as a run reaches it, IPv4:port (e.g.
	// 192.0.2.1:3128). When set, Ready also has the sandbox open a TCP
	// connection to it, as a run would (codeforge-run --check ADDR), and
	// reports sandbox.ErrNetworkDown when it cannot; a run that fails
	// with a network error is checked the same way. Empty: no probe.
	ProbeAddr string
	// Logger receives lifecycle logs; nil logs nothing.
	Logger *slog.Logger
}

// Runner runs code in the sandbox container. It implements sandbox.Runner
// and is safe for concurrent use.
type Runner struct {
	cli       *client.Client
	host      string
	container string
	memoryMB  int
	skillsDir string
	scratch   string
	grace     time.Duration
	probe     string
	log       *slog.Logger
	closed    atomic.Bool

	readyMu sync.Mutex
	readyAt time.Time

	pool *warmpool.Pool[*stream]
	bg   sync.WaitGroup // warm runs answered at their end line, until their exec ends
}

var _ sandbox.Runner = (*Runner)(nil)

// containerPattern is a container name as the filter accepts it.
var containerPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)

// New checks opts and returns a Runner. It does not contact the filter;
// Ready does.
func New(opts Options) (*Runner, error) {
	if opts.DockerHost == "" {
		opts.DockerHost = DefaultDockerHost
	}
	if opts.Container == "" {
		opts.Container = DefaultContainer
	}
	if opts.SkillsDir == "" {
		opts.SkillsDir = DefaultSkillsDir
	}
	if opts.MemoryMB == 0 {
		opts.MemoryMB = DefaultMemoryMB
	}
	if opts.Grace == 0 {
		opts.Grace = DefaultGrace
	}
	if opts.ScratchHint == "" {
		opts.ScratchHint = ScratchNote
	}
	if p, ok := strings.CutPrefix(opts.DockerHost, "unix://"); !ok || !strings.HasPrefix(p, "/") {
		return nil, fmt.Errorf("docker sandbox: DockerHost %q: want the socket filter as unix:///path", opts.DockerHost)
	}
	if !containerPattern.MatchString(opts.Container) {
		return nil, fmt.Errorf("docker sandbox: Container %q: want a container or service name", opts.Container)
	}
	if opts.MemoryMB < 0 || opts.MemoryMB > 999999 {
		return nil, fmt.Errorf("docker sandbox: MemoryMB is %d: want a positive number of megabytes, or 0 for the default %d", opts.MemoryMB, DefaultMemoryMB)
	}
	if opts.Grace < 0 {
		return nil, fmt.Errorf("docker sandbox: Grace is %v: want a positive duration, or 0 for the default %v", opts.Grace, DefaultGrace)
	}
	if opts.ProbeAddr != "" && runpolicy.CheckProbeAddr(opts.ProbeAddr) != nil {
		return nil, fmt.Errorf("docker sandbox: ProbeAddr %q: want the proxy's address as runs reach it, IPv4:port (e.g. 192.0.2.1:3128)", opts.ProbeAddr)
	}
	if !path.IsAbs(opts.SkillsDir) {
		return nil, fmt.Errorf("docker sandbox: SkillsDir %q: want an absolute path as the sandbox sees it", opts.SkillsDir)
	}
	if opts.PoolSize < 0 || opts.PoolSize > MaxPoolSize {
		return nil, fmt.Errorf("docker sandbox: PoolSize is %d: want 0 (no warm execs) to %d", opts.PoolSize, MaxPoolSize)
	}
	cli, err := client.New(client.WithHost(opts.DockerHost))
	if err != nil {
		return nil, fmt.Errorf("docker sandbox: client for %s: %w", opts.DockerHost, err)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Runner{
		cli:       cli,
		host:      opts.DockerHost,
		container: opts.Container,
		memoryMB:  opts.MemoryMB,
		skillsDir: opts.SkillsDir,
		scratch:   opts.ScratchHint,
		grace:     opts.Grace,
		probe:     opts.ProbeAddr,
		log:       log.With("component", "sandbox", "backend", "docker"),
	}
	r.pool = warmpool.New(opts.PoolSize, r.startWarm, r.log)
	return r, nil
}

// MaxPoolSize bounds Options.PoolSize.
const MaxPoolSize = 32

// WarmIdle reports how many warm execs wait for a run.
func (r *Runner) WarmIdle() int { return r.pool.Idle() }

// Env describes what runs see.
func (r *Runner) Env() sandbox.Environment {
	return sandbox.Environment{Backend: "docker", ScratchNote: r.scratch, SkillsDir: r.skillsDir, OutDir: OutDirDescription}
}

// Close refuses further runs and closes idle connections to the filter.
// Runs in progress finish normally.
func (r *Runner) Close() error {
	r.closed.Store(true)
	r.pool.Close()
	r.bg.Wait()
	return r.cli.Close()
}

// Ready pings the engine through the filter and runs `codeforge-run
// --check` in the sandbox (deno starts, the proxy's CA is there, and with
// ProbeAddr the sandbox reaches the proxy). A success is trusted for a few
// seconds, unless ctx comes from sandbox.FreshReady.
func (r *Runner) Ready(ctx context.Context) error {
	if r.closed.Load() {
		return errors.New("docker sandbox is closed")
	}
	r.readyMu.Lock()
	defer r.readyMu.Unlock()
	if !sandbox.WantsFreshReady(ctx) && !r.readyAt.IsZero() && time.Since(r.readyAt) < readyFor {
		return nil
	}
	r.readyAt = time.Time{}
	if _, err := r.cli.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		return fmt.Errorf("starting: docker socket filter at %s: %w", r.host, err)
	}
	args := []string{"--check"}
	if r.probe != "" {
		args = append(args, r.probe)
	}
	res, err := r.control(ctx, args...)
	if err != nil {
		return fmt.Errorf("starting: sandbox container %q: %w", r.container, err)
	}
	if res.exitCode != 0 {
		msg := strings.TrimPrefix(firstLine(res.stderr), wrapperPrefix)
		if msg == "" {
			msg = fmt.Sprintf("codeforge-run --check exited with %d", res.exitCode)
		}
		if res.exitCode == checkNetworkDown {
			return fmt.Errorf("%w: %s", sandbox.ErrNetworkDown, strings.TrimPrefix(msg, runpolicy.NetworkPrefix))
		}
		return fmt.Errorf("starting: sandbox not ready: %s", msg)
	}
	r.readyAt = time.Now()
	return nil
}

// stopReason says why a run's stream was cut from outside.
type stopReason int

const (
	stopNone stopReason = iota
	stopTimeout
	stopCanceled
)

// Run executes req.Code in the sandbox. Timeout, out of memory and
// non-zero exit are reported in the Result; an error means the run could
// not be attempted, the sandbox failed during it (container gone, filter
// down), or ctx ended first (the run is killed and the error wraps
// ctx.Err()).
func (r *Runner) Run(ctx context.Context, req sandbox.Request) (*sandbox.Result, error) {
	end := r.pool.Run()
	res, err := r.run(ctx, req)
	end()
	if err == nil {
		r.pool.ColdOK()
	}
	if err != nil && ctx.Err() == nil {
		// The sandbox or the filter may be gone: /health and the next
		// call must check again rather than trust an earlier success,
		// and warm execs may belong to a sandbox that is gone.
		r.forgetReady()
		r.pool.Flush()
	}
	if err == nil && r.probe != "" && res.ExitCode != 0 && !res.TimedOut && networkFailure(res.Stderr) {
		// The code failed on a network error: if the sandbox cannot
		// reach the proxy, that is the stack's fault, not the code's;
		// say so rather than hand over a raw OS error.
		if nerr := r.Ready(sandbox.FreshReady(ctx)); errors.Is(nerr, sandbox.ErrNetworkDown) {
			r.log.Warn("run hit a broken network path", "err", nerr)
			return nil, fmt.Errorf("%w; the run's network requests failed on it: try again in a few seconds", nerr)
		}
	}
	return res, err
}

// networkFailure reports whether stderr holds the error Deno gives when a
// connection cannot be made at all (an OS error under a failed request).
func networkFailure(stderr string) bool {
	return strings.Contains(stderr, "error sending request") || strings.Contains(stderr, "(os error ")
}

func (r *Runner) forgetReady() {
	r.readyMu.Lock()
	r.readyAt = time.Time{}
	r.readyMu.Unlock()
}

func (r *Runner) run(ctx context.Context, req sandbox.Request) (*sandbox.Result, error) {
	if r.closed.Load() {
		return nil, errors.New("docker sandbox is closed")
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("run canceled: %w", err)
	}
	maxOutput := req.MaxOutput
	if maxOutput == 0 {
		maxOutput = DefaultMaxOutput
	}
	id, err := sandbox.NewRunID()
	if err != nil {
		return nil, err
	}
	env, err := r.runEnv(id, req)
	if err != nil {
		return nil, err
	}
	stdout := output.NewCollector(output.Options{Limit: maxOutput, OnLine: req.OnStdoutLine})
	stderr := output.NewCollector(output.Options{Limit: maxOutput, OnLine: req.OnStderrLine})
	tail := output.NewTail(stderrTail)

	// A warm exec if one covers the run (its deno already started and
	// waiting), else a new one.
	var payload []byte
	st, warm := r.pool.Take(warmKey(req, r.memoryMB))
	token := ""
	if warm {
		id = st.runID
		if token, err = runpolicy.NewEndToken(); err != nil {
			st.close()
			return nil, err
		}
		claim, err := runpolicy.NewRunClaim(runpolicy.Run{ID: id, Timeout: req.Timeout, Hosts: req.AllowHosts,
			AllHosts: req.AllowAllHosts, ReadPaths: req.ReadPaths, ProxyURL: req.ProxyURL,
			KeepOut: req.OnOutDir != nil, End: token, NodeExit: runpolicy.MayUseNodeExit(req.Code)}).Line()
		if err != nil {
			st.close()
			return nil, err
		}
		payload = append(claim, req.Code...)
	}
	r.log.Info("start", "run", id, "timeout", req.Timeout, "network", req.NetworkMode(), "warm", warm)
	start := time.Now()
	hardDeadline := start.Add(req.Timeout + r.grace)
	if !warm {
		payload = []byte(req.Code)
		setupCtx, cancelSetup := context.WithDeadline(ctx, hardDeadline)
		st, err = r.openExec(setupCtx, id, []string{wrapper}, env, false)
		cancelSetup()
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("run canceled: %w", ctx.Err())
			}
			return nil, err
		}
	}
	keepStream := false // an answered warm run's exec ends in the background
	defer func() {
		if !keepStream {
			st.close()
		}
	}()
	att := st.att
	outW, errW := io.Writer(stdout), io.Writer(io.MultiWriter(stderr, tail))
	var outEnd, errEnd *runpolicy.EndWriter
	if warm {
		outEnd, errEnd = runpolicy.NewEndWriter(outW, token), runpolicy.NewEndWriter(errW, token)
		outW, errW = outEnd, errEnd
	}
	st.out.set(outW)
	st.err.set(errW)

	// One watcher cuts the run when its hard deadline passes or ctx ends:
	// first the wrapper kills the run's processes, then the stream closes.
	streamDone := make(chan struct{})
	watchDone := make(chan stopReason, 1)
	go func() {
		timer := time.NewTimer(time.Until(hardDeadline))
		defer timer.Stop()
		why := stopNone
		select {
		case <-streamDone:
		case <-timer.C:
			why = stopTimeout
		case <-ctx.Done():
			why = stopCanceled
		}
		if why != stopNone {
			r.kill(id)
			att.Close()
		}
		watchDone <- why
	}()
	go func() {
		// Errors here surface as the run's own outcome (it ended early).
		_, _ = att.Conn.Write(payload)
		_ = att.CloseWrite()
	}()
	end, early := waitEnd(st, outEnd, errEnd, req.OnOutDir != nil)
	duration := time.Since(start)
	close(streamDone)
	why := <-watchDone
	if early && why == stopNone {
		// The code is done: what is left (deno's teardown, the wrapper
		// removing the run's files) needs nobody to wait for it.
		keepStream = true
		r.bg.Go(func() {
			defer st.close()
			timer := time.NewTimer(time.Until(hardDeadline))
			defer timer.Stop()
			select {
			case <-st.done:
				// The wrapper ends deno at the end line. Should it still
				// have kept a directory (the end line said there was no
				// out/), nobody will collect it: remove it.
				if req.OnOutDir != nil && strings.Contains(errEnd.After(), runpolicy.KeptOutTrailer) {
					r.log.Warn("run kept out/ after an end line without it; removing it", "run", id)
					r.kill(id)
				}
			case <-timer.C:
				r.kill(id)
			}
		})
		stdout.Close()
		stderr.Close()
		res := sandbox.NewResult(stdout, stderr, end.ExitCode, duration)
		r.logDone(id, res, stdout, stderr, "early", true, "end_line", true)
		return res, nil
	}
	<-st.done
	if warm {
		outEnd.Flush()
		errEnd.Flush()
	}
	copyErr := st.copyErr
	stdout.Close()
	stderr.Close()

	if why == stopCanceled {
		r.log.Info("canceled", "run", id, "duration", duration)
		return nil, fmt.Errorf("run canceled: %w", ctx.Err())
	}
	res := sandbox.NewResult(stdout, stderr, 0, duration)
	wait := controlTimeout
	if why == stopTimeout {
		// The stream was cut by the runner: the process may not have
		// ended if the kill failed; do not wait long for it.
		wait = 2 * time.Second
	}
	exitCode, inspectErr := r.exitCode(st.execID, wait)
	if why == stopTimeout {
		// Killed from outside after the wrapper's own timeout failed to
		// end it; the exit code may not be recorded yet.
		res.TimedOut = true
		res.ExitCode = 137
		res.Stderr = stripTrailer(res.Stderr)
		if inspectErr == nil && exitCode > 0 {
			res.ExitCode = exitCode
		}
		r.logDone(id, res, stdout, stderr)
		return res, nil
	}
	if inspectErr != nil {
		if req.OnOutDir != nil {
			r.kill(id) // the kept scratch directory goes too
		}
		if copyErr != nil {
			return nil, fmt.Errorf("sandbox output stream broke: %v; exec inspect: %w", copyErr, inspectErr)
		}
		return nil, fmt.Errorf("docker exec inspect: %w", inspectErr)
	}
	res.ExitCode = exitCode
	tailText := tail.String()
	if warm {
		if _, ended := errEnd.End(); ended {
			tailText = errEnd.After() // the wrapper's lines, after the code's end line
		}
	}
	// The wrapper's last line says whether it kept out/ for --collect:
	// without it there is nothing to collect, and no exec to make.
	kept := false
	if req.OnOutDir != nil {
		if t, ok := strings.CutSuffix(tailText, runpolicy.KeptOutTrailer+"\n"); ok {
			tailText, kept = t, true
			res.Stderr = strings.TrimSuffix(res.Stderr, runpolicy.KeptOutTrailer+"\n")
		}
	}
	trailer := trailerSignal(tailText)
	lastErrLine, _ := lastLine(tailText)
	exitedItself := strings.HasPrefix(lastErrLine, runpolicy.ExitTrailer)
	switch {
	case exitCode > 128 && exitedItself:
		// Deno.exit(137) and the like: the code's own status.
		res.Stderr = stripTrailer(res.Stderr)
	case exitCode == wrapperRefused && strings.HasPrefix(res.Stderr, wrapperPrefix) && trailer == 0:
		return nil, fmt.Errorf("sandbox wrapper refused the run: %s", strings.TrimPrefix(firstLine(res.Stderr), wrapperPrefix))
	case exitCode > 128 && trailer == 0:
		// The wrapper did not outlive deno: the sandbox itself went down
		// (killed, stopped or restarted) during the run.
		if req.OnOutDir != nil {
			r.kill(id)
		}
		return nil, fmt.Errorf("the sandbox container stopped during the run (exit status %d)", exitCode)
	case exitCode > 128:
		res.Stderr = stripTrailer(res.Stderr)
		switch {
		case duration >= req.Timeout && trailer == 9:
			res.TimedOut = true
		case sandbox.HasV8OOMMarker(tailText):
			res.OutOfMemory = true
		case trailer == 9:
			// Code cannot signal anything (no --allow-run) and the
			// deadline has not passed: the container's memory limit.
			res.OutOfMemory = true
		}
	}
	if copyErr != nil {
		r.log.Warn("output stream", "run", id, "err", copyErr)
	}
	if kept {
		r.handOut(ctx, id, req)
	}
	r.logDone(id, res, stdout, stderr, "end_line", runpolicy.Ended(outEnd, errEnd))
	return res, nil
}

// handOut copies the run's out/ files to this side, hands them to
// req.OnOutDir and removes the copy (and, through --collect, the run's
// scratch directory in the sandbox).
func (r *Runner) handOut(ctx context.Context, id string, req sandbox.Request) {
	dir, skipped, err := r.collectOut(context.WithoutCancel(ctx), id, req.OutMaxBytes)
	if err != nil {
		r.log.Warn("files out", "run", id, "err", err)
		r.kill(id)
		tmp, terr := os.MkdirTemp("", "codeforge-out-")
		if terr != nil {
			return
		}
		defer os.RemoveAll(tmp)
		req.OnOutDir(filepath.Join(tmp, "out"), []string{fmt.Sprintf("files: out/ could not be copied from the sandbox (%v); no file was kept", err)})
		return
	}
	defer os.RemoveAll(filepath.Dir(dir))
	req.OnOutDir(dir, skipped)
}

// logDone logs a run's end; a warm run answered at its end line (before
// its exec ended) says early=true.
func (r *Runner) logDone(id string, res *sandbox.Result, stdout, stderr *output.Collector, more ...any) {
	r.log.Info("done", append([]any{"run", id, "duration", res.Duration, "exit_code", res.ExitCode,
		"timed_out", res.TimedOut, "oom", res.OutOfMemory,
		"stdout_bytes", stdout.Len(), "stderr_bytes", stderr.Len(), "dropped_bytes", res.DroppedBytes}, more...)...)
}

// waitEnd waits for a run's exec to end or, for a warm run, for its end
// line on both streams (see runpolicy.EndPrefix). It reports the end
// line and true when the run can be answered now: it wrote its end line
// and has no out/ files to collect (keepOut), which must wait for the
// wrapper to be done with the run.
func waitEnd(st *stream, outEnd, errEnd *runpolicy.EndWriter, keepOut bool) (runpolicy.End, bool) {
	if outEnd == nil {
		<-st.done
		return runpolicy.End{}, false
	}
	end, ok := runpolicy.WaitEnd(st.done, outEnd, errEnd)
	return end, ok && !(end.Out && keepOut)
}

// runEnv is the run's exec environment (runpolicy's wrapper contract,
// which the filter and the wrapper check again).
func (r *Runner) runEnv(id string, req sandbox.Request) ([]string, error) {
	if req.Timeout <= 0 || req.Timeout > maxTimeout {
		return nil, fmt.Errorf("timeout is %v: want a positive duration of at most %v", req.Timeout, maxTimeout)
	}
	if req.MaxOutput < 0 {
		return nil, fmt.Errorf("max output is %d bytes: want a positive number, or 0 for the default %d", req.MaxOutput, DefaultMaxOutput)
	}
	env, err := runpolicy.Run{
		ID:        id,
		Timeout:   req.Timeout,
		Hosts:     req.AllowHosts,
		AllHosts:  req.AllowAllHosts,
		MemoryMB:  r.memoryMB,
		ReadPaths: req.ReadPaths,
		ProxyURL:  req.ProxyURL,
		KeepOut:   req.OnOutDir != nil,
	}.Env()
	if err != nil {
		return nil, fmt.Errorf("run settings the sandbox refuses: %w", err)
	}
	return env, nil
}

// exitCode reads an exec's exit code, waiting up to wait for the engine
// to record it after the stream ended.
func (r *Runner) exitCode(execID string, wait time.Duration) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	for pause := time.Millisecond; ; pause = min(2*pause, 100*time.Millisecond) {
		insp, err := r.cli.ExecInspect(ctx, execID, client.ExecInspectOptions{})
		if err != nil {
			return 0, err
		}
		if !insp.Running {
			return insp.ExitCode, nil
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("exec %s still running after its output ended", execID)
		case <-time.After(pause):
		}
	}
}

// controlResult is what a small wrapper exec printed.
type controlResult struct {
	stdout, stderr string
	exitCode       int
}

// control runs `codeforge-run args...` without stdin and returns what it
// printed (capped) and its exit code.
func (r *Runner) control(ctx context.Context, args ...string) (controlResult, error) {
	ctx, cancel := context.WithTimeout(ctx, controlTimeout)
	defer cancel()
	created, err := r.cli.ExecCreate(ctx, r.container, client.ExecCreateOptions{
		AttachStdout: true, AttachStderr: true, Cmd: append([]string{wrapper}, args...),
	})
	if err != nil {
		return controlResult{}, fmt.Errorf("docker exec create: %w", err)
	}
	att, err := r.cli.ExecAttach(ctx, created.ID, client.ExecAttachOptions{})
	if err != nil {
		return controlResult{}, fmt.Errorf("docker exec start: %w", err)
	}
	defer att.Close()
	stop := context.AfterFunc(ctx, att.Close)
	defer stop()
	stdout := output.NewCollector(output.Options{Limit: 4 << 10})
	stderr := output.NewCollector(output.Options{Limit: 4 << 10})
	if _, err := stdcopy.StdCopy(stdout, stderr, att.Reader); err != nil && ctx.Err() != nil {
		return controlResult{}, fmt.Errorf("codeforge-run %s: %w", strings.Join(args, " "), ctx.Err())
	}
	code, err := r.exitCode(created.ID, controlTimeout)
	if err != nil {
		return controlResult{}, fmt.Errorf("docker exec inspect: %w", err)
	}
	return controlResult{stdout: stdout.String(), stderr: stderr.String(), exitCode: code}, nil
}

// kill makes the wrapper kill run id's process group and remove its
// scratch directory. It is best effort: a failure is logged.
func (r *Runner) kill(id string) {
	res, err := r.control(context.Background(), "--kill", id)
	switch {
	case err != nil:
		r.log.Warn("kill run", "run", id, "err", err)
	case res.exitCode != 0 && res.exitCode != runpolicy.ExitNoSuchRun: // the run had already ended
		r.log.Warn("kill run", "run", id, "exit_code", res.exitCode, "stderr", firstLine(res.stderr))
	default:
		r.log.Info("killed run", "run", id)
	}
}

// lastLine is the last line of s (without its newline) and where it
// starts.
func lastLine(s string) (line string, start int) {
	body := strings.TrimSuffix(s, "\n")
	start = strings.LastIndexByte(body, '\n') + 1
	return body[start:], start
}

// trailerSignal returns N when stderr ends with the wrapper's "deno ended
// by signal N" line, else 0.
func trailerSignal(tail string) int {
	line, _ := lastLine(tail)
	n, err := strconv.Atoi(strings.TrimPrefix(line, signalTrailer))
	if !strings.HasPrefix(line, signalTrailer) || err != nil || n <= 0 {
		return 0
	}
	return n
}

// stripTrailer removes the wrapper's trailer line (a signal's or an
// exit status's) from the end of stderr: it is not the code's output.
func stripTrailer(s string) string {
	if line, start := lastLine(s); strings.HasPrefix(line, signalTrailer) || strings.HasPrefix(line, runpolicy.ExitTrailer) {
		return s[:start]
	}
	return s
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return line
}
