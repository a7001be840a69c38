// Package rewrite replaces literal strings in byte streams: credential names
// with their values on the way out of the sandbox, and values with names on
// the way back. At each position of the input the longest pattern that
// matches there wins, and scanning resumes after the replaced text, so
// replacements never overlap and never apply to text a replacement produced.
//
// A Replacer is immutable and safe for concurrent use. Its Reader streams:
// a pattern split across any number of reads of the source is still found,
// and the Reader holds back at most MaxLen()-1 unprocessed source bytes.
package rewrite

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sort"
)

// Replacer replaces a fixed set of literal strings. Build it with New.
type Replacer struct {
	olds  []string
	news  []string
	keys  []string // olds, sorted
	first [256]bool
	// single is the only possible first byte when there is exactly one,
	// so scanning can use bytes.IndexByte; -1 otherwise.
	single int
	nodes  []node
	maxLen int
}

// node is a trie node. Children sit in parallel slices because nodes
// usually have one child; term is the index of the pattern ending here or -1.
type node struct {
	edges []byte
	kids  []int32
	term  int32
}

// New builds a Replacer from old -> new pairs. An empty old string is an
// error (it would match everywhere). A nil or empty map gives a Replacer
// that changes nothing.
func New(pairs map[string]string) (*Replacer, error) {
	r := &Replacer{single: -1, nodes: []node{{term: -1}}}
	for old := range pairs {
		if old == "" {
			return nil, errors.New("rewrite: empty search string: every pattern needs at least one byte")
		}
		r.keys = append(r.keys, old)
	}
	sort.Strings(r.keys)
	firsts := 0
	for _, old := range r.keys {
		idx := int32(len(r.olds))
		r.olds = append(r.olds, old)
		r.news = append(r.news, pairs[old])
		r.insert(old, idx)
		if !r.first[old[0]] {
			r.first[old[0]] = true
			firsts++
			r.single = int(old[0])
		}
		r.maxLen = max(r.maxLen, len(old))
	}
	if firsts != 1 {
		r.single = -1
	}
	return r, nil
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
	r.nodes[n].term = idx
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

// Keys returns the patterns (old strings), sorted.
func (r *Replacer) Keys() []string { return append([]string(nil), r.keys...) }

// match looks for the longest pattern starting at b[0]. It returns the
// pattern index (-1 for none) and whether the answer is final: when b ends
// while a longer pattern could still match, more input is needed unless
// atEOF.
func (r *Replacer) match(b []byte, atEOF bool) (idx int32, final bool) {
	idx = -1
	n := int32(0)
	for i := 0; i < len(b); i++ {
		n = r.child(n, b[i])
		if n < 0 {
			return idx, true
		}
		if t := r.nodes[n].term; t >= 0 {
			idx = t
		}
	}
	// Input ran out inside the trie: a longer match may follow.
	return idx, atEOF || len(r.nodes[n].edges) == 0
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
	for i, c := range b {
		if r.first[c] {
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
func (r *Replacer) transform(dst, src []byte, atEOF bool, limit int) (out []byte, consumed, n int) {
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
		idx, final := r.match(src[i:], atEOF)
		if !final {
			return dst, i, n
		}
		if idx < 0 {
			dst = append(dst, src[i])
			i++
			continue
		}
		dst = append(dst, r.news[idx]...)
		i += len(r.olds[idx])
		n++
	}
	return dst, i, n
}

// String returns s with all patterns replaced and the number of
// replacements made.
func (r *Replacer) String(s string) (string, int) {
	if r.Empty() {
		return s, 0
	}
	out, _, n := r.transform(nil, []byte(s), true, -1)
	if n == 0 {
		return s, 0
	}
	return string(out), n
}

// Bytes returns b with all patterns replaced and the number of replacements
// made. When nothing was replaced it returns b itself, not a copy.
func (r *Replacer) Bytes(b []byte) ([]byte, int) {
	if r.Empty() {
		return b, 0
	}
	out, _, n := r.transform(nil, b, true, -1)
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
// use. Memory is bounded: one read chunk plus at most MaxLen()-1 held-back
// source bytes in, and about one chunk (plus one replacement) out.
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
	err  error // sticky source error, io.EOF included
	more bool  // rd.in holds decided input that hit the output limit
	done bool  // the source ended and everything is flushed
}

// Count returns the number of replacements made so far.
func (rd *Reader) Count() int { return rd.n }

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
				rd.in = make([]byte, 0, chunk+rd.r.maxLen)
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
	out, consumed, n := rd.r.transform(rd.out, rd.in, atEOF, chunk)
	rd.out = out
	rd.n += n
	rd.in = rd.in[:copy(rd.in, rd.in[consumed:])]
	// transform stops early either at the output limit or before an
	// undecided match, and only the first leaves len(out) >= chunk.
	rd.more = len(rd.in) > 0 && len(rd.out) >= chunk
	rd.done = atEOF && len(rd.in) == 0
	return nil
}
