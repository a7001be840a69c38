package skills

import (
	"fmt"
	"strings"
)

// The markers of a SEARCH/REPLACE block. Each must stand alone on its line
// (trailing white space is tolerated) and has exactly seven '<', '=' or
// '>'; a line such as "========" is ordinary text. A consequence: text that
// contains a line of exactly these markers cannot be searched for.
const (
	markSearch  = "<<<<<<< SEARCH"
	markDivider = "======="
	markReplace = ">>>>>>> REPLACE"
)

// PatchFormat describes the patch format, for tool descriptions and errors.
const PatchFormat = `A patch is one or more blocks:
<<<<<<< SEARCH
exact text from the skill
=======
replacement text
>>>>>>> REPLACE
Each marker stands alone on its line, exactly as shown. Blocks apply in order; each SEARCH must match the current text exactly once (literally: no regular expressions, no escapes). Nothing changes unless every block applies.`

// maxQuote is roughly how much of a SEARCH text an error quotes.
const maxQuote = 200

// block is one parsed SEARCH/REPLACE block.
type block struct {
	search, replace string
	line            int // line of its "<<<<<<< SEARCH" in the patch, 1-based
}

// marker returns the marker a patch line is, or "".
func marker(line string) string {
	switch t := strings.TrimRight(line, " \t\r\n"); t {
	case markSearch, markDivider, markReplace:
		return t
	}
	return ""
}

// nearMarker reports whether a line looks like a marker but is not one
// (wrong count of '<', '=' or '>', lower case, leading space).
func nearMarker(line string) bool {
	t := strings.TrimSpace(line)
	return marker(line) == "" && (strings.HasPrefix(t, "<<<<<") || strings.HasPrefix(t, "=====") || strings.HasPrefix(t, ">>>>>"))
}

// parsePatch splits a patch into its blocks.
func parsePatch(patch string) ([]block, error) {
	const (
		outside = iota
		inSearch
		inReplace
	)
	var (
		blocks []block
		cur    block
		state  = outside
		buf    strings.Builder
		near   = 0 // first near-miss marker line inside the open block
	)
	lines := strings.SplitAfter(patch, "\n")
	for i, line := range lines {
		n := i + 1
		if line == "" { // after a final "\n"
			continue
		}
		m := marker(line)
		num := len(blocks) + 1
		switch state {
		case outside:
			switch {
			case m == markSearch:
				cur, state, near = block{line: n}, inSearch, 0
				buf.Reset()
			case m != "":
				return nil, fmt.Errorf("line %d: %q outside a block; a block starts with a %q line\n%s", n, m, markSearch, PatchFormat)
			case strings.TrimSpace(line) != "":
				hint := ""
				if nearMarker(line) {
					hint = fmt.Sprintf(" (it looks like a marker, but markers are exactly %q, %q and %q, alone on their line)", markSearch, markDivider, markReplace)
				}
				return nil, fmt.Errorf("line %d: text outside a SEARCH/REPLACE block: %s%s\n%s", n, quote(strings.TrimRight(line, "\r\n")), hint, PatchFormat)
			}
		case inSearch:
			switch m {
			case markDivider:
				cur.search, state = buf.String(), inReplace
				buf.Reset()
			case markSearch, markReplace:
				return nil, fmt.Errorf("block %d (line %d): %q at line %d before the %q line that ends SEARCH", num, cur.line, m, n, markDivider)
			default:
				if near == 0 && nearMarker(line) {
					near = n
				}
				buf.WriteString(line)
			}
		case inReplace:
			switch m {
			case markReplace:
				cur.replace, state = buf.String(), outside
				if cur.search == "" {
					return nil, fmt.Errorf("block %d (line %d): empty SEARCH; search for an existing line and repeat it in REPLACE together with the new text", num, cur.line)
				}
				blocks = append(blocks, cur)
			case markSearch:
				return nil, fmt.Errorf("block %d (line %d): %q at line %d before %q closed the block", num, cur.line, m, n, markReplace)
			case markDivider:
				return nil, fmt.Errorf("block %d (line %d): a second %q at line %d; a block has exactly one", num, cur.line, markDivider, n)
			default:
				if near == 0 && nearMarker(line) {
					near = n
				}
				buf.WriteString(line)
			}
		}
	}
	if state != outside {
		missing := markDivider
		if state == inReplace {
			missing = markReplace
		}
		hint := ""
		if near != 0 {
			hint = fmt.Sprintf("; line %d looks like a marker but is not exactly %q alone on its line", near, missing)
		}
		return nil, fmt.Errorf("block %d (line %d): unterminated, no %q line follows%s", len(blocks)+1, cur.line, missing, hint)
	}
	if len(blocks) == 0 {
		return nil, fmt.Errorf("no SEARCH/REPLACE blocks found\n%s", PatchFormat)
	}
	return blocks, nil
}

// applyPatch applies a patch to text and returns the new text, or an error
// naming the first block that failed (and then text is to stay as it was).
func applyPatch(text, patch string) (string, error) {
	if !strings.Contains(text, "\r") {
		// A client on Windows may send CRLF; the file has plain LF.
		patch = strings.ReplaceAll(patch, "\r\n", "\n")
	}
	blocks, err := parsePatch(patch)
	if err != nil {
		return "", err
	}
	cur := text
	for i, b := range blocks {
		num := i + 1
		at, more := find(cur, b.search, maxCounted)
		switch {
		case len(at) == 1:
			cur = cur[:at[0]] + b.replace + cur[at[0]+len(b.search):]
		case len(at) > 1:
			times := fmt.Sprint(len(at))
			if more {
				times = "more than " + times
			}
			return "", fmt.Errorf("block %d (line %d): SEARCH %s matches %s times (%s); include more surrounding lines so it matches exactly once",
				num, b.line, quote(b.search), times, lineList(cur, at, 5))
		default:
			// A SEARCH of whole lines may end in "\n" where the file's
			// last line has none.
			if s, ok := strings.CutSuffix(b.search, "\n"); ok && s != "" && strings.HasSuffix(cur, s) && !strings.HasSuffix(cur, "\n") {
				cur = cur[:len(cur)-len(s)] + strings.TrimSuffix(b.replace, "\n")
				continue
			}
			return "", fmt.Errorf("block %d (line %d): SEARCH %s matches nothing; %s",
				num, b.line, quote(b.search), noMatchHint(text, cur, b.search, num))
		}
	}
	return cur, nil
}

// maxCounted bounds how many matches of one SEARCH are counted: overlapping
// matches of a long SEARCH in repetitive text would otherwise cost
// quadratic time.
const maxCounted = 100

// find returns the offsets of the first max occurrences of s in text
// (overlapping ones included) and whether there are more.
func find(text, s string, max int) (at []int, more bool) {
	for start := 0; start <= len(text); {
		i := strings.Index(text[start:], s)
		if i < 0 {
			return at, false
		}
		if len(at) == max {
			return at, true
		}
		at = append(at, start+i)
		start += i + 1
	}
	return at, false
}

// lineList names the lines of the first limit offsets.
func lineList(text string, at []int, limit int) string {
	var lines []string
	for _, off := range at[:min(limit, len(at))] {
		lines = append(lines, fmt.Sprint(strings.Count(text[:off], "\n")+1))
	}
	out := "at lines " + strings.Join(lines, ", ")
	if len(at) > limit {
		out += ", …"
	}
	return out
}

// noMatchHint explains the likely reason a SEARCH matched nothing.
func noMatchHint(original, cur, search string, num int) string {
	if num > 1 && strings.Contains(original, search) {
		return "it matches the skill as it was before this patch, but an earlier block changed that text; blocks apply in order, so search for the text as the earlier blocks leave it"
	}
	if from, to, ok := looseMatch(cur, search); ok {
		lines := strings.Split(cur, "\n")[from-1 : to]
		return fmt.Sprintf("lines %d-%d match when white space at the start and end of lines is ignored; copy them exactly, indentation included. The skill has: %s",
			from, to, quote(strings.Join(lines, "\n")))
	}
	return "the SEARCH text must appear in the skill exactly as written; read the current source and copy the lines from it"
}

// looseMatch finds search in text comparing lines with surrounding white
// space trimmed, and returns the 1-based line range of the first match.
func looseMatch(text, search string) (from, to int, ok bool) {
	want := strings.Split(strings.TrimRight(search, "\r\n"), "\n")
	for i := range want {
		want[i] = strings.TrimSpace(want[i])
	}
	for len(want) > 0 && want[0] == "" {
		want = want[1:]
	}
	for len(want) > 0 && want[len(want)-1] == "" {
		want = want[:len(want)-1]
	}
	if len(want) == 0 {
		return 0, 0, false
	}
	have := strings.Split(text, "\n")
	for i := 0; i+len(want) <= len(have); i++ {
		match := true
		for j, w := range want {
			if strings.TrimSpace(have[i+j]) != w {
				match = false
				break
			}
		}
		if match {
			return i + 1, i + len(want), true
		}
	}
	return 0, 0, false
}

// quote quotes s for an error, cut to about maxQuote bytes.
func quote(s string) string {
	if len(s) <= maxQuote {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprintf("%q (%d bytes in all)", truncate(s, maxQuote), len(s))
}
