package docker

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"sync"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"

	"github.com/codeforge/codeforge/sandbox"
	"github.com/codeforge/codeforge/sandbox/runpolicy"
)

// stream is one attached exec of codeforge-run. Its output is copied,
// from the start, into writers that a run sets when it takes the exec
// (before that, into a small buffer), so a warm exec whose sandbox goes
// away is noticed (done closes) before anyone takes it.
type stream struct {
	runID, execID string
	key           runpolicy.Spec // a warm exec's permissions
	att           client.HijackedResponse
	out, err      *lateWriter
	done          chan struct{} // the copy ended
	copyErr       error
	closeOnce     sync.Once
}

func (s *stream) close() { s.closeOnce.Do(s.att.Close) }

func (s *stream) ended() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// lateWriter buffers up to 64 KB until set gives it its writer.
type lateWriter struct {
	mu  sync.Mutex
	w   io.Writer
	buf bytes.Buffer
}

func (l *lateWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.w != nil {
		return l.w.Write(p)
	}
	if room := 64<<10 - l.buf.Len(); room > 0 {
		l.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (l *lateWriter) set(w io.Writer) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.buf.Len() > 0 {
		_, _ = w.Write(l.buf.Bytes())
		l.buf.Reset()
	}
	l.w = w
}

// openExec creates and starts (attached) an exec of cmd with env for run
// runID, and starts copying its output.
func (r *Runner) openExec(ctx context.Context, runID string, cmd, env []string) (*stream, error) {
	created, err := r.cli.ExecCreate(ctx, r.container, client.ExecCreateOptions{
		AttachStdin: true, AttachStdout: true, AttachStderr: true,
		Env: env, Cmd: cmd,
	})
	if err != nil {
		return nil, fmt.Errorf("docker exec create: %w", err)
	}
	att, err := r.cli.ExecAttach(ctx, created.ID, client.ExecAttachOptions{})
	if err != nil {
		// The start may have reached the engine: make sure nothing runs.
		r.kill(runID)
		return nil, fmt.Errorf("docker exec start: %w", err)
	}
	s := &stream{runID: runID, execID: created.ID, att: att.HijackedResponse, out: &lateWriter{}, err: &lateWriter{}, done: make(chan struct{})}
	go func() {
		_, s.copyErr = stdcopy.StdCopy(s.out, s.err, att.Reader)
		close(s.done)
	}()
	return s, nil
}

// warmKey is the permissions a run needs, as a warm exec's Spec.
func warmKey(req sandbox.Request, memoryMB int) runpolicy.Spec {
	return runpolicy.Run{Hosts: slices.Clone(req.AllowHosts), AllHosts: req.AllowAllHosts,
		ReadPaths: slices.Clone(req.ReadPaths), MemoryMB: memoryMB}.Spec(true)
}

// pool keeps up to size warm execs (codeforge-run --warm: deno started
// and waiting for its run) for the permissions it learns from the runs
// it serves, like the local backend's: a run it cannot cover starts cold
// and the pool is replaced by execs covering both. An exec whose stream
// ended (the sandbox restarted) is dropped when found.
type pool struct {
	r    *Runner
	size int

	mu       sync.Mutex
	key      *runpolicy.Spec
	ready    []*stream
	starting int
	gen      int
	closed   bool
	fails    int
	wg       sync.WaitGroup
}

const maxFails = 3

func (p *pool) take(want runpolicy.Spec) *stream {
	if p.size <= 0 {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	if p.key == nil {
		p.replaceLocked(want)
		return nil
	}
	if _, ok := runpolicy.Covers(*p.key, want); !ok {
		p.replaceLocked(union(*p.key, want))
		return nil
	}
	for len(p.ready) > 0 {
		s := p.ready[0]
		p.ready = p.ready[1:]
		if _, ok := runpolicy.Covers(s.key, want); !ok || s.ended() {
			s.close()
			continue
		}
		p.refillLocked()
		return s
	}
	p.refillLocked()
	return nil
}

func union(a, b runpolicy.Spec) runpolicy.Spec {
	if a.AllHosts != b.AllHosts {
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

func (p *pool) replaceLocked(key runpolicy.Spec) {
	p.key = &key
	p.gen++
	p.fails = 0
	for _, s := range p.ready {
		s.close() // the wrapper sees EOF, ends its deno, removes its files
	}
	p.ready = nil
	p.refillLocked()
}

// flush drops the warm execs (the sandbox may have been replaced).
func (p *pool) flush() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.key != nil {
		p.replaceLocked(*p.key)
	}
}

func (p *pool) refillLocked() {
	for !p.closed && p.key != nil && p.fails < maxFails && len(p.ready)+p.starting < p.size {
		p.starting++
		gen, key := p.gen, *p.key
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			s, err := p.r.startWarm(key)
			p.mu.Lock()
			defer p.mu.Unlock()
			p.starting--
			switch {
			case err != nil:
				p.fails++
				p.r.log.Warn("warm exec failed", "err", err, "failures", p.fails)
			case p.closed || gen != p.gen:
				s.close()
			default:
				p.fails = 0
				p.ready = append(p.ready, s)
			}
		}()
	}
}

func (p *pool) close() {
	p.mu.Lock()
	p.closed = true
	for _, s := range p.ready {
		s.close()
	}
	p.ready = nil
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *pool) idle() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.ready)
}

// startWarm opens a warm exec for key.
func (r *Runner) startWarm(key runpolicy.Spec) (*stream, error) {
	id, err := sandbox.NewRunID()
	if err != nil {
		return nil, err
	}
	env, err := runpolicy.Run{ID: id, Hosts: key.Hosts, AllHosts: key.AllHosts, ReadPaths: key.ReadPaths, MemoryMB: r.memoryMB}.WarmEnv()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), controlTimeout)
	defer cancel()
	s, err := r.openExec(ctx, id, []string{wrapper, "--warm"}, env)
	if err != nil {
		return nil, err
	}
	s.key = key
	return s, nil
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
