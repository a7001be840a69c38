package skills

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxNameLen is the longest skill name, in characters.
const MaxNameLen = 64

// ErrInvalidName is wrapped by every error ValidName returns.
var ErrInvalidName = errors.New("invalid skill name")

// nameRule is quoted in every name error so the caller can fix the name.
const nameRule = "a name is 1 to 64 letters, digits, '_' or '-', starting with a letter or digit (^[a-zA-Z0-9][a-zA-Z0-9_-]{0,63}$)"

// ValidName checks a skill name (the file name without ".ts") against
// ^[a-zA-Z0-9][a-zA-Z0-9_-]{0,63}$ and says what is wrong when it fails.
func ValidName(name string) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w %s; %s", ErrInvalidName, fmt.Sprintf(format, args...), nameRule)
	}
	switch {
	case name == "":
		return bad(`"": the name is empty`)
	case strings.IndexByte(name, 0) >= 0:
		return bad("%q: it contains a NUL byte", name)
	case strings.ContainsAny(name, `/\`):
		return bad("%q: it contains a path separator; a skill is one file directly in the skills directory", name)
	case name == "." || name == "..":
		return bad("%q: it is a directory reference", name)
	}
	if base, ok := strings.CutSuffix(name, ".ts"); ok && ValidName(base) == nil {
		return bad("%q: leave out the .ts extension and use %q", name, base)
	}
	if n := utf8.RuneCountInString(name); n > MaxNameLen {
		return bad("%q: it is %d characters long, more than %d", truncate(name, 80), n, MaxNameLen)
	}
	for i, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		case (r == '_' || r == '-') && i > 0:
		case r == '_' || r == '-':
			return bad("%q: it starts with %q", name, r)
		case r == utf8.RuneError && !utf8.ValidString(name):
			return bad("%q: it is not valid UTF-8", name)
		default:
			return bad("%q: character %q (at byte %d) is not allowed", name, r, i)
		}
	}
	return nil
}

// truncate shortens s to at most n bytes on a rune boundary, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
