package output

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
)

func TestCollectorKeepsUpToLimit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		limit       int
		writes      []string
		wantKept    string
		wantDropped int64
	}{
		{"empty", 10, nil, "", 0},
		{"under", 10, []string{"abc", "def"}, "abcdef", 0},
		{"exactly at limit", 6, []string{"abc", "def"}, "abcdef", 0},
		{"crossing in one write", 4, []string{"abcdef"}, "abcd", 2},
		{"crossing across writes", 4, []string{"abc", "def", "ghi"}, "abcd", 5},
		{"full then more", 3, []string{"abc", "d", "ef"}, "abc", 3},
		{"zero limit keeps nothing", 0, []string{"abc"}, "", 3},
		{"negative limit keeps nothing", -5, []string{"abc"}, "", 3},
		// "é" is 2 bytes, "€" 3: a cut in the middle of a rune drops the whole rune.
		{"cut inside a 2-byte rune", 4, []string{"abcé"}, "abc", 2},
		{"cut inside a 3-byte rune", 4, []string{"ab€d"}, "ab", 4},
		{"rune completed exactly at limit", 5, []string{"ab€", "d"}, "ab€", 1},
		{"invalid bytes are kept", 3, []string{"a\xff\xfeb"}, "a\xff\xfe", 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := NewCollector(Options{Limit: tc.limit})
			var total int
			for _, w := range tc.writes {
				n, err := c.Write([]byte(w))
				if n != len(w) || err != nil {
					t.Fatalf("Write(%q) = %d, %v; want %d, nil", w, n, err, len(w))
				}
				total += len(w)
			}
			if got := c.String(); got != tc.wantKept {
				t.Errorf("kept %q, want %q", got, tc.wantKept)
			}
			if got := c.Dropped(); got != tc.wantDropped {
				t.Errorf("dropped %d, want %d", got, tc.wantDropped)
			}
			if got, want := c.Truncated(), tc.wantDropped > 0; got != want {
				t.Errorf("Truncated() = %v, want %v", got, want)
			}
			if int64(c.Len())+c.Dropped() != int64(total) {
				t.Errorf("kept %d + dropped %d != written %d", c.Len(), c.Dropped(), total)
			}
			if !bytes.Equal(c.Bytes(), []byte(tc.wantKept)) {
				t.Errorf("Bytes() = %q, want %q", c.Bytes(), tc.wantKept)
			}
		})
	}
}

// lines records what OnLine is handed.
type lines struct {
	mu  sync.Mutex
	got []string
}

func (l *lines) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.got = append(l.got, s)
}

func (l *lines) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.got...)
}

func TestCollectorLines(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		limit   int
		maxLine int
		writes  []string
		// beforeClose are the lines delivered by the writes alone.
		beforeClose []string
		afterClose  []string
	}{
		{"whole lines", 100, 0, []string{"a\nb\n"}, []string{"a", "b"}, []string{"a", "b"}},
		{"split across writes", 100, 0, []string{"he", "llo\nwor", "ld\n"}, []string{"hello", "world"}, []string{"hello", "world"}},
		{"crlf and empty lines", 100, 0, []string{"a\r\n\n\nb\n"}, []string{"a", "", "", "b"}, []string{"a", "", "", "b"}},
		{"final line without newline waits for Close", 100, 0, []string{"a\nlast"}, []string{"a"}, []string{"a", "last"}},
		{"long line in pieces", 100, 4, []string{"abcdefghij\n"}, []string{"abcd", "efgh", "ij"}, []string{"abcd", "efgh", "ij"}},
		{"long line without newline", 100, 4, []string{"abcdef", "ghij"}, []string{"abcd", "efgh"}, []string{"abcd", "efgh", "ij"}},
		{"line of exactly MaxLine", 100, 4, []string{"abcd\nef\n"}, []string{"abcd", "ef"}, []string{"abcd", "ef"}},
		{"pieces cut on rune boundaries", 100, 4, []string{"abc€def\n"}, []string{"abc", "€d", "ef"}, []string{"abc", "€d", "ef"}},
		{"only kept bytes, flushed at the limit", 7, 0, []string{"one\ntwo\nthree\n"}, []string{"one", "two"}, []string{"one", "two"}},
		{"partial line flushed at the limit", 6, 0, []string{"one\ntwo\n"}, []string{"one", "tw"}, []string{"one", "tw"}},
		{"nothing after the limit", 4, 0, []string{"one\n", "two\n"}, []string{"one"}, []string{"one"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var l lines
			c := NewCollector(Options{Limit: tc.limit, MaxLine: tc.maxLine, OnLine: l.add})
			for _, w := range tc.writes {
				c.Write([]byte(w))
			}
			if got := l.all(); !equal(got, tc.beforeClose) {
				t.Errorf("before Close: lines %q, want %q", got, tc.beforeClose)
			}
			c.Close()
			c.Close() // idempotent
			if got := l.all(); !equal(got, tc.afterClose) {
				t.Errorf("after Close: lines %q, want %q", got, tc.afterClose)
			}
		})
	}
}

func TestCollectorWriteAfterCloseIsDropped(t *testing.T) {
	t.Parallel()
	var l lines
	c := NewCollector(Options{Limit: 100, OnLine: l.add})
	c.Write([]byte("a\n"))
	c.Close()
	c.Write([]byte("b\n"))
	if c.String() != "a\n" || c.Dropped() != 2 || !equal(l.all(), []string{"a"}) {
		t.Errorf("after Close: kept %q, dropped %d, lines %q; want \"a\\n\", 2, [a]", c.String(), c.Dropped(), l.all())
	}
}

// TestCollectorFloodStaysBounded writes 1 GiB, once as many lines and once
// as a single line with no newline, and checks that the Collector never
// reserves more than its limit and hands OnLine only bounded pieces.
func TestCollectorFloodStaysBounded(t *testing.T) {
	t.Parallel()
	const (
		limit   = 1 << 20
		maxLine = 4 << 10
		total   = 1 << 30
	)
	lineChunk := bytes.Repeat([]byte("0123456789abcdef0123456789abcdef0123456789abcdef012345678901234\n"), 1024) // 64 KiB
	noNewline := bytes.Repeat([]byte("x"), 64<<10)
	for name, chunk := range map[string][]byte{"many lines": lineChunk, "one line": noNewline} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var pieces, delivered, longest int
			c := NewCollector(Options{Limit: limit, MaxLine: maxLine, OnLine: func(s string) {
				pieces++
				delivered += len(s)
				longest = max(longest, len(s))
			}})
			for written := 0; written < total; written += len(chunk) {
				if _, err := c.Write(chunk); err != nil {
					t.Fatal(err)
				}
				if cap(c.buf) > limit {
					t.Fatalf("after %d bytes the collector reserved %d bytes, over its limit %d", written, cap(c.buf), limit)
				}
			}
			c.Close()
			if c.Len() != limit || c.Dropped() != total-limit || !c.Truncated() {
				t.Errorf("kept %d, dropped %d, truncated %v; want %d, %d, true", c.Len(), c.Dropped(), c.Truncated(), limit, total-limit)
			}
			if longest > maxLine {
				t.Errorf("OnLine got a %d-byte piece, over MaxLine %d", longest, maxLine)
			}
			if delivered > limit || pieces == 0 {
				t.Errorf("OnLine got %d bytes in %d pieces; want at most the %d kept bytes, at least one piece", delivered, pieces, limit)
			}
		})
	}
}

func TestCollectorOneHugeWrite(t *testing.T) {
	t.Parallel()
	huge := bytes.Repeat([]byte("y"), 64<<20)
	var longest int
	c := NewCollector(Options{Limit: 1000, MaxLine: 100, OnLine: func(s string) { longest = max(longest, len(s)) }})
	c.Write(huge)
	if c.Len() != 1000 || c.Dropped() != int64(len(huge)-1000) || cap(c.buf) > 1000 || longest != 100 {
		t.Errorf("kept %d (cap %d), dropped %d, longest piece %d; want 1000 (cap <= 1000), %d, 100",
			c.Len(), cap(c.buf), c.Dropped(), longest, len(huge)-1000)
	}
}

func TestCollectorConcurrentWrites(t *testing.T) {
	t.Parallel()
	var l lines
	c := NewCollector(Options{Limit: 1 << 20, OnLine: l.add})
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 100 {
				fmt.Fprintf(c, "writer %d line %d\n", i, j)
			}
		})
	}
	wg.Wait()
	c.Close()
	if got := len(l.all()); got != 800 {
		t.Errorf("got %d lines, want 800", got)
	}
	for _, s := range l.all() {
		if !strings.HasPrefix(s, "writer ") {
			t.Fatalf("interleaved line %q", s)
		}
	}
}

func TestCollectorKeptOutputIsValidUTF8(t *testing.T) {
	t.Parallel()
	text := strings.Repeat("añ€😀", 100)
	for limit := range 40 {
		c := NewCollector(Options{Limit: limit})
		for _, b := range []byte(text) { // one byte per write: the worst case
			c.Write([]byte{b})
		}
		if !utf8.Valid(c.Bytes()) || int64(c.Len())+c.Dropped() != int64(len(text)) || c.Len() > limit || c.Len() < limit-3 {
			t.Errorf("limit %d: kept %q (valid %v), dropped %d of %d", limit, c.String(), utf8.Valid(c.Bytes()), c.Dropped(), len(text))
		}
	}
}

func TestTail(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		n      int
		writes []string
		want   string
	}{
		{"nothing", 4, nil, ""},
		{"short", 4, []string{"ab"}, "ab"},
		{"exact", 4, []string{"abcd"}, "abcd"},
		{"one long write", 4, []string{"abcdefgh"}, "efgh"},
		{"many small writes", 4, []string{"a", "b", "c", "d", "e", "f", "g"}, "defg"},
		{"mixed", 4, []string{"abc", "defghij", "k", "lm"}, "jklm"},
		{"zero keeps nothing", 0, []string{"abc"}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tail := NewTail(tc.n)
			for _, w := range tc.writes {
				if n, err := tail.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("Write = %d, %v", n, err)
				}
			}
			if got := tail.String(); got != tc.want {
				t.Errorf("tail %q, want %q", got, tc.want)
			}
		})
	}
}

func TestTailStaysBounded(t *testing.T) {
	t.Parallel()
	tail := NewTail(1024)
	chunk := bytes.Repeat([]byte("z"), 1000)
	for range 100_000 { // ~100 MB
		tail.Write(chunk)
		if cap(tail.buf) > 2048 {
			t.Fatalf("tail reserved %d bytes, want at most 2048", cap(tail.buf))
		}
	}
	tail.Write([]byte("\nFatal JavaScript out of memory: Reached heap limit\n"))
	if got := tail.String(); len(got) != 1024 || !strings.HasSuffix(got, "Reached heap limit\n") {
		t.Errorf("tail is %d bytes ending %q", len(got), got[max(0, len(got)-30):])
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
