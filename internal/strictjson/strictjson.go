// Package strictjson decodes JSON objects strictly, for input CodeForge
// does not trust: tool arguments from MCP clients and Docker API bodies
// from the server. An object's keys must be among the allowed ones,
// exactly as written (encoding/json matches keys in any case) and at most
// once each; nothing may follow the object. Errors are typed, so that each
// caller words them for its own audience, and Kind names what was sent
// instead for those messages.
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

// SyntaxError is malformed JSON inside the object (Field is the key whose
// value is malformed, "" when it is the object itself).
type SyntaxError struct {
	Field string
	Err   error
}

func (e *SyntaxError) Error() string {
	if e.Field == "" {
		return "invalid JSON: " + e.Err.Error()
	}
	return fmt.Sprintf("invalid JSON value for %q: %v", e.Field, e.Err)
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

// Kind names the JSON type of raw for an error message, with the value
// when it is short: `the string "abc"`, "an object", "a list",
// "the boolean true", "null", "the number 3", "nothing".
func Kind(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '"':
		return "the string " + Truncate(string(raw), 40)
	case '{':
		return "an object"
	case '[':
		return "a list"
	case 't', 'f':
		return "the boolean " + string(raw)
	case 'n':
		return "null"
	default:
		return "the number " + Truncate(string(raw), 40)
	}
}

// Truncate cuts s to n bytes, marking the cut with "…".
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
