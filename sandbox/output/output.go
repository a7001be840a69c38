// Package output collects what a sandboxed process prints without ever
// holding more than a fixed number of bytes, however much it prints: a
// Collector keeps the head of a stream up to a limit, counts the rest, and
// hands complete lines of what it kept to a callback as they arrive; a Tail
// keeps the last few bytes (to look for a crash message after a flood). Both
// are io.Writers that never fail and never block, so the process is always
// drained to its end.
package output

import (
	"bytes"
	"sync"
	"unicode/utf8"
)

// DefaultMaxLine is the longest piece of a line handed to OnLine when
// Options.MaxLine is zero.
const DefaultMaxLine = 16 << 10

// Options configures a Collector.
type Options struct {
	// Limit is the most bytes kept. Bytes past it are counted, not kept.
	// Zero or less keeps nothing.
	Limit int
	// OnLine, if set, is called with each line of the kept output as soon as
	// its newline arrives, without the "\n" (or "\r\n"). A line longer than
	// MaxLine is delivered in pieces of at most MaxLine bytes (cut on a UTF-8
	// boundary); a final line without a newline is delivered by Close, or as
	// soon as the limit is reached. Only kept bytes are delivered, so the
	// callback never sees more than Limit bytes in all. It runs inside
	// Write and must not block for long.
	OnLine func(line string)
	// MaxLine bounds the pieces handed to OnLine; zero means DefaultMaxLine.
	MaxLine int
}

// Collector is an io.Writer that keeps the first Limit bytes written to it.
// It is safe for concurrent use; Write never fails and never blocks.
type Collector struct {
	mu      sync.Mutex
	limit   int
	maxLine int
	onLine  func(string)

	buf       []byte // kept bytes, len(buf) <= limit
	lineStart int    // offset in buf of the line not yet handed to onLine
	dropped   int64
	full      bool // the limit was reached; nothing more is kept
	closed    bool
}

// NewCollector returns a Collector with the given options.
func NewCollector(opts Options) *Collector {
	c := &Collector{limit: max(opts.Limit, 0), maxLine: opts.MaxLine, onLine: opts.OnLine}
	if c.maxLine <= 0 {
		c.maxLine = DefaultMaxLine
	}
	return c
}

// Write keeps what fits under the limit and counts the rest. It always
// returns len(p), nil.
func (c *Collector) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(p)
	if c.full || c.closed {
		c.dropped += int64(n)
		return n, nil
	}
	room := c.limit - len(c.buf)
	if len(p) <= room {
		c.grow(len(p))
		c.buf = append(c.buf, p...)
		c.emitLines()
		return n, nil
	}
	// This write crosses the limit: keep what fits, minus a rune cut in
	// half, and stop keeping anything after it.
	c.grow(room)
	c.buf = append(c.buf, p[:room]...)
	cut := runeCut(c.buf)
	c.buf = c.buf[:cut]
	c.dropped += int64(n - room + (c.limit - cut))
	c.full = true
	c.lineStart = min(c.lineStart, cut)
	c.emitLines()
	c.flushLine()
	return n, nil
}

// grow makes room for n more bytes without reserving more than the limit,
// so a Collector never holds memory beyond Limit bytes.
func (c *Collector) grow(n int) {
	need := len(c.buf) + n
	if need <= cap(c.buf) {
		return
	}
	newCap := min(max(2*cap(c.buf), need, 512), c.limit)
	nb := make([]byte, len(c.buf), newCap)
	copy(nb, c.buf)
	c.buf = nb
}

// emitLines hands complete lines, and over-long pieces of the current
// line, to onLine.
func (c *Collector) emitLines() {
	if c.onLine == nil {
		c.lineStart = len(c.buf)
		return
	}
	for {
		rest := c.buf[c.lineStart:]
		if i := bytes.IndexByte(rest, '\n'); i >= 0 && i <= c.maxLine {
			c.onLine(string(bytes.TrimSuffix(rest[:i], []byte("\r"))))
			c.lineStart += i + 1
			continue
		}
		if len(rest) > c.maxLine {
			cut := runeCut(rest[:c.maxLine])
			if cut == 0 {
				cut = c.maxLine
			}
			c.onLine(string(rest[:cut]))
			c.lineStart += cut
			continue
		}
		return
	}
}

// flushLine hands a pending partial line to onLine.
func (c *Collector) flushLine() {
	if c.onLine != nil && c.lineStart < len(c.buf) {
		c.onLine(string(bytes.TrimSuffix(c.buf[c.lineStart:], []byte("\r"))))
	}
	c.lineStart = len(c.buf)
}

// Close delivers a final line that has no newline to OnLine. Bytes written
// after Close are counted as dropped. It always returns nil.
func (c *Collector) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed {
		c.closed = true
		c.flushLine()
	}
	return nil
}

// Bytes returns a copy of the kept bytes.
func (c *Collector) Bytes() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return bytes.Clone(c.buf)
}

// String returns the kept bytes as a string.
func (c *Collector) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return string(c.buf)
}

// Len returns the number of kept bytes.
func (c *Collector) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.buf)
}

// Dropped returns how many bytes were written but not kept.
func (c *Collector) Dropped() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dropped
}

// Truncated reports whether any byte was dropped.
func (c *Collector) Truncated() bool { return c.Dropped() > 0 }

// runeCut returns the length of b without a trailing incomplete UTF-8
// sequence (at most utf8.UTFMax-1 bytes shorter). Invalid bytes are kept:
// only a multi-byte rune that was cut in half is removed.
func runeCut(b []byte) int {
	for i := len(b) - 1; i >= 0 && i >= len(b)-(utf8.UTFMax-1); i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return i
			}
			break
		}
	}
	return len(b)
}

// Tail is an io.Writer that keeps only the last N bytes written to it, for
// finding a crash message at the end of a stream that overflowed its
// Collector. It is safe for concurrent use.
type Tail struct {
	mu  sync.Mutex
	n   int
	buf []byte // len <= 2n; the last n bytes are the tail
}

// NewTail returns a Tail that keeps the last n bytes.
func NewTail(n int) *Tail { return &Tail{n: max(n, 0), buf: make([]byte, 0, 2*max(n, 0))} }

// Write keeps the last N bytes of what has been written. It always returns
// len(p), nil.
func (t *Tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(p)
	if t.n == 0 {
		return n, nil
	}
	if len(p) >= t.n {
		t.buf = append(t.buf[:0], p[len(p)-t.n:]...)
		return n, nil
	}
	if len(t.buf)+len(p) > cap(t.buf) {
		keep := t.buf[len(t.buf)-min(len(t.buf), t.n-len(p)):]
		t.buf = append(t.buf[:0], keep...)
	}
	t.buf = append(t.buf, p...)
	return n, nil
}

// String returns the last N bytes written (fewer if less was written).
func (t *Tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf[len(t.buf)-min(len(t.buf), t.n):])
}
