package rewrite

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"
)

// decodeOracle is the obvious definition of decoding matches: from each
// position, every way of reading the input (a byte literally, or an escape
// decoded) is tried against every pattern; the reading that spans the most
// input wins, ties going to the pattern that sorts first.
func decodeOracle(ps []Pattern, s string) (string, int) {
	canon := func(c byte) byte {
		if c == ' ' {
			return '+'
		}
		return c
	}
	// ends returns the input offsets at which pat[j:] can end when
	// reading s from i.
	var ends func(pat string, j, i int) []int
	ends = func(pat string, j, i int) []int {
		if j == len(pat) {
			return []int{i}
		}
		if i == len(s) {
			return nil
		}
		var out []int
		if canon(s[i]) == canon(pat[j]) {
			out = append(out, ends(pat, j+1, i+1)...)
		}
		var dec []byte
		size := 0
		switch {
		case s[i] == '%' && i+2 < len(s) && isHex(s[i+1], s[i+2]):
			dec, size = []byte{unhex(s[i+1])<<4 | unhex(s[i+2])}, 3
		case s[i] == '\\' && i+1 < len(s):
			switch c := s[i+1]; c {
			case '"', '\\', '/':
				dec, size = []byte{c}, 2
			case 'b', 'f', 'n', 'r', 't':
				dec, size = []byte{map[byte]byte{'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}[c]}, 2
			case 'u':
				if v, ok, _ := hex4([]byte(s[i+2:])); ok {
					switch {
					case !utf16.IsSurrogate(rune(v)):
						dec, size = utf8.AppendRune(nil, rune(v)), 6
					case v < 0xdc00 && strings.HasPrefix(s[i+6:], `\u`):
						if lo, ok, _ := hex4([]byte(s[i+8:])); ok {
							if r := utf16.DecodeRune(rune(v), rune(lo)); r != utf8.RuneError {
								dec, size = utf8.AppendRune(nil, r), 12
							}
						}
					}
				}
			}
		}
		if size > 0 && len(dec) <= len(pat)-j {
			same := true
			for k := range dec {
				same = same && canon(dec[k]) == canon(pat[j+k])
			}
			if same {
				out = append(out, ends(pat, j+len(dec), i+size)...)
			}
		}
		return out
	}
	var b strings.Builder
	n := 0
	for i := 0; i < len(s); {
		best, bestEnd := -1, i
		for k, p := range ps {
			for _, e := range ends(p.Old, 0, i) {
				if e > bestEnd || e == bestEnd && best >= 0 && p.Old < ps[best].Old {
					best, bestEnd = k, e
				}
			}
		}
		if best < 0 {
			b.WriteByte(s[i])
			i++
			continue
		}
		b.WriteString(ps[best].New)
		i = bestEnd
		n++
	}
	return b.String(), n
}

func mustPatterns(t testing.TB, ps []Pattern, opts Options) *Replacer {
	t.Helper()
	r, err := NewPatterns(ps, opts)
	if err != nil {
		t.Fatalf("NewPatterns: %v", err)
	}
	return r
}

func TestDecodeFindsEveryCommonSpelling(t *testing.T) {
	t.Parallel()
	const secret = "sk_live/Ab+c=d e"
	r := mustPatterns(t, []Pattern{{Old: secret, New: "TOKEN"}}, Options{Decode: true})
	var jsonU strings.Builder
	for _, c := range secret {
		fmt.Fprintf(&jsonU, `\u%04x`, c)
	}
	spellings := map[string]string{
		"literal":                  secret,
		"query-escaped":            url.QueryEscape(secret),
		"path-escaped":             url.PathEscape(secret),
		"percent, lower case":      escLower.ReplaceAllStringFunc(url.PathEscape(secret), strings.ToLower),
		"every byte percent-coded": percentAll(secret, "%%%02X"),
		"every byte, lower hex":    percentAll(secret, "%%%02x"),
		"JSON \\u escapes":         jsonU.String(),
		"JSON \\u upper hex":       strings.ReplaceAll(strings.ToUpper(jsonU.String()), `\U`, `\u`),
		"JSON escaped slash":       strings.ReplaceAll(secret, "/", `\/`),
		"a mix":                    `sk%5Flive\/A\u0062%2bc%3Dd+e`,
	}
	for name, in := range spellings {
		t.Run(name, func(t *testing.T) {
			for _, wrap := range []string{"%s", `{"v":"%s"}`, "x=%s&y=1", "pre%spost"} {
				text := fmt.Sprintf(wrap, in)
				got, n := r.String(text)
				if want := fmt.Sprintf(wrap, "TOKEN"); got != want || n != 1 {
					t.Errorf("String(%q) = %q, %d; want %q, 1", text, got, n, want)
				}
			}
		})
	}
}

var escLower = regexp.MustCompile(`%[0-9A-F]{2}`)

func percentAll(s, format string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		fmt.Fprintf(&b, format, s[i])
	}
	return b.String()
}

func TestDecodeNonASCIIAndSurrogatePairs(t *testing.T) {
	t.Parallel()
	const secret = "pässwörd-😀-key"
	r := mustPatterns(t, []Pattern{{Old: secret, New: "TOKEN"}}, Options{Decode: true})
	var u strings.Builder
	for _, c := range secret {
		if c < 0x80 {
			u.WriteRune(c)
			continue
		}
		if c > 0xffff {
			hi, lo := utf16.EncodeRune(c)
			fmt.Fprintf(&u, `\u%04X\u%04x`, hi, lo)
			continue
		}
		fmt.Fprintf(&u, `\u%04x`, c)
	}
	for _, in := range []string{secret, u.String(), url.QueryEscape(secret)} {
		if got, n := r.String("[" + in + "]"); got != "[TOKEN]" || n != 1 {
			t.Errorf("String(%q) = %q, %d", in, got, n)
		}
	}
	// A lone or reversed surrogate is not a character and decodes to nothing.
	for _, in := range []string{`p\u00e4sswörd-\ud83d-key`, `p\u00e4sswörd-\ude00\ud83d-key`} {
		if got, n := r.String(in); n != 0 || got != in {
			t.Errorf("String(%q) = %q, %d; want no match", in, got, n)
		}
	}
}

func TestDecodeSecretsThatLookLikeEscapes(t *testing.T) {
	t.Parallel()
	// A secret may itself hold '%' or '\': read literally and as escapes.
	ps := []Pattern{{Old: `p%41ss\nword`, New: "TOKEN"}}
	r := mustPatterns(t, ps, Options{Decode: true})
	for _, in := range []string{`p%41ss\nword`, `p%2541ss%5Cnword`, `p%41ss\\nword`, `p\u002541ss\u005cnword`} {
		if got, n := r.String("<" + in + ">"); got != "<TOKEN>" || n != 1 {
			t.Errorf("String(%q) = %q, %d", in, got, n)
		}
	}
	// "%41" decoded is "A", which is not the secret's text.
	if got, n := r.String(`pAss\nword`); n != 0 {
		t.Errorf("String(pAss...) = %q, %d; want no match", got, n)
	}
}

func TestDecodeMatchesOracle(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(7, 11))
	alphabet := []string{"a", "b", "%", "\\", "+", " ", "/", "u", "0", "4", "1", "6", "2", "%61", "%2B", "%20", `\u0061`, `\/`, `\\`, "A"}
	for i := range 3000 {
		var ps []Pattern
		seen := map[string]bool{}
		for k := range 1 + rng.IntN(3) {
			var p strings.Builder
			for range 1 + rng.IntN(4) {
				p.WriteString([]string{"a", "b", "+", " ", "/", "%", "\\", "A", "1"}[rng.IntN(9)])
			}
			if !seen[p.String()] {
				seen[p.String()] = true
				ps = append(ps, Pattern{Old: p.String(), New: fmt.Sprintf("<%d>", k)})
			}
		}
		var in strings.Builder
		for range rng.IntN(24) {
			in.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		r := mustPatterns(t, ps, Options{Decode: true})
		want, wantN := decodeOracle(ps, in.String())
		if got, n := r.String(in.String()); got != want || n != wantN {
			t.Fatalf("case %d: patterns %+v, input %q: String = %q, %d; oracle %q, %d", i, ps, in.String(), got, n, want, wantN)
		}
		sizes := []int{1 + rng.IntN(5), 1 + rng.IntN(5), 1 + rng.IntN(5)}
		got, err := io.ReadAll(r.Reader(&chunkReader{data: []byte(in.String()), sizes: sizes}))
		if err != nil || string(got) != want {
			t.Fatalf("case %d: patterns %+v, input %q: Reader = %q, %v; oracle %q", i, ps, in.String(), got, err, want)
		}
	}
}

func TestRefusePatterns(t *testing.T) {
	t.Parallel()
	r := mustPatterns(t, []Pattern{
		{Old: "secret-value", New: "TOKEN"},
		{Old: "c2VjcmV0LXZhbH", New: "TOKEN (base64)", Refuse: true},
	}, Options{Decode: true})
	// String (log lines) replaces both.
	if got, n := r.String("a secret-value b c2VjcmV0LXZhbHVl c"); got != "a TOKEN b TOKEN (base64)Vl c" || n != 2 {
		t.Errorf("String = %q, %d", got, n)
	}
	// Rewrite refuses.
	_, _, err := r.Rewrite("x c2VjcmV0LXZhbHVl")
	var re *RefusedError
	if !errors.As(err, &re) || re.Label != "TOKEN (base64)" {
		t.Errorf("Rewrite err = %v; want a RefusedError for the base64 form", err)
	}
	if got, n, err := r.Rewrite("x secret-value"); err != nil || got != "x TOKEN" || n != 1 {
		t.Errorf("Rewrite = %q, %d, %v", got, n, err)
	}
	// A Reader hands out what came before, then refuses, even when the
	// pattern arrives split across reads.
	src := "ok " + strings.Repeat("y", 70000) + " secret-value c2VjcmV0" + "LXZhbH tail"
	rd := r.Reader(&chunkReader{data: []byte(src), sizes: []int{5, 3, 7}})
	got, err := io.ReadAll(rd)
	if !errors.As(err, &re) {
		t.Fatalf("Reader err = %v; want a RefusedError", err)
	}
	if want := "ok " + strings.Repeat("y", 70000) + " TOKEN "; string(got) != want {
		t.Errorf("Reader gave %d bytes before refusing; want %d (everything before the pattern)", len(got), len(want))
	}
	if strings.Contains(string(got), "c2VjcmV0") {
		t.Error("Reader passed on the start of the refused pattern")
	}
	if n, err := rd.Read(make([]byte, 10)); n != 0 || err == nil {
		t.Errorf("Read after refusal = %d, %v; want 0 and the error again", n, err)
	}
}

func TestReaderMatched(t *testing.T) {
	t.Parallel()
	r := mustNew(t, map[string]string{"B_TOKEN": "b", "A_TOKEN": "a", "C_TOKEN": "c"})
	rd := r.Reader(strings.NewReader("C_TOKEN A_TOKEN C_TOKEN"))
	if _, err := io.ReadAll(rd); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(rd.Matched(), ","); got != "A_TOKEN,C_TOKEN" {
		t.Errorf("Matched = %s; want A_TOKEN,C_TOKEN", got)
	}
}

func TestNewPatternsRejectsRepeats(t *testing.T) {
	t.Parallel()
	if _, err := NewPatterns([]Pattern{{Old: "abcd"}, {Old: "abcd", New: "x"}}, Options{}); err == nil {
		t.Error("NewPatterns accepted a repeated pattern")
	}
}

func TestDecodeHoldsBackAtMostMaxInput(t *testing.T) {
	t.Parallel()
	r := mustPatterns(t, []Pattern{{Old: "abcdefgh", New: "X"}}, Options{Decode: true})
	if r.MaxInput() != 48 {
		t.Fatalf("MaxInput = %d; want 6*8", r.MaxInput())
	}
	// The whole secret spelt as \u escapes, fed one byte a read.
	var in strings.Builder
	for _, c := range "abcdefgh" {
		fmt.Fprintf(&in, `\u%04x`, c)
	}
	got, err := io.ReadAll(r.Reader(&chunkReader{data: []byte("<" + in.String() + ">"), sizes: []int{1}}))
	if err != nil || string(got) != "<X>" {
		t.Errorf("Reader = %q, %v; want <X>", got, err)
	}
}

func FuzzDecodeReader(f *testing.F) {
	f.Add(`a%62c\u0064`, "abcd", "b+c", uint64(1))
	f.Add(`%%41\\u0041`, `%A`, `\A`, uint64(2))
	f.Fuzz(func(t *testing.T, in, p1, p2 string, seed uint64) {
		var ps []Pattern
		if p1 != "" {
			ps = append(ps, Pattern{Old: p1, New: "<1>"})
		}
		if p2 != "" && p2 != p1 {
			ps = append(ps, Pattern{Old: p2, New: "<2>"})
		}
		if len(in) > 64 || len(p1) > 8 || len(p2) > 8 {
			return // keep the exponential oracle fast
		}
		r, err := NewPatterns(ps, Options{Decode: true})
		if err != nil {
			t.Fatal(err)
		}
		want, wantN := decodeOracle(ps, in)
		if got, n := r.String(in); got != want || n != wantN {
			t.Fatalf("String = %q, %d; oracle %q, %d", got, n, want, wantN)
		}
		rng := rand.New(rand.NewPCG(seed, seed))
		got, err := io.ReadAll(r.Reader(&chunkReader{data: []byte(in), sizes: []int{1 + rng.IntN(8), 1 + rng.IntN(8)}}))
		if err != nil || string(got) != want {
			t.Fatalf("Reader = %q, %v; oracle %q", got, err, want)
		}
	})
}

// BenchmarkDecodeReader streams the same 64 MB as BenchmarkReader through
// a decoding Replacer shaped like the proxy's reverse pass: five values,
// each with its base64 and base64url forms at three offsets as Refuse
// patterns (35 patterns).
func BenchmarkDecodeReader(b *testing.B) {
	values := []string{
		"sk_live_51H8xQ2eZvKYlo2C0aBcDeFgHiJkLmNoP",
		"ghp_0123456789abcdefghijklmnopqrstuvwxyz",
		"xoxb-1234-5678-abcdefghijklmnop",
		"sk-proj-abcdefghijklmnopqrstuvwxyz0123456789",
		"SG.abcdefghijklmnop.qrstuvwxyz0123456789",
	}
	var ps []Pattern
	for i, v := range values {
		ps = append(ps, Pattern{Old: v, New: fmt.Sprintf("TOKEN_%d", i)})
		for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.RawURLEncoding} {
			for k := range 3 {
				s := enc.EncodeToString(append(make([]byte, k), v...))
				core := s[[]int{0, 2, 3}[k] : len(s)-1]
				if !slices.ContainsFunc(ps, func(p Pattern) bool { return p.Old == core }) {
					ps = append(ps, Pattern{Old: core, New: "B64", Refuse: true})
				}
			}
		}
	}
	r := mustPatterns(b, ps, Options{Decode: true})
	const size = 64 << 20
	var sb strings.Builder
	line := `{"id":"evt_1","object":"event","api_version":"2024-06-20","data":{"status":"succeeded","amount":2000,"url":"https:\/\/x.test\/a%20b"}}` + "\n"
	for i := 0; sb.Len() < size; i++ {
		sb.WriteString(line)
		if i%4096 == 0 {
			sb.WriteString("key " + values[i%5] + "\n")
		}
	}
	streamBench(b, r, []byte(sb.String()[:size]))
}
