package docker

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

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

// lateWriter buffers up to 64 KB until set gives it its writer. With a
// ready channel, the stream's first byte must be runpolicy.ReadyByte: it
// is taken out and closes ready (a warm exec's deno has started).
type lateWriter struct {
	mu    sync.Mutex
	w     io.Writer
	buf   bytes.Buffer
	ready chan struct{} // set before the stream is copied, never changed
	first bool          // the first byte has been seen
}

func (l *lateWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(p)
	if l.ready != nil && !l.first && len(p) > 0 {
		l.first = true
		if p[0] == runpolicy.ReadyByte {
			close(l.ready)
			p = p[1:]
		} // else something else came first: never ready
	}
	if l.w != nil {
		_, err := l.w.Write(p)
		return n, err
	}
	if room := 64<<10 - l.buf.Len(); room > 0 {
		l.buf.Write(p[:min(len(p), room)])
	}
	return n, nil
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
// runID, and starts copying its output. A warm exec's first stdout byte
// is its deno's ReadyByte (see lateWriter).
func (r *Runner) openExec(ctx context.Context, runID string, cmd, env []string, warm bool) (*stream, error) {
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
	if warm {
		s.out.ready = make(chan struct{})
	}
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

// Spec, Usable and Discard make a warm exec a warmpool.Item: one whose
// stream ended (the sandbox restarted) is unusable; discarding it closes
// its stream, and the wrapper, seeing EOF before a claim, ends its deno
// and removes its files.
func (s *stream) Spec() runpolicy.Spec { return s.key }
func (s *stream) Usable() bool         { return !s.ended() }
func (s *stream) Discard()             { s.close() }

// warmStartTimeout bounds how long a warm exec's deno may take to start.
const warmStartTimeout = 30 * time.Second

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
	s, err := r.openExec(ctx, id, []string{wrapper, "--warm"}, env, true)
	if err != nil {
		return nil, err
	}
	s.key = key
	// Warm only once deno has started and waits for its run: a run never
	// waits for another's start-up.
	timer := time.NewTimer(warmStartTimeout)
	defer timer.Stop()
	select {
	case <-s.out.ready:
		return s, nil
	case <-s.done:
		err = fmt.Errorf("warm exec ended before its deno started: %s", firstLine(s.err.buf.String()))
	case <-timer.C:
		err = fmt.Errorf("warm exec's deno did not start within %v", warmStartTimeout)
	}
	s.close()
	return nil, err
}
