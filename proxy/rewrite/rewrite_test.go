package rewrite

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"testing/iotest"
)

// oracle is the obvious quadratic definition: at each position the longest
// pattern that starts there is replaced and scanning continues after it.
func oracle(pairs map[string]string, s string) (string, int) {
	var b strings.Builder
	n := 0
	for i := 0; i < len(s); {
		best := ""
		for old := range pairs {
			if len(old) > len(best) && strings.HasPrefix(s[i:], old) {
				best = old
			}
		}
		if best == "" {
			b.WriteByte(s[i])
			i++
			continue
		}
		b.WriteString(pairs[best])
		i += len(best)
		n++
	}
	return b.String(), n
}

func mustNew(t testing.TB, pairs map[string]string) *Replacer {
	t.Helper()
	r, err := New(pairs)
	if err != nil {
		t.Fatalf("New(%q): %v", pairs, err)
	}
	return r
}

func TestString(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		pairs map[string]string
		in    string
		want  string
		n     int
	}{
		{"none", map[string]string{"TOKEN": "secret"}, "nothing here", "nothing here", 0},
		{"one", map[string]string{"TOKEN": "secret"}, "Bearer TOKEN", "Bearer secret", 1},
		{"several", map[string]string{"A_KEY": "1", "B_KEY": "22"}, "A_KEY,B_KEY,A_KEY", "1,22,1", 3},
		{"longest wins", map[string]string{"TOK": "x", "TOKEN": "y", "TOKEN_2": "z"}, "TOKEN_2 TOKEN TOK TO", "z y x TO", 3},
		{"continue after match", map[string]string{"ab": "X", "bc": "Y"}, "abc", "Xc", 1},
		{"leftmost before longer later", map[string]string{"ab": "X", "bcdef": "Y"}, "abcdef", "Xcdef", 1},
		{"no re-scan of output", map[string]string{"a": "aa"}, "aaa", "aaaaaa", 3},
		{"output makes pattern", map[string]string{"x": "A", "AB": "!"}, "xB", "AB", 1},
		{"adjacent", map[string]string{"ab": "-"}, "ababab", "---", 3},
		{"replace with empty", map[string]string{"secret": ""}, "a secret b", "a  b", 1},
		{"empty input", map[string]string{"a": "b"}, "", "", 0},
		{"binary", map[string]string{"\x00\xff": "\n"}, "a\x00\xff\x00b", "a\n\x00b", 1},
		{"no patterns", nil, "TOKEN", "TOKEN", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := mustNew(t, tt.pairs)
			got, n := r.String(tt.in)
			if got != tt.want || n != tt.n {
				t.Errorf("String(%q) = %q, %d; want %q, %d", tt.in, got, n, tt.want, tt.n)
			}
			if o, on := oracle(tt.pairs, tt.in); o != tt.want || on != tt.n {
				t.Fatalf("test table disagrees with oracle: %q, %d", o, on)
			}
			gb, nb := r.Bytes([]byte(tt.in))
			if string(gb) != tt.want || nb != tt.n {
				t.Errorf("Bytes(%q) = %q, %d; want %q, %d", tt.in, gb, nb, tt.want, tt.n)
			}
			rd := r.Reader(iotest.OneByteReader(strings.NewReader(tt.in)))
			gs, err := io.ReadAll(rd)
			if err != nil {
				t.Fatalf("ReadAll: %v", err)
			}
			if string(gs) != tt.want || rd.Count() != tt.n {
				t.Errorf("Reader(%q) = %q, %d; want %q, %d", tt.in, gs, rd.Count(), tt.want, tt.n)
			}
		})
	}
}

func TestNewRejectsEmptyPattern(t *testing.T) {
	t.Parallel()
	r, err := New(map[string]string{"": "x", "A": "b"})
	if err == nil || !strings.Contains(err.Error(), "empty search string") {
		t.Fatalf("New with empty key = %v, %v; want an error naming the empty search string", r, err)
	}
}

func TestAccessors(t *testing.T) {
	t.Parallel()
	r := mustNew(t, map[string]string{"ZED": "1", "ALPHA": "2", "MID": "3"})
	if got := strings.Join(r.Keys(), ","); got != "ALPHA,MID,ZED" {
		t.Errorf("Keys = %s; want ALPHA,MID,ZED", got)
	}
	r.Keys()[0] = "mutated"
	if r.Keys()[0] != "ALPHA" {
		t.Error("Keys returned the internal slice")
	}
	if r.Empty() || r.MaxLen() != 5 {
		t.Errorf("Empty=%v MaxLen=%d; want false 5", r.Empty(), r.MaxLen())
	}
	e := mustNew(t, map[string]string{})
	if !e.Empty() || e.MaxLen() != 0 || len(e.Keys()) != 0 {
		t.Errorf("empty replacer: Empty=%v MaxLen=%d Keys=%v", e.Empty(), e.MaxLen(), e.Keys())
	}
	in := []byte("untouched")
	if out, n := r.Bytes(in); n != 0 || &out[0] != &in[0] {
		t.Error("Bytes copied an input with no match; want the same slice back")
	}
}

// chunkReader returns the data in chunks whose sizes come from sizes, in
// a cycle; a zero size makes a (0, nil) read.
type chunkReader struct {
	data  []byte
	sizes []int
	i     int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := c.sizes[c.i%len(c.sizes)]
	c.i++
	n = min(n, len(p), len(c.data))
	copy(p, c.data[:n])
	c.data = c.data[n:]
	return n, nil
}

// randomCase builds patterns and an input over a tiny alphabet so that
// prefixes, overlaps and splits are common.
func randomCase(rng *rand.Rand) (map[string]string, string) {
	const alpha = "abc"
	word := func(lo, hi int) string {
		b := make([]byte, lo+rng.IntN(hi-lo+1))
		for i := range b {
			b[i] = alpha[rng.IntN(len(alpha))]
		}
		return string(b)
	}
	pairs := map[string]string{}
	for range 1 + rng.IntN(5) {
		pairs[word(1, 6)] = strings.ToUpper(word(0, 8))
	}
	return pairs, word(0, 400)
}

func TestReaderMatchesOracleUnderRandomChunking(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	for iter := range 3000 {
		pairs, in := randomCase(rng)
		want, wantN := oracle(pairs, in)
		r := mustNew(t, pairs)
		if got, n := r.String(in); got != want || n != wantN {
			t.Fatalf("case %d: String(%q) with %q = %q, %d; want %q, %d", iter, in, pairs, got, n, want, wantN)
		}
		sizes := make([]int, 1+rng.IntN(6))
		for i := range sizes {
			sizes[i] = rng.IntN(9) // zero-length reads included
		}
		sizes[0] = max(sizes[0], 1)
		readers := map[string]io.Reader{
			"one byte": iotest.OneByteReader(strings.NewReader(in)),
			"half":     iotest.HalfReader(strings.NewReader(in)),
			"data+EOF": iotest.DataErrReader(strings.NewReader(in)),
			"chunked":  &chunkReader{data: []byte(in), sizes: sizes},
			"whole":    strings.NewReader(in),
		}
		for name, src := range readers {
			rd := r.Reader(src)
			got, err := io.ReadAll(rd)
			if err != nil {
				t.Fatalf("case %d %s: %v", iter, name, err)
			}
			if string(got) != want || rd.Count() != wantN {
				t.Fatalf("case %d %s: Reader(%q) with %q = %q, %d; want %q, %d", iter, name, in, pairs, got, rd.Count(), want, wantN)
			}
		}
		// Small destination buffers exercise partial copies of rd.out.
		rd := r.Reader(&chunkReader{data: []byte(in), sizes: sizes})
		var out bytes.Buffer
		buf := make([]byte, 1+rng.IntN(3))
		for {
			n, err := rd.Read(buf)
			out.Write(buf[:n])
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		if out.String() != want {
			t.Fatalf("case %d small reads: got %q; want %q", iter, out.String(), want)
		}
	}
}

func TestReaderPatternAcrossChunkBoundary(t *testing.T) {
	t.Parallel()
	const tok = "STRIPE_AUTH_TOKEN"
	r := mustNew(t, map[string]string{tok: "sk_live_123", "STRIPE": "s"})
	for off := range len(tok) + 1 {
		// Place the token so it straddles the Reader's internal chunk size.
		in := strings.Repeat("x", chunk-off) + tok + " STRIPE"
		got, err := io.ReadAll(r.Reader(strings.NewReader(in)))
		if err != nil {
			t.Fatal(err)
		}
		want := strings.Repeat("x", chunk-off) + "sk_live_123 s"
		if string(got) != want {
			t.Fatalf("offset %d: token split at the chunk boundary was not replaced", off)
		}
	}
}

// endless yields an unbounded stream of one byte.
type endless byte

func (e endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(e)
	}
	return len(p), nil
}

func TestReaderMemoryIsBounded(t *testing.T) {
	t.Parallel()
	// Every position is a prefix of the pattern, the worst case for
	// holding back; the stream never ends.
	r := mustNew(t, map[string]string{strings.Repeat("a", 100) + "b": "X"})
	rd := r.Reader(endless('a'))
	buf := make([]byte, 4096)
	var total int
	for total < 2<<20 {
		n, err := rd.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		total += n
		// Undecided input (not merely waiting for output room) is at most
		// MaxLen-1 bytes.
		if !rd.more && len(rd.in) > r.MaxLen()-1 {
			t.Fatalf("held back %d bytes; the bound is MaxLen-1 = %d", len(rd.in), r.MaxLen()-1)
		}
		if cap(rd.in) > chunk+r.MaxLen() || cap(rd.out) > 2*chunk {
			t.Fatalf("buffers grew: in cap %d, out cap %d", cap(rd.in), cap(rd.out))
		}
	}
}

func TestReaderExpansionStaysBounded(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("V", 1000)
	r := mustNew(t, map[string]string{"k": big})
	rd := r.Reader(io.LimitReader(endless('k'), 1<<20))
	n, err := io.Copy(io.Discard, rd)
	if err != nil || n != 1000<<20 {
		t.Fatalf("Copy = %d, %v; want %d bytes", n, err, 1000<<20)
	}
	if rd.Count() != 1<<20 {
		t.Errorf("Count = %d; want %d", rd.Count(), 1<<20)
	}
	if cap(rd.out) > 2*chunk+2000 {
		t.Errorf("out cap %d exceeds one chunk's expansion", cap(rd.out))
	}
}

func TestReaderSourceErrorDropsUndecidedTail(t *testing.T) {
	t.Parallel()
	boom := errors.New("connection reset")
	r := mustNew(t, map[string]string{"sk_live_SECRET": "TOKEN"})
	src := io.MultiReader(strings.NewReader("ok sk_live_SECRET then sk_live_SE"), iotest.ErrReader(boom))
	rd := r.Reader(src)
	got, err := io.ReadAll(rd)
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v; want the source error", err)
	}
	if string(got) != "ok TOKEN then " {
		t.Errorf("got %q; want the decided output only, without the partial secret", got)
	}
	// The error is sticky.
	if n, err := rd.Read(make([]byte, 8)); n != 0 || !errors.Is(err, boom) {
		t.Errorf("Read after error = %d, %v", n, err)
	}
}

func TestReaderEmptyReplacerPassesThrough(t *testing.T) {
	t.Parallel()
	r := mustNew(t, nil)
	in := strings.Repeat("hello world ", 10000)
	got, err := io.ReadAll(r.Reader(iotest.HalfReader(strings.NewReader(in))))
	if err != nil || string(got) != in {
		t.Fatalf("pass-through changed the data (err %v)", err)
	}
}

func TestReplacerConcurrentUse(t *testing.T) {
	t.Parallel()
	r := mustNew(t, map[string]string{"TOKEN_A": "a", "TOKEN_B": "b"})
	done := make(chan string, 8)
	for range 8 {
		go func() {
			got, err := io.ReadAll(r.Reader(iotest.OneByteReader(strings.NewReader("TOKEN_A TOKEN_B"))))
			if err != nil {
				done <- err.Error()
				return
			}
			done <- string(got)
		}()
	}
	for range 8 {
		if got := <-done; got != "a b" {
			t.Errorf("concurrent Reader = %q; want %q", got, "a b")
		}
	}
}

func FuzzReader(f *testing.F) {
	f.Add("abcabcab", "ab", "abc", "bca", uint64(1))
	f.Add("Bearer STRIPE_AUTH_TOKEN", "STRIPE_AUTH_TOKEN", "STRIPE", "TOKEN", uint64(7))
	f.Add("aaaaaaaaab", "aaab", "aa", "b", uint64(3))
	f.Add("", "x", "xy", "xyz", uint64(0))
	f.Fuzz(func(t *testing.T, in, p1, p2, p3 string, seed uint64) {
		pairs := map[string]string{}
		for i, p := range []string{p1, p2, p3} {
			if p != "" {
				pairs[p] = strings.Repeat("#", i)
			}
		}
		r, err := New(pairs)
		if err != nil {
			t.Fatal(err)
		}
		want, wantN := oracle(pairs, in)
		if got, n := r.String(in); got != want || n != wantN {
			t.Fatalf("String = %q, %d; oracle %q, %d", got, n, want, wantN)
		}
		rng := rand.New(rand.NewPCG(seed, seed))
		sizes := make([]int, 1+rng.IntN(8))
		for i := range sizes {
			sizes[i] = 1 + rng.IntN(16)
		}
		rd := r.Reader(&chunkReader{data: []byte(in), sizes: sizes})
		got, err := io.ReadAll(rd)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want || rd.Count() != wantN {
			t.Fatalf("Reader = %q, %d; whole-string %q, %d", got, rd.Count(), want, wantN)
		}
	})
}

// BenchmarkReader streams 64 MB of text with five credential-like patterns
// (a few hundred matches) through a Reader.
func BenchmarkReader(b *testing.B) {
	pairs := map[string]string{
		"STRIPE_AUTH_TOKEN":  "sk_live_51H8xQ2eZvKYlo2C0aBcDeFgHiJkLmNoP",
		"GITHUB_TOKEN":       "ghp_0123456789abcdefghijklmnopqrstuvwxyz",
		"SLACK_BOT_TOKEN":    "xoxb-1234-5678-abcdefghijklmnop",
		"OPENAI_API_KEY":     "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789",
		"SENDGRID_API_TOKEN": "SG.abcdefghijklmnop.qrstuvwxyz0123456789",
	}
	r := mustNew(b, pairs)
	const size = 64 << 20
	var sb strings.Builder
	line := `{"id":"evt_1","object":"event","api_version":"2024-06-20","data":{"status":"succeeded","amount":2000}}` + "\n"
	for i := 0; sb.Len() < size; i++ {
		sb.WriteString(line)
		if i%4096 == 0 {
			sb.WriteString("Authorization: Bearer STRIPE_AUTH_TOKEN and GITHUB_TOKEN\n")
		}
	}
	streamBench(b, r, []byte(sb.String()[:size]))
}

func TestReaderSourceErrorAfterExpansionKeepsDecidedOutput(t *testing.T) {
	t.Parallel()
	boom := errors.New("connection reset")
	r := mustNew(t, map[string]string{"k": strings.Repeat("V", 100), "kkz": "Z"})
	// 10000 decided "k"s expand past the output limit; the final "kk" is
	// undecided when the error arrives.
	src := io.MultiReader(strings.NewReader(strings.Repeat("k", 10000)+"-kk"), iotest.ErrReader(boom))
	rd := r.Reader(src)
	got, err := io.ReadAll(rd)
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v; want the source error", err)
	}
	if want := strings.Repeat("V", 100*10000) + "-"; string(got) != want {
		t.Errorf("got %d bytes; want %d (all decided output, no undecided tail)", len(got), len(want))
	}
}

// TestReaderOutputStaysWithinOneChunk: one fill produces at most one chunk
// of output plus the rest of one replacement, also when a replacement comes
// first and a long run without patterns follows (which is copied in bulk).
func TestReaderOutputStaysWithinOneChunk(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("V", 1000)
	r := mustNew(t, map[string]string{"k": big})
	in := "k" + strings.Repeat("x", 3*chunk) + "k" + strings.Repeat("y", chunk+7)
	rd := r.Reader(strings.NewReader(in))
	var out bytes.Buffer
	buf := make([]byte, 4096)
	for {
		n, err := rd.Read(buf)
		out.Write(buf[:n])
		if len(rd.out) > chunk+len(big)-1 {
			t.Fatalf("one fill produced %d bytes; the bound is a chunk plus one replacement (%d)", len(rd.out), chunk+len(big)-1)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if want := strings.ReplaceAll(in, "k", big); out.String() != want {
		t.Fatalf("got %d bytes, want %d", out.Len(), len(want))
	}
}

// TestReaderPatternLongerThanAChunk: a value longer than the Reader's read
// chunk (a long key file pasted as a credential) is still found whole,
// also across reads, and a long prefix of it that ends early is passed on.
func TestReaderPatternLongerThanAChunk(t *testing.T) {
	t.Parallel()
	long := "L" + strings.Repeat("abcdefghijk", (chunk+5000)/11) + "Q"
	r := mustNew(t, map[string]string{long: "LONG_TOKEN"})
	in := "a" + long + "b" + long[:100] + "c" + long
	want := "aLONG_TOKENb" + long[:100] + "cLONG_TOKEN"
	for name, src := range map[string]func() io.Reader{
		"whole":   func() io.Reader { return strings.NewReader(in) },
		"chunked": func() io.Reader { return &chunkReader{data: []byte(in), sizes: []int{7000, 1, 30000}} },
	} {
		rd := r.Reader(src())
		got, err := io.ReadAll(rd)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if string(got) != want || rd.Count() != 2 {
			t.Errorf("%s: got %d bytes with %d replacements, want %d bytes with 2", name, len(got), rd.Count(), len(want))
		}
	}
}

// badCounts returns first, then claims to have read more than it was
// given room for (or a negative count).
type badCounts struct {
	first string
	n     func(room int) int
	step  int
}

func (b *badCounts) Read(p []byte) (int, error) {
	b.step++
	if b.step == 1 {
		return copy(p, b.first), nil
	}
	return b.n(len(p)), nil
}

// TestReaderRejectsInvalidCounts: a source that breaks io.Reader's
// contract gets an error, never a panic or bytes from outside the buffer,
// also while part of a pattern is held back.
func TestReaderRejectsInvalidCounts(t *testing.T) {
	t.Parallel()
	r := mustNew(t, map[string]string{"sk_live_SECRET": "TOKEN"})
	for name, n := range map[string]func(int) int{
		"one more than room": func(room int) int { return room + 1 },
		"negative":           func(int) int { return -1 },
	} {
		// The first read ends in a pattern prefix, so bytes are held back
		// when the bad count arrives.
		rd := r.Reader(&badCounts{first: "ok sk_live_SE", n: n})
		got, err := io.ReadAll(rd)
		if err == nil || !strings.Contains(err.Error(), "invalid count") {
			t.Errorf("%s: err = %v, want an invalid count error", name, err)
		}
		if strings.Contains(string(got), "sk_live_SE") {
			t.Errorf("%s: the held-back prefix was passed on: %q", name, got)
		}
	}
}

// streamBench streams data through r's Reader once per iteration and
// fails when nothing was replaced.
func streamBench(b *testing.B, r *Replacer, data []byte) {
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		rd := r.Reader(bytes.NewReader(data))
		if _, err := io.Copy(io.Discard, rd); err != nil {
			b.Fatal(err)
		}
		if rd.Count() == 0 {
			b.Fatal("no replacements made")
		}
	}
}
