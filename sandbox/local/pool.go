package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/codeforge/codeforge/sandbox"
	"github.com/codeforge/codeforge/sandbox/output"
	"github.com/codeforge/codeforge/sandbox/runpolicy"
)

// warmProc is a deno started ahead of its run, blocked in the bootstrap
// on its stdin (runpolicy.Bootstrap). It serves one run, then is gone.
type warmProc struct {
	r       *Runner
	id      string
	cmd     *exec.Cmd
	spec    runpolicy.Spec // what it was started with (no proxy)
	ca      caStamp
	stdin   *os.File // write end
	stdout  *os.File // read ends
	stderr  *os.File
	done    chan struct{} // closed once Wait returned
	started time.Time
}

// caStamp tells a changed CA certificate file from the one a warm
// process was started with.
type caStamp struct {
	size int64
	mod  time.Time
}

func stampCA(file string) caStamp {
	if file == "" {
		return caStamp{}
	}
	fi, err := os.Stat(file)
	if err != nil {
		return caStamp{size: -1}
	}
	return caStamp{size: fi.Size(), mod: fi.ModTime()}
}

func (w *warmProc) exited() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

// Spec, Usable and Discard make a warm process a warmpool.Item. One
// started before the proxy's CA certificate changed is unusable: it
// trusts the old one.
func (w *warmProc) Spec() runpolicy.Spec { return w.spec }
func (w *warmProc) Usable() bool         { return !w.exited() && w.ca == stampCA(w.spec.CACert) }
func (w *warmProc) Discard()             { w.r.endWarm(w) }

// warmKey is want without what belongs to one run.
func warmKey(want runpolicy.Spec) runpolicy.Spec {
	want.Scratch, want.DenoDir, want.ProxyURL = "", "", ""
	want.Hosts = slices.Clone(want.Hosts)
	want.ReadPaths = slices.Clone(want.ReadPaths)
	return want
}

// warmStartTimeout bounds how long a warm deno may take to start.
const warmStartTimeout = 30 * time.Second

// startWarm starts a deno for key in the bootstrap, blocked on stdin.
func (r *Runner) startWarm(key runpolicy.Spec) (*warmProc, error) {
	id, err := sandbox.NewRunID()
	if err != nil {
		return nil, err
	}
	spec := key
	spec.Scratch = filepath.Join(r.scratchRoot, "run-"+id)
	spec.DenoDir = runpolicy.CacheDir(spec.Scratch)
	fail := func(err error) (*warmProc, error) {
		r.removeRun(id, spec.Scratch)
		return nil, err
	}
	for _, dir := range []string{spec.Scratch, spec.DenoDir} {
		if err := os.Mkdir(dir, 0o700); err != nil {
			return fail(r.scratchError(dir, err))
		}
	}
	for name, content := range runpolicy.WarmFiles(spec) {
		f := filepath.Join(spec.DenoDir, name)
		if err := os.WriteFile(f, []byte(content), 0o400); err != nil {
			return fail(r.scratchError(f, err))
		}
	}
	w := &warmProc{r: r, id: id, spec: spec, ca: stampCA(spec.CACert), done: make(chan struct{})}
	var inR, outW, errW *os.File
	var pipeErr error
	closeAll := func(fs ...*os.File) {
		for _, f := range fs {
			if f != nil {
				f.Close()
			}
		}
	}
	if inR, w.stdin, pipeErr = os.Pipe(); pipeErr == nil {
		if w.stdout, outW, pipeErr = os.Pipe(); pipeErr == nil {
			w.stderr, errW, pipeErr = os.Pipe()
		}
	}
	if pipeErr != nil {
		closeAll(inR, w.stdin, w.stdout, outW, w.stderr, errW)
		return fail(fmt.Errorf("pipes: %w", pipeErr))
	}
	cmd := exec.Command(r.deno, runpolicy.WarmArgs(spec)...)
	cmd.Dir = spec.Scratch
	cmd.Env = runpolicy.Env(spec)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	cmd.SysProcAttr = runProcAttr()
	err = cmd.Start()
	closeAll(inR, outW, errW)
	if err != nil {
		closeAll(w.stdin, w.stdout, w.stderr)
		return fail(fmt.Errorf("start deno: %w", err))
	}
	w.cmd = cmd
	w.started = time.Now()
	go func() {
		_ = cmd.Wait()
		close(w.done)
	}()
	if err := limitData(cmd.Process.Pid, r.dataLimit); err != nil {
		r.endWarm(w)
		return nil, fmt.Errorf("limit deno's memory: %w", err)
	}
	// Warm only once deno has started and waits for its claim: a run
	// never waits for another's start-up.
	ready := make([]byte, 1)
	_ = w.stdout.SetReadDeadline(time.Now().Add(warmStartTimeout))
	n, err := w.stdout.Read(ready)
	_ = w.stdout.SetReadDeadline(time.Time{})
	if n != 1 || ready[0] != runpolicy.ReadyByte {
		r.endWarm(w)
		return nil, fmt.Errorf("warm deno did not start within %v (read %q: %v)", warmStartTimeout, ready[:n], err)
	}
	return w, nil
}

// endWarm kills an unused warm process and removes its files.
func (r *Runner) endWarm(w *warmProc) {
	_ = killGroup(w.cmd.Process.Pid)
	<-w.done
	w.stdin.Close()
	w.stdout.Close()
	w.stderr.Close()
	r.removeRun(w.id, w.spec.Scratch)
}

// errWarmUnusable is runWarm's answer when w could not take the run (its
// code could not be written): the run starts cold instead.
var errWarmUnusable = errors.New("warm process unusable")

// runWarm runs req in the warm process w, narrowed by claim. It answers
// as soon as the bootstrap's end line says the code is done (see
// runpolicy.EndPrefix), kills what is left of the process then, and
// removes the run's files in the background; a run that ends otherwise
// is answered when deno has exited, as a cold run is.
func (r *Runner) runWarm(ctx context.Context, w *warmProc, claim runpolicy.Claim, req sandbox.Request, maxOutput int) (*sandbox.Result, error) {
	pid := w.cmd.Process.Pid
	scratch := w.spec.Scratch
	token, err := runpolicy.NewEndToken()
	if err != nil {
		r.endWarm(w)
		return nil, err
	}
	claim.End = token
	claim.NodeExit = runpolicy.MayUseNodeExit(req.Code)
	line, err := claim.Line()
	if err != nil {
		r.endWarm(w)
		return nil, err
	}
	code := runpolicy.CodeFile(scratch)
	if err := os.WriteFile(code, []byte(req.Code), 0o600); err != nil {
		// A full scratch filesystem, most likely: a cold run, whose code
		// goes in through a pipe, may still work.
		r.endWarm(w)
		r.log.Warn("warm run could not take its code; starting cold", "run", w.id, "err", err)
		return nil, errWarmUnusable
	}

	runCtx, cancel := context.WithTimeoutCause(ctx, req.Timeout, errRunTimeout)
	defer cancel()
	var killed atomic.Bool
	stopKill := context.AfterFunc(runCtx, func() {
		killed.Store(true)
		_ = killGroup(pid)
	})
	stdout := output.NewCollector(output.Options{Limit: maxOutput, OnLine: req.OnStdoutLine})
	stderr := output.NewCollector(output.Options{Limit: maxOutput, OnLine: req.OnStderrLine})
	tail := output.NewTail(stderrTail)
	outEnd := runpolicy.NewEndWriter(stdout, token)
	errEnd := runpolicy.NewEndWriter(io.MultiWriter(stderr, tail), token)
	var copies sync.WaitGroup
	copies.Add(2)
	go func() { defer copies.Done(); _, _ = io.Copy(outEnd, w.stdout); outEnd.Flush() }()
	go func() { defer copies.Done(); _, _ = io.Copy(errEnd, w.stderr); errEnd.Flush() }()
	// drain waits for deno to exit and its output to end: something
	// that outlived deno and holds the output open is killed too (the
	// group still has a member then, so its id cannot have been reused).
	drain := func() {
		<-w.done
		copied := make(chan struct{})
		go func() { copies.Wait(); close(copied) }()
		select {
		case <-copied:
		case <-time.After(waitDelay):
			_ = killGroup(pid)
			w.stdout.Close()
			w.stderr.Close()
			<-copied
		}
	}
	// cleanup drains, then removes the run's files.
	cleanup := func() {
		drain()
		w.stdout.Close()
		w.stderr.Close()
		r.removeRun(w.id, scratch)
	}

	r.log.Info("start", "run", w.id, "timeout", req.Timeout, "network", req.NetworkMode(), "warm", true)
	start := time.Now()
	// The claim is a few hundred bytes: it fits in the pipe at once. An
	// error means deno is gone; its result says why.
	_, _ = w.stdin.Write(line)
	_ = w.stdin.Close()
	end, early := runpolicy.WaitEnd(w.done, outEnd, errEnd)
	duration := time.Since(start)
	stopKill()
	if early {
		// The code is done and can write no more files: what is left
		// is deno's teardown, which nobody needs to wait for.
		_ = killGroup(pid)
		stdout.Close()
		stderr.Close()
		if req.OnOutDir != nil && ctx.Err() == nil {
			req.OnOutDir(filepath.Join(scratch, "out"), nil)
		}
		r.bg.Go(cleanup)
		res := sandbox.NewResult(stdout, stderr, end.ExitCode, duration)
		r.logDone(w.id, res, stdout, stderr, "early", true, "end_line", true)
		return res, nil
	}
	defer cleanup()
	drain()
	stdout.Close()
	stderr.Close()
	if req.OnOutDir != nil && ctx.Err() == nil {
		req.OnOutDir(filepath.Join(scratch, "out"), nil)
	}
	state := w.cmd.ProcessState
	if state == nil {
		return nil, errors.New("wait for deno: no exit status")
	}
	res := sandbox.NewResult(stdout, stderr, exitCode(state), duration)
	res.TimedOut = killed.Load() && context.Cause(runCtx) == errRunTimeout
	res.OutOfMemory = !killed.Load() && isOOM(state, tail.String())
	// The end line may also have come just as deno exited.
	r.logDone(w.id, res, stdout, stderr, "end_line", runpolicy.Ended(outEnd, errEnd))
	if killed.Load() && !res.TimedOut {
		return nil, fmt.Errorf("run canceled: %w", ctx.Err())
	}
	if res.ExitCode == runpolicy.ExitRefused && strings.HasPrefix(res.Stderr, runpolicy.MessagePrefix) {
		// The bootstrap refused before the code ran.
		return nil, fmt.Errorf("warm sandbox refused the run: %s", strings.TrimPrefix(strings.TrimSpace(res.Stderr), runpolicy.MessagePrefix))
	}
	return res, nil
}
