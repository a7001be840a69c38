package strictjson

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
)

// readAll reads tokens until an error and returns them with it.
func readAll(data string) ([]Token, error) {
	r := NewReader([]byte(data))
	var toks []Token
	for {
		tok, err := r.Next()
		if err != nil {
			return toks, err
		}
		toks = append(toks, tok)
	}
}

func TestReaderTokens(t *testing.T) {
	t.Parallel()
	doc := "{\n  \"a\": [1, \"x\\ny\", true],\n  \"b\" :null, \"c\": {}\n}\n"
	toks, err := readAll(doc)
	if err != io.EOF {
		t.Fatalf("err = %v, want io.EOF after the document", err)
	}
	var got []string
	for _, tok := range toks {
		got = append(got, fmt.Sprintf("%s@%s=%v", tok.Raw, tok.Pos, tok.Value))
	}
	want := []string{
		"{@line 1, column 1={",
		`"a"@line 2, column 3=a`,
		"[@line 2, column 8=[",
		"1@line 2, column 9=1",
		`"x\ny"@line 2, column 12=x` + "\n" + `y`,
		"true@line 2, column 20=true",
		"]@line 2, column 24=]",
		`"b"@line 3, column 3=b`,
		"null@line 3, column 8=<nil>",
		`"c"@line 3, column 14=c`,
		"{@line 3, column 19={",
		"}@line 3, column 20=}",
		"}@line 4, column 1=}",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("tokens:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if _, ok := toks[3].Value.(json.Number); !ok {
		t.Errorf("number token is %T, want json.Number", toks[3].Value)
	}
	if !IsNull(toks[8].Raw) || Kind(toks[2].Raw, TypeOnly) != "an array" {
		t.Errorf("Raw does not serve IsNull and Kind: %q %q", toks[8].Raw, toks[2].Raw)
	}
}

func TestReaderErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, in string
		want     string // the error's text, or a sentinel's name
	}{
		{"empty", "", "ErrEmpty"},
		{"white space only", " \n\t", "ErrEmpty"},
		{"truncated object", `{"a": [1`, "ErrUnexpectedEnd"},
		{"truncated string", `"abc`, "ErrUnexpectedEnd"},
		{"trailing comma", "{\n  \"a\": [1,]\n}", "invalid JSON at line 2, column 11: invalid character ']' looking for beginning of value"},
		{"garbage after the value", "{}\nx", "invalid JSON at line 2, column 1: invalid character 'x' after top-level value"},
		{"bad literal", `{"a": tru}`, "invalid JSON at line 1, column 10: invalid character '}' in literal true (expecting 'e')"},
		// A raw newline in a string is reported on its own line, not as
		// column 0 of the next.
		{"newline in a string", "{\"a\": \"x\ny\"}", "invalid JSON at line 1, column 9: invalid character '\\n' in string literal"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := readAll(tc.in)
			var se *SyntaxError
			switch tc.want {
			case "ErrEmpty":
				if !errors.Is(err, ErrEmpty) {
					t.Fatalf("err = %v, want ErrEmpty", err)
				}
			case "ErrUnexpectedEnd":
				if !errors.Is(err, ErrUnexpectedEnd) || !errors.As(err, &se) {
					t.Fatalf("err = %v, want a *SyntaxError with ErrUnexpectedEnd", err)
				}
			default:
				if !errors.As(err, &se) || err.Error() != tc.want {
					t.Fatalf("err = %v (%T), want %q", err, err, tc.want)
				}
			}
		})
	}
}

func TestReaderSkip(t *testing.T) {
	t.Parallel()
	r := NewReader([]byte(`[{"a": [1, {"b": []}]}, "next"]`))
	first, _ := r.Next() // '['
	el, _ := r.Next()    // '{'
	if err := r.Skip(el); err != nil {
		t.Fatal(err)
	}
	if tok, err := r.Next(); err != nil || tok.Value != "next" {
		t.Fatalf("after Skip: %v, %v; want the next element", tok.Value, err)
	}
	if err := r.Skip(first); err != nil { // only ']' is left: Skip reads it
		t.Fatal(err)
	}
	if _, err := r.Next(); err != io.EOF {
		t.Fatalf("after the document: %v, want io.EOF", err)
	}

	// Skipping a scalar reads nothing more.
	r = NewReader([]byte(`5 6`))
	tok, _ := r.Next()
	if err := r.Skip(tok); err != nil {
		t.Fatal(err)
	}
	if tok, _ := r.Next(); string(tok.Raw) != "6" {
		t.Fatalf("Skip of a scalar read on to %q", tok.Raw)
	}

	// Nesting is bounded, with the place where the bound was crossed.
	deep := strings.Repeat("[", MaxDepth+10) + strings.Repeat("]", MaxDepth+10)
	r = NewReader([]byte(deep))
	tok, _ = r.Next()
	err := r.Skip(tok)
	var se *SyntaxError
	if !errors.As(err, &se) || !strings.Contains(err.Error(), fmt.Sprintf("nesting deeper than %d levels", MaxDepth)) ||
		se.Pos.Offset() != MaxDepth+1 {
		t.Fatalf("deep nesting: %v", err)
	}
	r = NewReader([]byte(strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth)))
	tok, _ = r.Next()
	if err := r.Skip(tok); err != nil {
		t.Fatalf("%d levels: %v", MaxDepth, err)
	}
}

func TestPos(t *testing.T) {
	t.Parallel()
	var zero Pos
	if zero.Known() || (&SyntaxError{Err: io.ErrUnexpectedEOF}).Error() != "invalid JSON: unexpected EOF" {
		t.Error("the zero Pos is a place")
	}
	data := []byte("ab\ncd\n")
	for off, want := range map[int64]string{0: "line 1, column 1", 2: "line 1, column 3", 3: "line 2, column 1", 6: "line 3, column 1", 99: "line 3, column 1"} {
		if got := (Pos{data: data, off: off, known: true}).String(); got != want {
			t.Errorf("offset %d: %s, want %s", off, got, want)
		}
	}
}

// FuzzReader: on any input Reader never panics; every token's Raw is its
// own text at its place, decodes to its Value, and Kind agrees with it.
func FuzzReader(f *testing.F) {
	for _, s := range []string{`{"a": [1, "x", true, null, {}]}`, `[`, `"\u00e9"`, "{\n\"a\":1,,}", `1e999`, `{"a":{"b":[[]]}} []`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		data := []byte(in)
		r := NewReader(data)
		for range 10000 {
			tok, err := r.Next()
			if err != nil {
				var se *SyntaxError
				if err != io.EOF && !errors.Is(err, ErrEmpty) && !errors.As(err, &se) {
					t.Fatalf("error of type %T: %v", err, err)
				}
				if se != nil && se.Pos.Known() && (se.Pos.Offset() < 0 || se.Pos.Offset() > int64(len(data))) {
					t.Fatalf("syntax error outside the input: %v", se)
				}
				return
			}
			off := tok.Pos.Offset()
			if off < 0 || off+int64(len(tok.Raw)) > int64(len(data)) || string(data[off:off+int64(len(tok.Raw))]) != string(tok.Raw) {
				t.Fatalf("token %q is not the input's text at offset %d", tok.Raw, off)
			}
			kind := Kind(tok.Raw, TypeOnly)
			switch v := tok.Value.(type) {
			case json.Delim:
				if string(tok.Raw) != v.String() {
					t.Fatalf("delimiter %v has Raw %q", v, tok.Raw)
				}
				continue
			case string:
				var s string
				if json.Unmarshal(tok.Raw, &s) != nil || s != v || kind != "a string" {
					t.Fatalf("string %q has Raw %q (%s)", v, tok.Raw, kind)
				}
			case json.Number:
				if string(tok.Raw) != v.String() || kind != "a number" {
					t.Fatalf("number %v has Raw %q (%s)", v, tok.Raw, kind)
				}
			case bool:
				if string(tok.Raw) != fmt.Sprint(v) || kind != "a boolean" {
					t.Fatalf("boolean %v has Raw %q (%s)", v, tok.Raw, kind)
				}
			case nil:
				if !IsNull(tok.Raw) || kind != "null" {
					t.Fatalf("null has Raw %q (%s)", tok.Raw, kind)
				}
			}
			if err := r.Skip(tok); err != nil {
				t.Fatalf("Skip of a scalar: %v", err)
			}
		}
	})
}
