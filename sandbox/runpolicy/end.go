package runpolicy

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
)

// A warm run answers as soon as its code is done, not when its deno has
// exited: tearing a deno process down (V8's heap, its threads, then the
// kernel freeing a large address space) takes tens of milliseconds, as
// long as the rest of a small run. When a claim carries an end token,
// the bootstrap writes an end line to stdout and then to stderr from the
// last thing deno runs before exiting by itself: an "unload" listener
// moved behind all others each time "beforeunload" is dispatched (the
// event loop is empty), or, when the code may use Node's process object
// (Claim.NodeExit, or it read globalThis.process), a process "exit"
// listener added then. Before it writes the line it revokes its own
// write permission, so the code can no longer change its files, and it
// says whether out/ exists then. What the code still prints after the
// line (from an "unload" listener added by another listener, or an
// "exit" listener added through an import of node:process in code that
// never names process) is not in the answer.
//
// The line is EndPrefix, the token, ":", the exit code, ":", 1 if out/
// exists (or may: it could not tell) else 0, and a newline. The token is
// random per run and only the bootstrap knows it (the code cannot read
// the claim), so the code cannot end its run early by printing the line.
// A run that ends any other way (an uncaught error, Deno.exit, a kill)
// writes no end line: its runner waits for deno to exit, as for a cold
// run.

// EndPrefix starts an end line.
const EndPrefix = "\x1ecodeforge-end:"

// NewEndToken is a fresh random end token.
func NewEndToken() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("end token: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// CheckEndToken refuses a token that is not 32 lowercase hex digits.
func CheckEndToken(t string) error {
	if len(t) != 32 {
		return fmt.Errorf("end token %q is not 32 hex digits", trim(t))
	}
	for _, c := range []byte(t) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return fmt.Errorf("end token %q is not 32 lowercase hex digits", trim(t))
		}
	}
	return nil
}

// MayUseNodeExit reports whether code may add Node process "exit"
// listeners: it names process.
func MayUseNodeExit(code string) bool { return strings.Contains(code, "process") }

// End is what an end line says.
type End struct {
	ExitCode int
	// Out is false when the run's out/ did not exist once its write
	// permission was gone: it has no files to hand back.
	Out bool
}

// EndWriter passes a stream of a run's output on to its writer, up to
// the run's end line, which it takes out with anything after it (whose
// last few KB After keeps: the wrapper's own last lines). It holds back a
// tail that could be the start of the end line until it knows; Flush
// writes it when the stream ends without one.
type EndWriter struct {
	dst    io.Writer
	prefix []byte

	mu      sync.Mutex
	pending []byte
	end     *End
	after   []byte
	done    chan struct{}
	pass    bool // a watcher: everything goes on to dst, the end line too
}

// maxAfter bounds what After keeps.
const maxAfter = 4 << 10

// NewEndWriter passes output to dst until the end line of token.
func NewEndWriter(dst io.Writer, token string) *EndWriter {
	return &EndWriter{dst: dst, prefix: []byte(EndPrefix + token + ":"), done: make(chan struct{})}
}

// NewEndWatcher passes everything on to dst unchanged (the end line
// too) and notes the end line of the token Watch gives it later: the
// wrapper uses one to end deno at the end line.
func NewEndWatcher(dst io.Writer) *EndWriter {
	return &EndWriter{dst: dst, pass: true, done: make(chan struct{})}
}

// Watch starts looking for token's end line.
func (e *EndWriter) Watch(token string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.prefix = []byte(EndPrefix + token + ":")
}

// maxEndRest bounds what may follow the prefix before the newline.
const maxEndRest = 16

// Write implements io.Writer. It never fails because of dst: a run's
// output writer keeps what fits and counts the rest.
func (e *EndWriter) Write(p []byte) (int, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.end != nil || e.prefix == nil {
		if e.pass {
			_, _ = e.dst.Write(p)
		} else {
			e.keepAfter(p)
		}
		return len(p), nil
	}
	e.pending = append(e.pending, p...)
	for {
		i := bytes.Index(e.pending, e.prefix)
		if i < 0 {
			break
		}
		rest := e.pending[i+len(e.prefix):]
		nl := bytes.IndexByte(rest, '\n')
		if nl < 0 && len(rest) <= maxEndRest {
			e.emit(i) // the rest of the line is still to come
			return len(p), nil
		}
		if end, ok := parseEnd(rest[:max(nl, 0)]); ok && nl >= 0 {
			if e.pass {
				e.emit(len(e.pending))
			} else {
				e.keepAfter(rest[nl+1:]) // first: emit moves pending's bytes
				e.emit(i)
			}
			e.pending = nil
			e.end = &end
			close(e.done)
			return len(p), nil
		}
		// Not an end line after all: it is output.
		e.emit(i + len(e.prefix))
	}
	e.emit(len(e.pending) - overlap(e.pending, e.prefix))
	return len(p), nil
}

func (e *EndWriter) keepAfter(p []byte) {
	e.after = append(e.after, p...)
	if len(e.after) > maxAfter {
		e.after = append(e.after[:0], e.after[len(e.after)-maxAfter:]...)
	}
}

// After is the end of what came after the end line (at most 4 KB).
func (e *EndWriter) After() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return string(e.after)
}

// emit writes pending[:n] on and keeps the rest.
func (e *EndWriter) emit(n int) {
	if n > 0 {
		_, _ = e.dst.Write(e.pending[:n])
		e.pending = append(e.pending[:0], e.pending[n:]...)
	}
}

// Flush writes what is held back: the stream ended.
func (e *EndWriter) Flush() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.end == nil {
		e.emit(len(e.pending))
	}
}

// WaitEnd waits until out and err (a run's two streams) have both seen
// the end line, or done is closed first. It reports the end line and
// whether both came.
func WaitEnd(done <-chan struct{}, out, err *EndWriter) (End, bool) {
	for _, w := range []*EndWriter{out, err} {
		select {
		case <-done:
			return End{}, false
		case <-w.Done():
		}
	}
	return out.End()
}

// Ended reports whether out and err have both seen the end line (false
// for nil writers: a cold run has none).
func Ended(out, err *EndWriter) bool {
	if out == nil || err == nil {
		return false
	}
	_, o := out.End()
	_, e := err.End()
	return o && e
}

// Done is closed once the end line has been seen.
func (e *EndWriter) Done() <-chan struct{} { return e.done }

// End is the end line's content, once Done is closed.
func (e *EndWriter) End() (End, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.end == nil {
		return End{}, false
	}
	return *e.end, true
}

// overlap is the length of the longest suffix of b that is a proper
// prefix of prefix.
func overlap(b, prefix []byte) int {
	for n := min(len(b), len(prefix)-1); n > 0; n-- {
		if bytes.HasSuffix(b, prefix[:n]) {
			return n
		}
	}
	return 0
}

// parseEnd reads "CODE:OUT".
func parseEnd(b []byte) (End, bool) {
	code, out, ok := bytes.Cut(b, []byte(":"))
	if !ok || (string(out) != "0" && string(out) != "1") {
		return End{}, false
	}
	n, err := strconv.Atoi(string(code))
	if err != nil || n < 0 || n > 255 {
		return End{}, false
	}
	return End{ExitCode: n, Out: string(out) == "1"}, true
}
