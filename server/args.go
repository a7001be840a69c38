package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/codeforge/codeforge/internal/strictjson"
)

// executeArgs are execute_code's arguments after validation.
type executeArgs struct {
	Code      string
	APIs      []string
	APIsGiven bool
	Timeout   time.Duration
	// Background: return at once with the run's id (background: true).
	Background bool
	// KeepRunning: if the call ends first, the run goes on (keep_running: true).
	KeepRunning bool
}

// parseExecuteArgs decodes and checks execute_code's raw arguments itself
// (rather than through the JSON schema) so that every bad value becomes a
// tool error in plain words, including a timeout sent as a string.
func (s *Server) parseExecuteArgs(raw json.RawMessage) (executeArgs, error) {
	args := executeArgs{Timeout: s.opts.DefaultTimeout}
	fields, err := objectFields(raw, "code", "apis", "timeout", "background", "keep_running")
	if err != nil {
		return args, err
	}

	rawCode, ok := fields["code"]
	if !ok || strictjson.IsNull(rawCode) {
		return args, errors.New("code is required: pass the TypeScript to run as the \"code\" argument")
	}
	if rawCode[0] != '"' {
		return args, fmt.Errorf("code must be a string of TypeScript, got %s", strictjson.Kind(rawCode, strictjson.ShortValue))
	}
	if !utf8.Valid(rawCode) || hasLoneSurrogate(rawCode) {
		return args, errors.New("code is not valid UTF-8 text: send the source as UTF-8")
	}
	if err := json.Unmarshal(rawCode, &args.Code); err != nil {
		return args, fmt.Errorf("code is not a valid JSON string: %v", err)
	}
	if strings.TrimSpace(args.Code) == "" {
		return args, errors.New("code is empty: pass the TypeScript to run, e.g. console.log(1)")
	}
	if len(args.Code) > s.opts.MaxCodeBytes {
		return args, fmt.Errorf("code is %d bytes, over the limit of %d bytes: shorten it, or save parts as skills and import them",
			len(args.Code), s.opts.MaxCodeBytes)
	}
	if i := strings.IndexByte(args.Code, 0); i >= 0 {
		return args, fmt.Errorf("code contains a NUL byte at offset %d: remove it", i)
	}

	if rawTimeout, ok := fields["timeout"]; ok && !strictjson.IsNull(rawTimeout) {
		t, err := s.parseTimeout(rawTimeout)
		if err != nil {
			return args, err
		}
		args.Timeout = t
	}

	if rawAPIs, ok := fields["apis"]; ok && !strictjson.IsNull(rawAPIs) {
		if err := json.Unmarshal(rawAPIs, &args.APIs); err != nil || rawAPIs[0] != '[' {
			return args, fmt.Errorf("apis must be a list of API names such as [\"github\"], got %s", strictjson.Kind(rawAPIs, strictjson.ShortValue))
		}
		args.APIsGiven = true
	}
	if args.Background, err = parseBool(fields, "background"); err != nil {
		return args, err
	}
	if args.KeepRunning, err = parseBool(fields, "keep_running"); err != nil {
		return args, err
	}
	if args.Background && args.KeepRunning {
		return args, errors.New("background and keep_running together: a background run always keeps running; pass only background: true")
	}
	return args, nil
}

// parseBool reads an optional boolean field (false when absent or null).
func parseBool(fields map[string]json.RawMessage, name string) (bool, error) {
	raw, ok := fields[name]
	if !ok || strictjson.IsNull(raw) {
		return false, nil
	}
	switch string(raw) {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, fmt.Errorf("%s must be true or false, got %s", name, strictjson.Kind(raw, strictjson.ShortValue))
}

func (s *Server) parseTimeout(raw json.RawMessage) (time.Duration, error) {
	maxSec := s.opts.MaxTimeout.Seconds()
	var sec float64
	if raw[0] == '"' || raw[0] == '[' || raw[0] == '{' || raw[0] == 't' || raw[0] == 'f' {
		return 0, fmt.Errorf("timeout must be a number of seconds (e.g. 30), got %s", strictjson.Kind(raw, strictjson.ShortValue))
	}
	if err := json.Unmarshal(raw, &sec); err != nil || math.IsNaN(sec) || math.IsInf(sec, 0) {
		return 0, fmt.Errorf("timeout must be a number of seconds (e.g. 30), got %s", truncate(string(raw), 40))
	}
	switch {
	case sec <= 0:
		return 0, fmt.Errorf("timeout must be more than 0 seconds, got %s; leave it out for the default of %s",
			formatSeconds(sec), formatSeconds(s.opts.DefaultTimeout.Seconds())+"s")
	case sec > maxSec:
		return 0, fmt.Errorf("timeout %ss is over the maximum of %ss: ask for %s or less",
			formatSeconds(sec), formatSeconds(maxSec), formatSeconds(maxSec))
	}
	return time.Duration(sec * float64(time.Second)), nil
}

// parseNameArgs decodes the arguments of update_skill and delete_skill:
// string fields, all of them required.
func parseStringArgs(raw json.RawMessage, names ...string) (map[string]string, error) {
	fields, err := objectFields(raw, names...)
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(names))
	for _, n := range names {
		v, ok := fields[n]
		if !ok || strictjson.IsNull(v) {
			return nil, fmt.Errorf("%s is required", n)
		}
		if v[0] != '"' {
			return nil, fmt.Errorf("%s must be a string, got %s", n, strictjson.Kind(v, strictjson.ShortValue))
		}
		if !utf8.Valid(v) || hasLoneSurrogate(v) {
			return nil, fmt.Errorf("%s is not valid UTF-8 text", n)
		}
		var str string
		if err := json.Unmarshal(v, &str); err != nil {
			return nil, fmt.Errorf("%s is not a valid JSON string: %v", n, err)
		}
		out[n] = str
	}
	return out, nil
}

// objectFields splits raw tool arguments into their fields, refusing
// anything but one JSON object, any field not in allowed and any field
// given twice (internal/strictjson).
func objectFields(raw json.RawMessage, allowed ...string) (map[string]json.RawMessage, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || strictjson.IsNull(raw) {
		return map[string]json.RawMessage{}, nil
	}
	fields, err := strictjson.Object(raw, allowed)
	var unknown *strictjson.UnknownFieldError
	var dup *strictjson.DuplicateFieldError
	switch {
	case err == nil:
		return fields, nil
	case errors.As(err, &unknown) && len(allowed) == 0:
		return nil, fmt.Errorf("unknown argument %q: this tool takes no arguments", unknown.Field)
	case errors.As(err, &unknown):
		return nil, fmt.Errorf("unknown argument %q: this tool takes %s", unknown.Field, strings.Join(quoteAll(allowed), ", "))
	case errors.As(err, &dup):
		return nil, fmt.Errorf("argument %q is given twice: give it once", dup.Field)
	default:
		return nil, fmt.Errorf("arguments must be a JSON object, got %s", strictjson.Kind(raw, strictjson.ShortValue))
	}
}

// hasLoneSurrogate reports whether a JSON string literal holds a \uD800–
// \uDFFF escape that is not part of a valid pair; Go's decoder would turn
// it into U+FFFD silently.
func hasLoneSurrogate(lit []byte) bool {
	for i := 0; i < len(lit); i++ {
		if lit[i] != '\\' {
			continue
		}
		i++
		if i >= len(lit) || lit[i] != 'u' {
			continue
		}
		r, ok := hex4(lit, i+1)
		if !ok {
			continue
		}
		i += 4
		switch {
		case r >= 0xD800 && r <= 0xDBFF:
			if i+6 < len(lit) && lit[i+1] == '\\' && lit[i+2] == 'u' {
				if lo, ok := hex4(lit, i+3); ok && lo >= 0xDC00 && lo <= 0xDFFF {
					i += 6
					continue
				}
			}
			return true
		case r >= 0xDC00 && r <= 0xDFFF:
			return true
		}
	}
	return false
}

func hex4(b []byte, at int) (rune, bool) {
	if at+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[at : at+4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c-'a') + 10
		case c >= 'A' && c <= 'F':
			r |= rune(c-'A') + 10
		default:
			return 0, false
		}
	}
	return r, true
}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = fmt.Sprintf("%q", s)
	}
	return out
}

func truncate(s string, n int) string { return strictjson.Truncate(s, n) }

// formatSeconds prints seconds without trailing zeros: 5, 0.5, 300.
func formatSeconds(sec float64) string {
	return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.3f", sec), "0"), ".")
}
