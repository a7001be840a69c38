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

// pool keeps up to size warm processes for the warm spec, which it
// learns from the runs it serves: a run the warm processes cannot serve
// (a host or read path they were not started with, another CA) starts
// cold, and the pool is replaced by processes whose permissions cover
// both. What a warm process has beyond its run's needs, the claim
// revokes before the run's code starts.
type pool struct {
	r    *Runner
	size int

	mu       sync.Mutex
	key      *runpolicy.Spec
	ready    []*warmProc
	starting int
	gen      int
	closed   bool
	fails    int // consecutive start failures; refills stop after maxFails
	wg       sync.WaitGroup
}

// maxFails is how many warm starts in a row may fail before the pool
// stops refilling until a run succeeds cold.
const maxFails = 3

// take returns a warm process that can serve want, and the claim that
// narrows it to want; nil when there is none (the run starts cold).
func (p *pool) take(want runpolicy.Spec) (*warmProc, runpolicy.Claim) {
	if p.size <= 0 {
		return nil, runpolicy.Claim{}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, runpolicy.Claim{}
	}
	key := warmKey(want)
	if p.key != nil {
		if _, ok := runpolicy.Covers(*p.key, key); !ok {
			key = union(*p.key, key)
			p.replaceLocked(&key)
			return nil, runpolicy.Claim{}
		}
	} else {
		p.replaceLocked(&key)
		return nil, runpolicy.Claim{}
	}
	ca := stampCA(want.CACert)
	for len(p.ready) > 0 {
		w := p.ready[0]
		p.ready = p.ready[1:]
		if w.ca != ca {
			// A new proxy CA: every warm process trusts the old one.
			p.discardLocked(w)
			p.replaceLocked(p.key)
			return nil, runpolicy.Claim{}
		}
		if w.exited() {
			p.discardLocked(w)
			continue
		}
		claim, ok := runpolicy.Covers(w.spec, want)
		if !ok {
			p.discardLocked(w)
			continue
		}
		p.refillLocked()
		return w, claim
	}
	p.refillLocked()
	return nil, runpolicy.Claim{}
}

// warmKey is want without what belongs to one run.
func warmKey(want runpolicy.Spec) runpolicy.Spec {
	want.Scratch, want.DenoDir, want.ProxyURL = "", "", ""
	want.Hosts = slices.Clone(want.Hosts)
	want.ReadPaths = slices.Clone(want.ReadPaths)
	return want
}

// union is a spec whose permissions cover both a and b, which agree on
// everything but hosts and read paths (or b wins).
func union(a, b runpolicy.Spec) runpolicy.Spec {
	if a.AllHosts != b.AllHosts || a.MemoryMB != b.MemoryMB || a.Skills != b.Skills || a.CACert != b.CACert {
		return b
	}
	for _, h := range a.Hosts {
		if !slices.Contains(b.Hosts, h) {
			b.Hosts = append(b.Hosts, h)
		}
	}
	for _, r := range a.ReadPaths {
		if !slices.Contains(b.ReadPaths, r) {
			b.ReadPaths = append(b.ReadPaths, r)
		}
	}
	return b
}

// replaceLocked drops the warm processes and starts new ones for key.
func (p *pool) replaceLocked(key *runpolicy.Spec) {
	p.key = key
	p.gen++
	p.fails = 0
	for _, w := range p.ready {
		p.discardLocked(w)
	}
	p.ready = nil
	p.refillLocked()
}

func (p *pool) refillLocked() {
	for !p.closed && p.key != nil && p.fails < maxFails && len(p.ready)+p.starting < p.size {
		p.starting++
		gen, key := p.gen, *p.key
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			w, err := p.r.startWarm(key)
			p.mu.Lock()
			defer p.mu.Unlock()
			p.starting--
			switch {
			case err != nil:
				p.fails++
				p.r.log.Warn("warm start failed", "err", err, "failures", p.fails)
			case p.closed || gen != p.gen:
				p.discardLocked(w)
			default:
				p.fails = 0
				p.ready = append(p.ready, w)
			}
		}()
	}
}

// discardLocked kills w and removes its files in the background.
func (p *pool) discardLocked(w *warmProc) {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		p.r.endWarm(w)
	}()
}

// close discards every warm process and waits until they are gone.
func (p *pool) close() {
	p.mu.Lock()
	p.closed = true
	for _, w := range p.ready {
		p.discardLocked(w)
	}
	p.ready = nil
	p.mu.Unlock()
	p.wg.Wait()
}

// idle reports how many warm processes wait for a run.
func (p *pool) idle() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.ready)
}

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
			return fail(scratchError(dir, err))
		}
	}
	for name, content := range runpolicy.WarmFiles(spec) {
		f := filepath.Join(spec.DenoDir, name)
		if err := os.WriteFile(f, []byte(content), 0o400); err != nil {
			return fail(scratchError(f, err))
		}
	}
	w := &warmProc{id: id, spec: spec, ca: stampCA(spec.CACert), done: make(chan struct{})}
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
	line, err := claim.Line()
	if err != nil {
		r.endWarm(w)
		return nil, err
	}
	code := runpolicy.CodeFile(scratch)
	if err := os.WriteFile(code, []byte(req.Code), 0o600); err != nil {
		r.endWarm(w)
		return nil, scratchError(code, err)
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
	// cleanup waits for deno's output to end (something that outlived
	// deno and holds it open is killed), then removes the run's files.
	cleanup := func() {
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
	early := false
	select {
	case <-w.done:
	case <-outEnd.Done():
		select {
		case <-errEnd.Done():
			early = true
		case <-w.done:
		}
	}
	duration := time.Since(start)
	stopKill()
	if early {
		// The code is done and can write no more files: what is left
		// is deno's teardown, which nobody needs to wait for.
		_ = killGroup(pid)
		end, _ := outEnd.End()
		stdout.Close()
		stderr.Close()
		if req.OnOutDir != nil && ctx.Err() == nil {
			req.OnOutDir(filepath.Join(scratch, "out"), nil)
		}
		r.bg.Go(cleanup)
		res := &sandbox.Result{
			Stdout:       stdout.String(),
			Stderr:       stderr.String(),
			ExitCode:     end.ExitCode,
			Truncated:    stdout.Truncated() || stderr.Truncated(),
			DroppedBytes: stdout.Dropped() + stderr.Dropped(),
			Duration:     duration,
		}
		r.logDone(w.id, res, stdout, stderr, "early", true)
		return res, nil
	}
	defer cleanup()
	<-w.done
	copied := make(chan struct{})
	go func() { copies.Wait(); close(copied) }()
	select {
	case <-copied:
	case <-time.After(waitDelay):
		// Something outlived deno and holds its output open: end it too.
		_ = killGroup(pid)
		w.stdout.Close()
		w.stderr.Close()
		<-copied
	}
	stdout.Close()
	stderr.Close()
	if req.OnOutDir != nil && ctx.Err() == nil {
		req.OnOutDir(filepath.Join(scratch, "out"), nil)
	}
	state := w.cmd.ProcessState
	if state == nil {
		return nil, errors.New("wait for deno: no exit status")
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
	r.logDone(w.id, res, stdout, stderr)
	if killed.Load() && !res.TimedOut {
		return nil, fmt.Errorf("run canceled: %w", ctx.Err())
	}
	if res.ExitCode == runpolicy.ExitRefused && strings.HasPrefix(res.Stderr, runpolicy.MessagePrefix) {
		// The bootstrap refused before the code ran.
		return nil, fmt.Errorf("warm sandbox refused the run: %s", strings.TrimPrefix(strings.TrimSpace(res.Stderr), runpolicy.MessagePrefix))
	}
	return res, nil
}

// coldOK tells the pool a cold run just worked: warm starts that failed
// before (the sandbox was down) may be tried again.
func (p *pool) coldOK() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fails >= maxFails {
		p.fails = 0
		p.refillLocked()
	}
}
