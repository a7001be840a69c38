package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// MaxDepth bounds the nesting Reader.Skip walks through.
const MaxDepth = 64

// ErrEmpty: the input holds no JSON value, only white space or nothing.
var ErrEmpty = errors.New("no JSON value: the input is empty")

// ErrUnexpectedEnd (inside a *SyntaxError): the input ends inside a value.
var ErrUnexpectedEnd = errors.New("unexpected end of input (unclosed object, array or string?)")

// Pos is a place in a Reader's input. It prints as "line L, column C"
// (both from 1, columns in bytes), worked out only when printed: counting
// lines for every token would make reading quadratic in the input's size.
// The zero Pos is unknown.
type Pos struct {
	data  []byte
	off   int64
	known bool
}

// Known reports whether p is a place (the zero Pos is not).
func (p Pos) Known() bool { return p.known }

// Offset is p's byte offset in the input.
func (p Pos) Offset() int64 { return p.off }

// LineColumn gives p's line and column, both from 1; columns count bytes.
func (p Pos) LineColumn() (line, column int) {
	before := p.data[:min(max(p.off, 0), int64(len(p.data)))]
	line = bytes.Count(before, []byte("\n")) + 1
	column = len(before) - bytes.LastIndexByte(before, '\n')
	return line, column
}

func (p Pos) String() string {
	if !p.known {
		return "an unknown place"
	}
	line, column := p.LineColumn()
	return fmt.Sprintf("line %d, column %d", line, column)
}

// Token is one JSON token of a Reader's input and where it starts.
type Token struct {
	// Value is what json.Decoder.Token gives: a json.Delim, bool,
	// json.Number, string, or nil for null.
	Value json.Token
	// Raw is the token's text: a whole string (quoted), number, true,
	// false or null, or a delimiter's one byte. Kind(Raw, …) names it and
	// IsNull(Raw) tells null.
	Raw json.RawMessage
	Pos Pos
}

// Reader reads one JSON document token by token and knows where each
// token is, for a caller that checks a document's shape itself so that
// every problem can name its line and column and the check can go on past
// the first one. Numbers are read as json.Number.
//
// Next's errors: ErrEmpty when the input has no value at all; a
// *SyntaxError with the place of malformed JSON (Err is ErrUnexpectedEnd
// when the input stops inside a value, with no place); io.EOF once the
// top-level value is complete and nothing follows.
type Reader struct {
	data  []byte
	dec   *json.Decoder
	depth int  // open arrays and objects
	begun bool // a token has been read
}

// NewReader reads data, which it keeps and does not change.
func NewReader(data []byte) *Reader {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	return &Reader{data: data, dec: dec}
}

// More reports whether the array or object being read has another
// element (or, at the top level, whether input is left).
func (r *Reader) More() bool { return r.dec.More() }

// Peek gives the place of the token Next reads next.
func (r *Reader) Peek() Pos {
	off := r.dec.InputOffset()
	// The decoder leaves white space and the ',' or ':' after a token unread.
	for off < int64(len(r.data)) && strings.IndexByte(" \t\r\n,:", r.data[off]) >= 0 {
		off++
	}
	return Pos{data: r.data, off: off, known: true}
}

// Next reads the next token.
func (r *Reader) Next() (Token, error) {
	pos := r.Peek()
	v, err := r.dec.Token()
	if err != nil {
		return Token{}, r.syntax(err, pos)
	}
	r.begun = true
	if d, ok := v.(json.Delim); ok {
		if d == '[' || d == '{' {
			r.depth++
		} else {
			r.depth--
		}
	}
	return Token{Value: v, Raw: r.data[pos.off:r.dec.InputOffset()], Pos: pos}, nil
}

// Skip reads the rest of the value whose first token is t: nothing for a
// scalar, up to the matching close for '[' or '{'. Nesting deeper than
// MaxDepth is a *SyntaxError.
func (r *Reader) Skip(t Token) error {
	if d, ok := t.Value.(json.Delim); !ok || d == ']' || d == '}' {
		return nil
	}
	for depth := 1; depth > 0; {
		if depth > MaxDepth {
			return &SyntaxError{Pos: r.Peek(), Err: fmt.Errorf("nesting deeper than %d levels", MaxDepth)}
		}
		tok, err := r.Next()
		if err != nil {
			return err
		}
		if d, ok := tok.Value.(json.Delim); ok {
			if d == '[' || d == '{' {
				depth++
			} else {
				depth--
			}
		}
	}
	return nil
}

// syntax turns a json.Decoder error met at pos into Next's errors.
func (r *Reader) syntax(err error, pos Pos) error {
	switch {
	case err == io.EOF && !r.begun:
		return ErrEmpty
	case err == io.EOF && r.depth == 0:
		return io.EOF
	case err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF):
		return &SyntaxError{Err: ErrUnexpectedEnd}
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		// Unmarshal scans the whole input first and so reports the exact
		// offset (the Decoder's can lag behind); Offset counts the bytes
		// read, the last of which is the bad one.
		var full *json.SyntaxError
		if errors.As(json.Unmarshal(r.data, new(any)), &full) {
			se = full
		}
		return &SyntaxError{Pos: Pos{data: r.data, off: max(se.Offset-1, 0), known: true}, Err: se}
	}
	return &SyntaxError{Pos: pos, Err: err}
}
