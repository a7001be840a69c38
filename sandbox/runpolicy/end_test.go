package runpolicy

import (
	"bytes"
	"strings"
	"testing"
)

// TestEndWriter: output reaches the writer byte for byte, however it is
// split, up to the run's own end line, which is taken out with whatever
// follows; an end line with another token, or a malformed one, is output.
func TestEndWriter(t *testing.T) {
	const token = "0123456789abcdef0123456789abcdef"
	end := EndPrefix + token + ":"
	cases := []struct {
		name, in, want string
		code           int
		out, ended     bool
	}{
		{"plain end", "1\n" + end + "0:0\n", "1\n", 0, false, true},
		{"exit code and out", "a" + end + "3:1\n", "a", 3, true, true},
		{"after the end is dropped", "x\n" + end + "0:0\nlate\n", "x\n", 0, false, true},
		{"no end", "no end line\n", "no end line\n", 0, false, false},
		{"another token", EndPrefix + strings.Repeat("f", 32) + ":0:0\nok\n", EndPrefix + strings.Repeat("f", 32) + ":0:0\nok\n", 0, false, false},
		{"malformed rest", end + "zz:0\nmore", end + "zz:0\nmore", 0, false, false},
		{"code out of range", end + "256:0\n", end + "256:0\n", 0, false, false},
		{"prefix then the real one", end + "x\n" + end + "1:0\n", end + "x\n", 1, false, true},
		{"held back tail at EOF", "out" + end[:7], "out" + end[:7], 0, false, false},
		{"endless rest", end + strings.Repeat("9", 40), end + strings.Repeat("9", 40), 0, false, false},
	}
	for _, tc := range cases {
		// Every split of the input into two writes, and one byte at a time.
		splits := [][]string{{tc.in}}
		for i := 1; i < len(tc.in); i++ {
			splits = append(splits, []string{tc.in[:i], tc.in[i:]})
		}
		bytewise := []string{}
		for i := range len(tc.in) {
			bytewise = append(bytewise, tc.in[i:i+1])
		}
		splits = append(splits, bytewise)
		for _, parts := range splits {
			var got bytes.Buffer
			w := NewEndWriter(&got, token)
			for _, p := range parts {
				if n, err := w.Write([]byte(p)); n != len(p) || err != nil {
					t.Fatalf("%s: Write = %d, %v", tc.name, n, err)
				}
			}
			w.Flush()
			e, ended := w.End()
			if tc.name == "after the end is dropped" && w.After() != "late\n" {
				t.Errorf("%s split %q: After = %q, want the line after the end", tc.name, parts, w.After())
			}
			if got.String() != tc.want || ended != tc.ended || e.ExitCode != tc.code || e.Out != tc.out {
				t.Errorf("%s split %q: wrote %q, end %+v %v; want %q, code %d out %v ended %v",
					tc.name, parts, got.String(), e, ended, tc.want, tc.code, tc.out, tc.ended)
				break
			}
			select {
			case <-w.Done():
				if !tc.ended {
					t.Errorf("%s: Done closed without an end line", tc.name)
				}
			default:
				if tc.ended {
					t.Errorf("%s: Done not closed after the end line", tc.name)
				}
			}
		}
	}
}

func TestCheckEndToken(t *testing.T) {
	tok, err := NewEndToken()
	if err != nil || CheckEndToken(tok) != nil {
		t.Fatalf("NewEndToken = %q, %v; check: %v", tok, err, CheckEndToken(tok))
	}
	for _, bad := range []string{"", strings.Repeat("A", 32), strings.Repeat("0", 31), strings.Repeat("0", 33), strings.Repeat("0", 31) + ":"} {
		if CheckEndToken(bad) == nil {
			t.Errorf("CheckEndToken(%q) accepted", bad)
		}
	}
}

// TestEndWatcher: a watcher passes every byte on, however split, and
// sees the end line of the token it watches for, set after output began.
func TestEndWatcher(t *testing.T) {
	const token = "0123456789abcdef0123456789abcdef"
	before := "\x06ready"
	after := "x\n" + EndPrefix + token + ":3:1\nwrapper line\n"
	for i := 0; i <= len(after); i++ {
		var got bytes.Buffer
		w := NewEndWatcher(&got)
		w.Write([]byte(before))
		w.Watch(token)
		w.Write([]byte(after[:i]))
		w.Write([]byte(after[i:]))
		w.Flush()
		e, ok := w.End()
		if got.String() != before+after || !ok || e.ExitCode != 3 || !e.Out {
			t.Fatalf("split at %d: passed %q, end %+v %v", i, got.String(), e, ok)
		}
	}
}
