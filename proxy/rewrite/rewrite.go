// Package rewrite replaces literal strings in byte streams: credential names
// with their values on the way out of the sandbox, and values with names on
// the way back. At each position of the input the longest pattern that
// matches there wins, and scanning resumes after the replaced text, so
// replacements never overlap and never apply to text a replacement produced.
//
// A Replacer built with Options.Decode also finds a pattern written in the
// encodings APIs commonly hand data back in, in any mix: percent-escapes
// (either case), '+' for a space (form encoding), and JSON string escapes
// (\uXXXX of any character, surrogate pairs, \/, \", \\). That is how
// the proxy's reverse pass finds a secret however a response spells it.
// A pattern marked Refuse is one the caller must not let through: a
// Reader stops with a *RefusedError where it starts.
//
// A Replacer is immutable and safe for concurrent use. Its Reader streams:
// a pattern split across any number of reads of the source is still found,
// and the Reader holds back at most MaxInput()-1 unprocessed source bytes.
package rewrite

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// Replacer replaces a fixed set of strings. Build it with New or
// NewPatterns.
type Replacer struct {
	olds   []string
	news   []string
	refuse []bool
	keys   []string // olds, sorted
	// start marks the input bytes at which a match can begin.
	start [256]bool
	// pair holds the (canonical) first two bytes of every pattern, and
	// short the first byte of one-byte patterns: a cheap filter before
	// the trie is walked.
	pair  [1024]uint64
	short [256]bool
	// single is the only possible first byte when there is exactly one,
	// so scanning can use bytes.IndexByte; -1 otherwise.
	single int
	nodes  []node
	maxLen int
	// maxIn is the most input bytes one match can span: maxLen, or six
	// times that when decoding (every byte written as \u00XX).
	maxIn  int
	decode bool
}

// Pattern is one string to find and what to put in its place.
type Pattern struct {
	Old string
	New string
	// Refuse marks a pattern the caller must refuse rather than rewrite:
	// Reader and Rewrite stop with a *RefusedError naming New; String and
	// Bytes (for log lines) put New in its place like any other.
	Refuse bool
}

// Options change how a Replacer matches.
type Options struct {
	// Decode also matches patterns written with percent-escapes, '+' for
	// a space and JSON string escapes, in any mix (see the package doc).
	// Patterns are still matched as written; a space and a '+' in a
	// pattern each match either.
	Decode bool
}

// RefusedError says the input held a pattern marked Refuse.
type RefusedError struct {
	// Label is the pattern's New text.
	Label string
}

func (e *RefusedError) Error() string { return "rewrite: found " + e.Label }

// node is a trie node. Children sit in parallel slices because nodes
// usually have one child; term is the index of the pattern ending here or -1.
type node struct {
	edges []byte
	kids  []int32
	term  int32
}

// New builds a literal Replacer from old -> new pairs. An empty old string
// is an error (it would match everywhere). A nil or empty map gives a
// Replacer that changes nothing.
func New(pairs map[string]string) (*Replacer, error) {
	ps := make([]Pattern, 0, len(pairs))
	for old, nw := range pairs {
		ps = append(ps, Pattern{Old: old, New: nw})
	}
	return NewPatterns(ps, Options{})
}

// NewPatterns builds a Replacer. An empty or repeated Old is an error.
// When decoding maps two patterns to the same text (a space and a '+'),
// the one whose Old sorts first wins.
func NewPatterns(ps []Pattern, opts Options) (*Replacer, error) {
	r := &Replacer{single: -1, nodes: []node{{term: -1}}, decode: opts.Decode}
	sorted := slices.Clone(ps)
	slices.SortFunc(sorted, func(a, b Pattern) int { return strings.Compare(a.Old, b.Old) })
	var first [256]bool
	firsts := 0
	for i, p := range sorted {
		if p.Old == "" {
			return nil, errors.New("rewrite: empty search string: every pattern needs at least one byte")
		}
		if i > 0 && sorted[i-1].Old == p.Old {
			return nil, fmt.Errorf("rewrite: pattern %d repeats an earlier one", i)
		}
		idx := int32(len(r.olds))
		r.keys = append(r.keys, p.Old)
		r.olds = append(r.olds, p.Old)
		r.news = append(r.news, p.New)
		r.refuse = append(r.refuse, p.Refuse)
		canonOld := r.canonical(p.Old)
		r.insert(canonOld, idx)
		if len(canonOld) == 1 {
			r.short[canonOld[0]] = true
		} else {
			k := uint(canonOld[0])<<8 | uint(canonOld[1])
			r.pair[k>>6] |= 1 << (k & 63)
		}
		c := r.canon(p.Old[0])
		if !first[c] {
			first[c] = true
			firsts++
			r.single = int(c)
		}
		r.maxLen = max(r.maxLen, len(p.Old))
	}
	if firsts != 1 {
		r.single = -1
	}
	r.maxIn = r.maxLen
	for c := range 256 {
		r.start[c] = first[r.canon(byte(c))]
	}
	if r.decode && r.maxLen > 0 {
		r.maxIn = 6 * r.maxLen
		r.start['%'], r.start['\\'] = true, true
		r.single = -1
	}
	return r, nil
}

// canon maps a byte to the one the trie stores: with decoding, a space
// and a '+' are the same (form encoding writes one for the other).
func (r *Replacer) canon(c byte) byte {
	if r.decode && c == ' ' {
		return '+'
	}
	return c
}

func (r *Replacer) canonical(s string) string {
	if !r.decode {
		return s
	}
	return strings.ReplaceAll(s, " ", "+")
}

func (r *Replacer) insert(s string, idx int32) {
	n := int32(0)
	for i := 0; i < len(s); i++ {
		next := r.child(n, s[i])
		if next < 0 {
			next = int32(len(r.nodes))
			r.nodes = append(r.nodes, node{term: -1})
			r.nodes[n].edges = append(r.nodes[n].edges, s[i])
			r.nodes[n].kids = append(r.nodes[n].kids, next)
		}
		n = next
	}
	if r.nodes[n].term < 0 {
		r.nodes[n].term = idx
	}
}

func (r *Replacer) child(n int32, c byte) int32 {
	nd := &r.nodes[n]
	for i, e := range nd.edges {
		if e == c {
			return nd.kids[i]
		}
	}
	return -1
}

// Empty reports whether the Replacer has no patterns.
func (r *Replacer) Empty() bool { return len(r.olds) == 0 }

// MaxLen is the length of the longest pattern, 0 when Empty.
func (r *Replacer) MaxLen() int { return r.maxLen }

// MaxInput is the most input bytes one match can span: MaxLen, or more
// when decoding escapes.
func (r *Replacer) MaxInput() int { return r.maxIn }

// Keys returns the patterns (old strings), sorted.
func (r *Replacer) Keys() []string { return append([]string(nil), r.keys...) }

// match looks for the longest pattern starting at b[0]. It returns the
// pattern index (-1 for none), how many input bytes it spans, and whether
// the answer is final: when b ends while a longer pattern could still
// match, more input is needed unless atEOF.
func (r *Replacer) match(b []byte, atEOF bool) (idx int32, size int, final bool) {
	if r.decode {
		m := decodeMatch{r: r, b: b, atEOF: atEOF, idx: -1}
		m.walk(0, 0)
		return m.idx, m.end, !m.more
	}
	idx = -1
	n := int32(0)
	for i := 0; i < len(b); i++ {
		n = r.child(n, b[i])
		if n < 0 {
			return idx, size, true
		}
		if t := r.nodes[n].term; t >= 0 {
			idx, size = t, i+1
		}
	}
	// Input ran out inside the trie: a longer match may follow.
	return idx, size, atEOF || len(r.nodes[n].edges) == 0
}

// decodeMatch searches the trie over input that may spell each byte
// literally or escaped. Where an escape could also be read as literal
// text (a secret containing '%' or '\'), both readings are tried; the
// longest match in input bytes wins.
type decodeMatch struct {
	r     *Replacer
	b     []byte
	atEOF bool
	idx   int32
	end   int
	more  bool // some reading ran out of input inside the trie
}

func (m *decodeMatch) walk(i int, n int32) {
	nd := &m.r.nodes[n]
	if nd.term >= 0 && i > m.end {
		m.idx, m.end = nd.term, i
	}
	if len(nd.edges) == 0 {
		return
	}
	if i == len(m.b) {
		m.more = m.more || !m.atEOF
		return
	}
	c := m.b[i]
	if k := m.r.child(n, m.r.canon(c)); k >= 0 {
		m.walk(i+1, k)
	}
	switch c {
	case '%':
		if len(m.b)-i < 3 {
			if !m.atEOF && isHex(m.b[i+1:]...) {
				m.more = true
			}
			return
		}
		if isHex(m.b[i+1], m.b[i+2]) {
			if k := m.r.child(n, m.r.canon(unhex(m.b[i+1])<<4|unhex(m.b[i+2]))); k >= 0 {
				m.walk(i+3, k)
			}
		}
	case '\\':
		var buf [4]byte
		dec, size, more := jsonEscape(m.b[i:], buf[:0])
		if more {
			m.more = m.more || !m.atEOF
			return
		}
		k := n
		for _, x := range dec {
			if k = m.r.child(k, m.r.canon(x)); k < 0 {
				break
			}
		}
		if size > 0 && k >= 0 {
			m.walk(i+size, k)
		}
	}
}

func isHex(cs ...byte) bool {
	for _, c := range cs {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c >= 'a':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}

// jsonEscape decodes the JSON string escape at the start of b (b[0] is a
// backslash) into dst. size is 0 when b does not start with a valid
// escape; more is true when b ends before the escape can be decided.
func jsonEscape(b, dst []byte) (dec []byte, size int, more bool) {
	if len(b) < 2 {
		return nil, 0, true
	}
	switch b[1] {
	case '"', '\\', '/':
		return append(dst, b[1]), 2, false
	case 'b':
		return append(dst, '\b'), 2, false
	case 'f':
		return append(dst, '\f'), 2, false
	case 'n':
		return append(dst, '\n'), 2, false
	case 'r':
		return append(dst, '\r'), 2, false
	case 't':
		return append(dst, '\t'), 2, false
	case 'u':
	default:
		return nil, 0, false
	}
	cp, ok, more := hex4(b[2:])
	if !ok {
		return nil, 0, more
	}
	size = 6
	if utf16.IsSurrogate(rune(cp)) {
		if cp >= 0xdc00 { // a low surrogate cannot come first
			return nil, 0, false
		}
		rest := b[6:]
		if len(rest) < 2 {
			return nil, 0, len(rest) == 0 || rest[0] == '\\'
		}
		if rest[0] != '\\' || rest[1] != 'u' {
			return nil, 0, false
		}
		lo, ok, more := hex4(rest[2:])
		if !ok {
			return nil, 0, more
		}
		r := utf16.DecodeRune(rune(cp), rune(lo))
		if r == utf8.RuneError {
			return nil, 0, false
		}
		return utf8.AppendRune(dst, r), 12, false
	}
	return utf8.AppendRune(dst, rune(cp)), size, false
}

// hex4 parses four hex digits at the start of b.
func hex4(b []byte) (v uint16, ok, more bool) {
	for i := range 4 {
		if i == len(b) {
			return 0, false, true
		}
		if !isHex(b[i]) {
			return 0, false, false
		}
		v = v<<4 | uint16(unhex(b[i]))
	}
	return v, true, false
}

// next returns the index of the next byte in b that can start a pattern,
// or len(b).
func (r *Replacer) next(b []byte) int {
	if r.maxLen == 0 {
		return len(b)
	}
	if r.single >= 0 {
		if i := bytes.IndexByte(b, byte(r.single)); i >= 0 {
			return i
		}
		return len(b)
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		if !r.start[c] {
			continue
		}
		if i+1 == len(b) {
			return i
		}
		c2 := b[i+1]
		if r.decode && (c == '%' || c == '\\' || c2 == '%' || c2 == '\\') {
			return i // an escape: let the trie decide
		}
		c = r.canon(c)
		if r.short[c] {
			return i
		}
		if k := uint(c)<<8 | uint(r.canon(c2)); r.pair[k>>6]&(1<<(k&63)) != 0 {
			return i
		}
	}
	return len(b)
}

// transform appends the rewritten form of src to dst. Unless atEOF it stops
// before a position whose match cannot be decided yet and reports how many
// source bytes it consumed.
// It also stops once dst holds limit bytes or more (limit < 0: no limit), so
// a pattern with a long replacement cannot blow up one step's output.
// With refuse set it stops at a Refuse pattern and returns its index
// (else -1); hits, when not nil, collects the indexes of patterns replaced.
func (r *Replacer) transform(dst, src []byte, atEOF bool, limit int, refuse bool, hits *[]int32) (out []byte, consumed, n int, refused int32) {
	i := 0
	for i < len(src) && (limit < 0 || len(dst) < limit) {
		end := len(src)
		if limit >= 0 {
			end = min(end, i+limit-len(dst))
		}
		j := i + r.next(src[i:end])
		dst = append(dst, src[i:j]...)
		i = j
		if i == end {
			continue
		}
		idx, size, final := r.match(src[i:], atEOF)
		if !final {
			return dst, i, n, -1
		}
		if idx < 0 {
			dst = append(dst, src[i])
			i++
			continue
		}
		if refuse && r.refuse[idx] {
			return dst, i, n, idx
		}
		if hits != nil && !slices.Contains(*hits, idx) {
			*hits = append(*hits, idx)
		}
		dst = append(dst, r.news[idx]...)
		i += size
		n++
	}
	return dst, i, n, -1
}

// String returns s with all patterns replaced and the number of
// replacements made. Refuse patterns are replaced like the others.
func (r *Replacer) String(s string) (string, int) {
	if r.Empty() {
		return s, 0
	}
	out, _, n, _ := r.transform(nil, []byte(s), true, -1, false, nil)
	if n == 0 {
		return s, 0
	}
	return string(out), n
}

// Rewrite is String, except that a Refuse pattern in s makes it return a
// *RefusedError instead.
func (r *Replacer) Rewrite(s string) (string, int, error) {
	if r.Empty() {
		return s, 0, nil
	}
	out, _, n, refused := r.transform(nil, []byte(s), true, -1, true, nil)
	if refused >= 0 {
		return "", 0, &RefusedError{Label: r.news[refused]}
	}
	if n == 0 {
		return s, 0, nil
	}
	return string(out), n, nil
}

// Bytes returns b with all patterns replaced and the number of replacements
// made. When nothing was replaced it returns b itself, not a copy.
func (r *Replacer) Bytes(b []byte) ([]byte, int) {
	if r.Empty() {
		return b, 0
	}
	out, _, n, _ := r.transform(nil, b, true, -1, false, nil)
	if n == 0 {
		return b, 0
	}
	return out, n
}

// Reader returns a Reader that yields src with all patterns replaced.
func (r *Replacer) Reader(src io.Reader) *Reader {
	return &Reader{r: r, src: src}
}

// chunk is how many source bytes a Reader asks for per read.
const chunk = 32 << 10

// Reader streams a source through a Replacer. It is not safe for concurrent
// use. Memory is bounded: one read chunk plus at most MaxInput()-1
// held-back source bytes in, and about one chunk (plus one replacement) out.
//
// At a Refuse pattern the Reader returns the output decided before it and
// then a *RefusedError, and nothing more.
//
// When the source fails with an error other than io.EOF, the Reader returns
// the output decided so far, drops held-back bytes (they may be the start of
// a secret) and then returns the error.
//
// Matching costs O(n·MaxLen()) in the worst case (input made of long
// pattern prefixes) and close to a plain copy on typical text.
type Reader struct {
	r    *Replacer
	src  io.Reader
	in   []byte // unprocessed source bytes (the held-back tail)
	out  []byte // rewritten bytes not yet returned
	off  int    // read offset into out
	n    int
	hits []int32 // indexes of the patterns replaced so far
	err  error   // sticky source error, io.EOF included
	more bool    // rd.in holds decided input that hit the output limit
	done bool    // the source ended and everything is flushed
}

// Count returns the number of replacements made so far.
func (rd *Reader) Count() int { return rd.n }

// Matched returns the patterns (old strings) replaced so far, sorted.
func (rd *Reader) Matched() []string {
	out := make([]string, len(rd.hits))
	for i, idx := range rd.hits {
		out[i] = rd.r.olds[idx]
	}
	slices.Sort(out)
	return out
}

// Read implements io.Reader.
func (rd *Reader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for rd.off == len(rd.out) {
		if rd.done {
			return 0, rd.err
		}
		if err := rd.fill(); err != nil {
			return 0, err
		}
	}
	c := copy(p, rd.out[rd.off:])
	rd.off += c
	return c, nil
}

// fill produces more output into rd.out (possibly none). It marks the
// Reader done once the source ended and everything is flushed.
func (rd *Reader) fill() error {
	rd.out, rd.off = rd.out[:0], 0
	if !rd.more {
		switch {
		case rd.err == io.EOF:
		case rd.err != nil:
			// A broken stream: drop the undecided tail, which may be the
			// first part of a secret, rather than pass it on.
			rd.in = rd.in[:0]
			rd.done = true
			return nil
		default:
			if cap(rd.in) == 0 {
				rd.in = make([]byte, 0, chunk+rd.r.maxIn)
			}
			held := len(rd.in)
			m, err := rd.src.Read(rd.in[held:cap(rd.in)])
			if m < 0 || m > cap(rd.in)-held {
				return fmt.Errorf("rewrite: source returned invalid count %d", m)
			}
			rd.in = rd.in[:held+m]
			rd.err = err
		}
	}
	atEOF := rd.err == io.EOF
	out, consumed, n, refused := rd.r.transform(rd.out, rd.in, atEOF, chunk, true, &rd.hits)
	rd.out = out
	rd.n += n
	if refused >= 0 {
		// Hand out what was decided before the pattern, then stop.
		rd.in = rd.in[:0]
		rd.err = &RefusedError{Label: rd.r.news[refused]}
		rd.more, rd.done = false, true
		return nil
	}
	rd.in = rd.in[:copy(rd.in, rd.in[consumed:])]
	// transform stops early either at the output limit or before an
	// undecided match, and only the first leaves len(out) >= chunk.
	rd.more = len(rd.in) > 0 && len(rd.out) >= chunk
	rd.done = atEOF && len(rd.in) == 0
	return nil
}
