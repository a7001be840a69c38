package skills

import (
	"strings"
	"testing"
)

func TestParseDescription(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, src, want string }{
		{"line comment", "// @description Fetches open PRs\nconsole.log(1)", "Fetches open PRs"},
		{"trimmed", "//   @description \t  spaced out  \t\n", "spaced out"},
		{"jsdoc", "/**\n * Summary line.\n *   @description  Lists invoices by month \n */\nexport {}", "Lists invoices by month"},
		{"block on one line", "/* @description inline block */ const x = 1;", "inline block"},
		{"triple slash", "/// @description triple", "triple"},
		{"after code", "const u = \"https://x.test\"; // @description after a URL\n", "after a URL"},
		{"first wins", "// @description first\n// @description second\n", "first"},
		{"empty one skipped", "// @description\n// @description   \n/* @description real */", "real"},
		{"crlf", "// @description windows line\r\nx", "windows line"},
		{"unterminated block", "/* @description still counts", "still counts"},
		{"none", "console.log('hi')\n", ""},
		{"not in a comment", "const d = 1; @description nope\n", ""},
		{"in a string", `const s = "// @description nope";` + "\n", ""},
		{"in a single-quoted string", `const s = '/* @description nope */';` + "\n", ""},
		{"in a template", "const t = `\n// @description nope\n`;\n", ""},
		{"escaped quote in a string", `const s = "a\" // @description nope";` + "\n", ""},
		{"longer tag", "// @descriptionless text\n", ""},
		{"mid-line tag", "// see @description here\n", ""},
	}
	for _, tc := range tests {
		if got := parseDescription(tc.src); got != tc.want {
			t.Errorf("%s: parseDescription(%q) = %q, want %q", tc.name, tc.src, got, tc.want)
		}
	}
}

func TestParseDescriptionInvalidUTF8(t *testing.T) {
	t.Parallel()
	// List reads a 4 KiB prefix, which may cut a character in two.
	src := "// @description caf\xc3"
	if got := parseDescription(src); got != "caf\uFFFD" {
		t.Errorf("got %q", got)
	}
	if got := parseDescription(strings.Repeat("\xff", 10)); got != "" {
		t.Errorf("got %q", got)
	}
}
