package skills

import (
	"errors"
	"strings"
	"testing"
)

func TestValidName(t *testing.T) {
	t.Parallel()
	valid := []string{
		"a", "Z", "0", "my-skill", "fetch_prs_2", "A-_-", "9lives",
		strings.Repeat("x", 64),
		"a" + strings.Repeat("-", 63),
	}
	for _, name := range valid {
		if err := ValidName(name); err != nil {
			t.Errorf("ValidName(%q) = %v; want nil", name, err)
		}
	}
	invalid := []struct{ name, want string }{
		{"", `"": the name is empty`},
		{"../x", `"../x": it contains a path separator`},
		{"a/b", `"a/b": it contains a path separator`},
		{`a\b`, `"a\\b": it contains a path separator`},
		{"/etc/passwd", "path separator"},
		{".", `".": it is a directory reference`},
		{"..", `"..": it is a directory reference`},
		{"x\x00y", `"x\x00y": it contains a NUL byte`},
		{"\x00", "NUL byte"},
		{strings.Repeat("x", 65), "it is 65 characters long, more than 64"},
		{strings.Repeat("é", 70), "it is 70 characters long, more than 64"},
		{"héllo", `character 'é' (at byte 1) is not allowed`},
		{"日本", `character '日' (at byte 0) is not allowed`},
		{"a.b", `character '.' (at byte 1) is not allowed`},
		{".hidden", `character '.' (at byte 0) is not allowed`},
		{"a b", `character ' ' (at byte 1) is not allowed`},
		{" a", `character ' ' (at byte 0)`},
		{"-a", `"-a": it starts with '-'`},
		{"_a", `"_a": it starts with '_'`},
		{"a\xff", "it is not valid UTF-8"},
		{"report.ts", `"report.ts": leave out the .ts extension and use "report"`},
	}
	for _, tc := range invalid {
		err := ValidName(tc.name)
		if err == nil {
			t.Errorf("ValidName(%q) = nil; want an error", tc.name)
			continue
		}
		if !errors.Is(err, ErrInvalidName) {
			t.Errorf("ValidName(%q) does not wrap ErrInvalidName: %v", tc.name, err)
		}
		if msg := err.Error(); !strings.Contains(msg, tc.want) || !strings.HasSuffix(msg, nameRule) {
			t.Errorf("ValidName(%q) = %q; want it to contain %q and end with the rule", tc.name, msg, tc.want)
		}
	}
}
