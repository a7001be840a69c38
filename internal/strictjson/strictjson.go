// Package strictjson decodes JSON strictly, for input CodeForge does not
// trust or wants to check to the letter: tool arguments from MCP clients,
// Docker API bodies from the server and apis/<name>/config.json files.
//
// Object splits one object into its fields: keys must be among the
// allowed ones, exactly as written (encoding/json matches keys in any
// case) and at most once each; nothing may follow the object. Reader
// reads a document token by token with each token's line and column, for
// a caller that checks a file's shape itself and reports every problem
// with its place. Errors are typed, so that each caller words them for its
// own audience; Kind names what was sent instead, IsNull tells null.
package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
)

// ErrNotObject: the input is not one JSON object.
var ErrNotObject = errors.New("not a JSON object")

// ErrTrailing: data follows the object.
var ErrTrailing = errors.New("data after the JSON object")

// UnknownFieldError names a key that is not among the allowed ones.
type UnknownFieldError struct{ Field string }

func (e *UnknownFieldError) Error() string { return fmt.Sprintf("unknown field %q", e.Field) }

// DuplicateFieldError names a key given more than once.
type DuplicateFieldError struct{ Field string }

func (e *DuplicateFieldError) Error() string { return fmt.Sprintf("field %q given twice", e.Field) }

// SyntaxError is malformed JSON. Object sets Field, the key whose value is
// malformed ("" when it is the object itself); Reader sets Pos, where it
// is, when that is known.
type SyntaxError struct {
	Field string
	Pos   Pos
	Err   error
}

func (e *SyntaxError) Error() string {
	switch {
	case e.Field != "":
		return fmt.Sprintf("invalid JSON value for %q: %v", e.Field, e.Err)
	case e.Pos.Known():
		return fmt.Sprintf("invalid JSON at %s: %v", e.Pos, e.Err)
	}
	return "invalid JSON: " + e.Err.Error()
}

func (e *SyntaxError) Unwrap() error { return e.Err }

// Object splits data, which must be exactly one JSON object, into its
// fields (values with surrounding space trimmed). Keys must be in allowed.
func Object(data []byte, allowed []string) (map[string]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, ErrNotObject
	}
	fields := map[string]json.RawMessage{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, &SyntaxError{Err: err}
		}
		key, _ := tok.(string)
		if !slices.Contains(allowed, key) {
			return nil, &UnknownFieldError{Field: key}
		}
		if _, dup := fields[key]; dup {
			return nil, &DuplicateFieldError{Field: key}
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, &SyntaxError{Field: key, Err: err}
		}
		fields[key] = bytes.TrimSpace(raw)
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return nil, ErrNotObject
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, ErrTrailing
	}
	return fields, nil
}

// IsNull reports whether raw is the JSON literal null.
func IsNull(raw json.RawMessage) bool { return string(bytes.TrimSpace(raw)) == "null" }

// Show says how much of a value Kind puts in a message.
type Show int

const (
	// TypeOnly names the type alone ("a string", "a number"): for input
	// that may hold a secret, such as a config file's credentials.
	TypeOnly Show = iota
	// ShortValue adds a string's, number's or boolean's value, cut to 40
	// bytes (`the string "abc"`, "the number 3", "the boolean true").
	ShortValue
)

// Kind names the JSON type of raw, a value or a Reader token's Raw, for an
// error message: "a string", "a number", "a boolean", "an object",
// "an array", "null", or "nothing" when raw is empty; with ShortValue,
// scalars carry their value.
func Kind(raw json.RawMessage, show Show) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "nothing"
	}
	value := show == ShortValue
	switch raw[0] {
	case '"':
		if value {
			return "the string " + Truncate(string(raw), 40)
		}
		return "a string"
	case '{':
		return "an object"
	case '[':
		return "an array"
	case 't', 'f':
		if value {
			return "the boolean " + Truncate(string(raw), 40)
		}
		return "a boolean"
	case 'n':
		return "null"
	default:
		if value {
			return "the number " + Truncate(string(raw), 40)
		}
		return "a number"
	}
}

// Truncate cuts s to n bytes, marking the cut with "…".
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
