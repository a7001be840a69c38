package skills

import "strings"

// descriptionWindow is how much of a skill's start List reads for its
// @description line.
const descriptionWindow = 4 << 10

// parseDescription returns the text of the first "@description <text>"
// line inside a comment (//, /* */ or /** JSDoc */) of src, trimmed, or "".
func parseDescription(src string) string {
	src = strings.ToValidUTF8(src, "\uFFFD")
	for _, c := range comments(src) {
		for line := range strings.SplitSeq(c, "\n") {
			// Drop the "*" of a JSDoc continuation line or extra "/" of a
			// "///" comment.
			l := strings.TrimSpace(strings.TrimLeft(strings.TrimSpace(line), "*/"))
			rest, ok := strings.CutPrefix(l, "@description")
			if !ok || (rest != "" && rest[0] != ' ' && rest[0] != '\t') {
				continue
			}
			if d := strings.TrimSpace(rest); d != "" {
				return d
			}
		}
	}
	return ""
}

// comments returns the bodies of the comments in TypeScript source, skipping
// string and template literals so that "https://..." is not a comment. An
// unterminated block comment runs to the end (src may be a truncated prefix).
func comments(src string) []string {
	var out []string
	for i := 0; i < len(src); {
		c := src[i]
		switch {
		case c == '/' && strings.HasPrefix(src[i:], "//"):
			end := strings.IndexByte(src[i:], '\n')
			if end < 0 {
				end = len(src) - i
			}
			out = append(out, src[i+2:i+end])
			i += end
		case c == '/' && strings.HasPrefix(src[i:], "/*"):
			end := strings.Index(src[i+2:], "*/")
			if end < 0 {
				out = append(out, src[i+2:])
				return out
			}
			out = append(out, src[i+2:i+2+end])
			i += 2 + end + 2
		case c == '"' || c == '\'' || c == '`':
			j := i + 1
			for j < len(src) && src[j] != c && (c == '`' || src[j] != '\n') {
				if src[j] == '\\' {
					j++
				}
				j++
			}
			i = j + 1
		default:
			i++
		}
	}
	return out
}
