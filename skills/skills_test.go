package skills

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func openStore(t testing.TB) *Store {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "skills"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// dirNames lists every name in the store's directory, hidden ones included.
func dirNames(t *testing.T, s *Store) []string {
	t.Helper()
	des, err := os.ReadDir(s.Dir())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, de := range des {
		out = append(out, de.Name())
	}
	return out
}

func mustWrite(t *testing.T, s *Store, name, src string) {
	t.Helper()
	if err := s.Write(name, src); err != nil {
		t.Fatal(err)
	}
}

func TestOpen(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "a", "b")
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Dir() != dir {
		t.Errorf("Dir() = %q, want %q", s.Dir(), dir)
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		t.Fatalf("Open did not create %s: %v", dir, err)
	}
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o644)
	if _, err := Open(file); err == nil {
		t.Error("Open(a regular file) succeeded")
	}
}

func TestWriteRead(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	src := "// @description says hi\nconsole.log('hi')\n"
	mustWrite(t, s, "hello", src)
	got, err := s.Read("hello")
	if err != nil || got != src {
		t.Fatalf("Read = %q, %v", got, err)
	}
	fi, err := os.Stat(filepath.Join(s.Dir(), "hello.ts"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644", fi.Mode().Perm())
	}
	// Overwrite replaces.
	mustWrite(t, s, "hello", "console.log(2)\n")
	if got, _ := s.Read("hello"); got != "console.log(2)\n" {
		t.Errorf("after overwrite Read = %q", got)
	}
	if !s.Exists("hello") || s.Exists("nope") || s.Exists("../hello") {
		t.Error("Exists is wrong")
	}
	// Exactly MaxSize is allowed.
	mustWrite(t, s, "big", strings.Repeat("x", MaxSize))
	if names := dirNames(t, s); !slices.Equal(names, []string{"big.ts", "hello.ts"}) {
		t.Errorf("directory holds %v; want only the skills (no temporary files)", names)
	}
}

func TestWriteRejects(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	mustWrite(t, s, "keep", "console.log('keep')\n")
	tests := []struct{ name, src, want string }{
		{"../escape", "x", "path separator"},
		{"", "x", "the name is empty"},
		{"ok", strings.Repeat("x", MaxSize+1), "source is 1048577 bytes; the limit is 1048576 (1 MiB)"},
		{"ok", "bad \xff utf8", "source is not valid UTF-8"},
		{"ok", "a\x00b", "source contains a NUL byte (at byte 1)"},
		{"ok", " \n\t", "source is empty"},
		{"keep", "", "source is empty"},
	}
	for _, tc := range tests {
		err := s.Write(tc.name, tc.src)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Write(%q, %d bytes) = %v; want %q", tc.name, len(tc.src), err, tc.want)
		}
	}
	if names := dirNames(t, s); !slices.Equal(names, []string{"keep.ts"}) {
		t.Errorf("rejected writes left %v", names)
	}
	if got, _ := s.Read("keep"); got != "console.log('keep')\n" {
		t.Errorf("keep.ts changed to %q", got)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(s.Dir()), "escape.ts")); !os.IsNotExist(err) {
		t.Errorf("a write escaped the directory: %v", err)
	}
}

func TestWriteFailureLeavesNoTempFile(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	// A directory where the skill file should go makes the rename fail.
	if err := os.Mkdir(filepath.Join(s.Dir(), "blocked.ts"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := s.Write("blocked", "console.log(1)\n"); err == nil || !strings.Contains(err.Error(), "rename into place") {
		t.Fatalf("Write over a directory = %v", err)
	}
	if names := dirNames(t, s); !slices.Equal(names, []string{"blocked.ts"}) {
		t.Errorf("failed write left %v", names)
	}
}

func TestConcurrentWrites(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	var wg sync.WaitGroup
	srcs := make([]string, 16)
	for i := range srcs {
		srcs[i] = fmt.Sprintf("console.log(%d)\n", i)
		wg.Go(func() {
			if err := s.Write("shared", srcs[i]); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	got, err := s.Read("shared")
	if err != nil || !slices.Contains(srcs, got) {
		t.Errorf("after concurrent writes Read = %q, %v", got, err)
	}
	if names := dirNames(t, s); !slices.Equal(names, []string{"shared.ts"}) {
		t.Errorf("directory holds %v", names)
	}
}

func TestList(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	mustWrite(t, s, "zeta", "/**\n * @description Last one\n */\nexport {}\n")
	mustWrite(t, s, "Alpha", "console.log(1)\n")
	mustWrite(t, s, "mid-2", "// @description Middle\n")
	late := strings.Repeat("// filler line\n", 300) + "// @description too late\n" // beyond 4 KiB
	mustWrite(t, s, "late", late)
	dir := s.Dir()
	for name, content := range map[string]string{
		"bad name.ts":                   "x",
		"notes.txt":                     "x",
		".hidden.ts":                    "x",
		".zeta.ts.tmp-ABCDEF":           "x",
		strings.Repeat("x", 65) + ".ts": "x",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	os.Mkdir(filepath.Join(dir, "adir.ts"), 0o755)
	os.Symlink("zeta.ts", filepath.Join(dir, "link.ts"))
	when := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	os.Chtimes(filepath.Join(dir, "Alpha.ts"), when, when)

	got, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, sk := range got {
		names = append(names, sk.Name)
	}
	if !slices.Equal(names, []string{"Alpha", "late", "mid-2", "zeta"}) {
		t.Fatalf("List names = %v", names)
	}
	want := map[string]string{"Alpha": "", "late": "", "mid-2": "Middle", "zeta": "Last one"}
	for _, sk := range got {
		if sk.Description != want[sk.Name] {
			t.Errorf("%s: Description = %q, want %q", sk.Name, sk.Description, want[sk.Name])
		}
	}
	if got[0].Size != int64(len("console.log(1)\n")) || !got[0].ModTime.Equal(when) {
		t.Errorf("Alpha: Size %d ModTime %v", got[0].Size, got[0].ModTime)
	}
	if got[1].Size != int64(len(late)) {
		t.Errorf("late: Size %d", got[1].Size)
	}
}

func TestListEmpty(t *testing.T) {
	t.Parallel()
	got, err := openStore(t).List()
	if err != nil || len(got) != 0 {
		t.Errorf("List = %v, %v", got, err)
	}
}

func TestReadErrors(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	_, err := s.Read("ghost")
	if !errors.Is(err, ErrNotFound) || err.Error() != `skill not found: "ghost" (no skills are saved yet)` {
		t.Errorf("Read(ghost) on an empty store = %v", err)
	}
	mustWrite(t, s, "Report", "x\n")
	mustWrite(t, s, "other", "x\n")
	_, err = s.Read("report")
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), `names are case-sensitive; did you mean "Report"?`) {
		t.Errorf("Read(report) = %v", err)
	}
	_, err = s.Read("ghost")
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), `"ghost" (saved skills: Report, other)`) {
		t.Errorf("Read(ghost) = %v", err)
	}
	if _, err := s.Read("../../etc/passwd"); !errors.Is(err, ErrInvalidName) {
		t.Errorf("Read(traversal) = %v", err)
	}
	// A symlink is not a skill, even one that stays inside the directory.
	os.Symlink("other.ts", filepath.Join(s.Dir(), "alias.ts"))
	if _, err := s.Read("alias"); err == nil || !strings.Contains(err.Error(), "alias.ts is not a regular file") {
		t.Errorf("Read(symlink) = %v", err)
	}
	// A file the sandbox wrote directly may be too big.
	os.WriteFile(filepath.Join(s.Dir(), "huge.ts"), make([]byte, MaxSize+1), 0o644)
	if _, err := s.Read("huge"); err == nil || !strings.Contains(err.Error(), "larger than 1048576 bytes") {
		t.Errorf("Read(huge) = %v", err)
	}
}

func TestDelete(t *testing.T) {
	t.Parallel()
	parent := t.TempDir()
	s, err := Open(filepath.Join(parent, "skills"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	mustWrite(t, s, "gone", "x\n")
	mustWrite(t, s, "stays", "y\n")
	if err := s.Delete("gone"); err != nil {
		t.Fatal(err)
	}
	if s.Exists("gone") {
		t.Error("deleted skill still exists")
	}
	err = s.Delete("gone")
	if !errors.Is(err, ErrNotFound) || err.Error() != `skill not found: "gone" (saved skills: stays)` {
		t.Errorf("second Delete = %v", err)
	}
	outside := filepath.Join(parent, "victim.ts")
	os.WriteFile(outside, []byte("precious"), 0o644)
	for _, name := range []string{"../victim", "..", "/tmp/x", "a\x00b"} {
		if err := s.Delete(name); !errors.Is(err, ErrInvalidName) {
			t.Errorf("Delete(%q) = %v; want ErrInvalidName", name, err)
		}
	}
	if _, err := os.Stat(outside); err != nil {
		t.Errorf("file outside the directory was touched: %v", err)
	}
	os.Mkdir(filepath.Join(s.Dir(), "dir.ts"), 0o755)
	if err := s.Delete("dir"); err == nil || !strings.Contains(err.Error(), "is a directory") {
		t.Errorf("Delete(dir) = %v", err)
	}
}

func TestPatch(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, src, patch, want string }{
		{"one block",
			"const a = 1;\nconst b = 2;\n",
			"<<<<<<< SEARCH\nconst b = 2;\n=======\nconst b = 3;\n>>>>>>> REPLACE\n",
			"const a = 1;\nconst b = 3;\n"},
		{"several blocks, applied in order to the evolving text",
			"function f() {\n  return 1;\n}\nf();\n",
			"<<<<<<< SEARCH\n  return 1;\n=======\n  return 2;\n>>>>>>> REPLACE\n\n" +
				"<<<<<<< SEARCH\n  return 2;\n}\n=======\n  return 2 + x;\n}\n>>>>>>> REPLACE\n" +
				"<<<<<<< SEARCH\nf();\n=======\n>>>>>>> REPLACE\n",
			"function f() {\n  return 2 + x;\n}\n"},
		{"replacement is literal",
			"s.replace(/a/, 'b');\n",
			"<<<<<<< SEARCH\ns.replace(/a/, 'b');\n=======\ns.replace(/a/, '$1 $& $$ \\n \\\\ ${x}');\n>>>>>>> REPLACE",
			"s.replace(/a/, '$1 $& $$ \\n \\\\ ${x}');\n"},
		{"search is literal",
			"const re = /a.*b$/;\nconst x = 'a.*b';\n",
			"<<<<<<< SEARCH\nconst re = /a.*b$/;\n=======\nconst re = /c+/;\n>>>>>>> REPLACE\n",
			"const re = /c+/;\nconst x = 'a.*b';\n"},
		{"markers with trailing white space",
			"a\nb\n",
			"<<<<<<< SEARCH  \nb\n======= \t\nc\n>>>>>>> REPLACE\t\n",
			"a\nc\n"},
		{"CRLF patch on an LF file",
			"a\nb\nc\n",
			"<<<<<<< SEARCH\r\nb\r\nc\r\n=======\r\nB\r\nC\r\n>>>>>>> REPLACE\r\n",
			"a\nB\nC\n"},
		{"CRLF patch on a CRLF file",
			"a\r\nb\r\n",
			"<<<<<<< SEARCH\r\nb\r\n=======\r\nB\r\n>>>>>>> REPLACE\r\n",
			"a\r\nB\r\n"},
		{"last line without newline",
			"a\nlast();",
			"<<<<<<< SEARCH\nlast();\n=======\nfirst();\nlast();\n>>>>>>> REPLACE\n",
			"a\nfirst();\nlast();"},
		{"lines that look like markers are text",
			"x\n",
			"<<<<<<< SEARCH\nx\n=======\n======== not a marker\n<<<<<<<< SEARCH\n>>>>>>> REPLACE\n",
			"======== not a marker\n<<<<<<<< SEARCH\n"},
		{"no-op patch",
			"same\n",
			"<<<<<<< SEARCH\nsame\n=======\nsame\n>>>>>>> REPLACE\n",
			"same\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := openStore(t)
			mustWrite(t, s, "sk", tc.src)
			got, err := s.Patch("sk", tc.patch)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("Patch returned %q, want %q", got, tc.want)
			}
			if onDisk, _ := s.Read("sk"); onDisk != tc.want {
				t.Errorf("file holds %q, want %q", onDisk, tc.want)
			}
			if names := dirNames(t, s); !slices.Equal(names, []string{"sk.ts"}) {
				t.Errorf("directory holds %v", names)
			}
		})
	}
}

func TestPatchFailuresChangeNothing(t *testing.T) {
	t.Parallel()
	const src = "function greet(name) {\n    console.log('hi ' + name);\n}\ngreet('a');\ngreet('b');\ngreet('a');\n"
	block := func(search, replace string) string {
		return "<<<<<<< SEARCH\n" + search + "=======\n" + replace + ">>>>>>> REPLACE\n"
	}
	long := strings.Repeat("0123456789", 50) + "\n"
	tests := []struct {
		name, src, patch string
		want             []string
	}{
		{"empty patch", src, "", []string{"no SEARCH/REPLACE blocks found", "<<<<<<< SEARCH"}},
		{"only white space", src, "\n  \n", []string{"no SEARCH/REPLACE blocks found"}},
		{"prose instead of blocks", src, "please change greet\n", []string{`line 1: text outside a SEARCH/REPLACE block: "please change greet"`}},
		{"text between blocks", src, block("greet('b');\n", "x\n") + "and also\n" + block("x\n", "y\n"),
			[]string{`line 6: text outside a SEARCH/REPLACE block: "and also"`}},
		{"near-miss opening marker", src, "<<<<<<<< SEARCH\ngreet('b');\n=======\nx\n>>>>>>> REPLACE\n",
			[]string{`line 1: text outside a SEARCH/REPLACE block: "<<<<<<<< SEARCH" (it looks like a marker, but markers are exactly`}},
		{"divider outside a block", src, "=======\n", []string{`line 1: "=======" outside a block; a block starts with a "<<<<<<< SEARCH" line`}},
		{"replace marker outside a block", src, block("greet('b');\n", "x\n") + ">>>>>>> REPLACE\n",
			[]string{`line 6: ">>>>>>> REPLACE" outside a block`}},
		{"unterminated SEARCH", src, "<<<<<<< SEARCH\ngreet('b');\n", []string{`block 1 (line 1): unterminated, no "=======" line follows`}},
		{"unterminated REPLACE", src, block("greet('b');\n", "x\n") + "<<<<<<< SEARCH\nx\n=======\ny\n",
			[]string{`block 2 (line 6): unterminated, no ">>>>>>> REPLACE" line follows`}},
		{"unterminated with a near-miss closer", src, "<<<<<<< SEARCH\ngreet('b');\n=======\nx\n>>>>>>>> REPLACE\n",
			[]string{`block 1 (line 1): unterminated, no ">>>>>>> REPLACE" line follows; line 5 looks like a marker but is not exactly ">>>>>>> REPLACE" alone on its line`}},
		{"SEARCH twice", src, "<<<<<<< SEARCH\na\n<<<<<<< SEARCH\n", []string{`block 1 (line 1): "<<<<<<< SEARCH" at line 3 before the "=======" line that ends SEARCH`}},
		{"REPLACE before divider", src, "<<<<<<< SEARCH\na\n>>>>>>> REPLACE\n", []string{`block 1 (line 1): ">>>>>>> REPLACE" at line 3 before the "=======" line`}},
		{"second divider", src, "<<<<<<< SEARCH\na\n=======\nb\n=======\nc\n>>>>>>> REPLACE\n",
			[]string{`block 1 (line 1): a second "=======" at line 5; a block has exactly one`}},
		{"SEARCH inside REPLACE", src, "<<<<<<< SEARCH\na\n=======\nb\n<<<<<<< SEARCH\n",
			[]string{`block 1 (line 1): "<<<<<<< SEARCH" at line 5 before ">>>>>>> REPLACE" closed the block`}},
		{"empty SEARCH", src, block("", "x\n"), []string{`block 1 (line 1): empty SEARCH`}},
		{"no match", src, block("greet('z');\n", "x\n"),
			[]string{`block 1 (line 1): SEARCH "greet('z');\n" matches nothing; the SEARCH text must appear in the skill exactly as written`}},
		{"several matches", src, block("greet('a');\n", "x\n"),
			[]string{`block 1 (line 1): SEARCH "greet('a');\n" matches 2 times (at lines 4, 6); include more surrounding lines so it matches exactly once`}},
		{"overlapping matches", "x\nx\nx\n", block("x\nx\n", "y\n"), []string{`matches 2 times (at lines 1, 2)`}},
		{"many matches", strings.Repeat("x\n", 150), block("x\n", "y\n"),
			[]string{`matches more than 100 times (at lines 1, 2, 3, 4, 5, …)`}},
		{"indentation differs", src, block("\tconsole.log('hi ' + name);\n}\n", "x\n"),
			[]string{`matches nothing; lines 2-3 match when white space at the start and end of lines is ignored; copy them exactly, indentation included. The skill has: "    console.log('hi ' + name);\n}"`}},
		{"later block fails: all or nothing", src, block("greet('b');\n", "greet('c');\n") + block("greet('q');\n", "x\n"),
			[]string{`block 2 (line 6): SEARCH "greet('q');\n" matches nothing`}},
		{"earlier block changed the text", src, block("greet('b');\n", "greet('c');\n") + block("greet('b');\n", "x\n"),
			[]string{`block 2 (line 6): SEARCH "greet('b');\n" matches nothing; it matches the skill as it was before this patch, but an earlier block changed that text`}},
		{"long SEARCH is quoted in part", src, block(long, "x\n"),
			[]string{`(501 bytes in all) matches nothing`, `"` + long[:200] + `…"`}},
		{"result too large", src, block("greet('b');\n", strings.Repeat("y", MaxSize)+"\n"),
			[]string{fmt.Sprintf("the patched source is %d bytes; the limit is 1048576", len(src)+MaxSize+1-len("greet('b');\n"))}},
		{"result empty", "only\n", block("only\n", ""), []string{`the patched source is empty`}},
		{"patch not UTF-8", src, block("greet('b');\n", "\xff\n"), []string{`the patch is not valid UTF-8`}},
		{"patch with NUL", src, block("greet('b');\n", "\x00\n"), []string{`the patch contains a NUL byte`}},
		{"patch too large", src, strings.Repeat(" ", maxPatchSize+1), []string{`the patch is 2097153 bytes; the limit is 2097152`}},
	}
	old := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := openStore(t)
			mustWrite(t, s, "sk", tc.src)
			path := filepath.Join(s.Dir(), "sk.ts")
			if err := os.Chtimes(path, old, old); err != nil {
				t.Fatal(err)
			}
			before, _ := os.Stat(path)
			got, err := s.Patch("sk", tc.patch)
			if err == nil {
				t.Fatalf("Patch succeeded with %q; want an error", got)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, `patch skill "sk"`) {
				t.Errorf("error does not name the skill: %s", msg)
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error lacks %q:\n%s", w, msg)
				}
			}
			content, err := os.ReadFile(path)
			if err != nil || string(content) != tc.src {
				t.Errorf("file changed: %q, %v", content, err)
			}
			after, _ := os.Stat(path)
			if !after.ModTime().Equal(before.ModTime()) || !os.SameFile(before, after) {
				t.Errorf("file rewritten: mtime %v -> %v", before.ModTime(), after.ModTime())
			}
			if names := dirNames(t, s); !slices.Equal(names, []string{"sk.ts"}) {
				t.Errorf("directory holds %v", names)
			}
		})
	}
}

func TestPatchMissingAndInvalid(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	patch := "<<<<<<< SEARCH\na\n=======\nb\n>>>>>>> REPLACE\n"
	if _, err := s.Patch("ghost", patch); !errors.Is(err, ErrNotFound) {
		t.Errorf("Patch(ghost) = %v; want ErrNotFound", err)
	}
	if _, err := s.Patch("../x", patch); !errors.Is(err, ErrInvalidName) {
		t.Errorf("Patch(../x) = %v; want ErrInvalidName", err)
	}
	if names := dirNames(t, s); len(names) != 0 {
		t.Errorf("directory holds %v", names)
	}
}

func TestFingerprint(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	fp := func() string {
		t.Helper()
		f, err := s.Fingerprint()
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	empty := fp()
	if empty != fp() {
		t.Fatal("fingerprint of an unchanged empty store differs")
	}
	mustWrite(t, s, "one", "console.log(1)\n")
	added := fp()
	if added == empty {
		t.Error("adding a skill did not change the fingerprint")
	}
	if added != fp() {
		t.Error("fingerprint of an unchanged store differs")
	}

	// Same size and same mtime: only the content hash can tell.
	path := filepath.Join(s.Dir(), "one.ts")
	fi, _ := os.Stat(path)
	mustWrite(t, s, "one", "console.log(2)\n")
	os.Chtimes(path, fi.ModTime(), fi.ModTime())
	changed := fp()
	if changed == added {
		t.Error("changing the content (same size and mtime) did not change the fingerprint")
	}

	// Only the mtime changes.
	later := fi.ModTime().Add(time.Hour)
	os.Chtimes(path, later, later)
	touched := fp()
	if touched == changed {
		t.Error("changing the mtime did not change the fingerprint")
	}

	// Files that are not skills do not count.
	os.WriteFile(filepath.Join(s.Dir(), "notes.txt"), []byte("x"), 0o644)
	os.WriteFile(filepath.Join(s.Dir(), ".tmp.ts"), []byte("x"), 0o644)
	if fp() != touched {
		t.Error("a non-skill file changed the fingerprint")
	}

	mustWrite(t, s, "two", "x\n")
	if f := fp(); f == touched {
		t.Error("adding a second skill did not change the fingerprint")
	}
	if err := s.Delete("two"); err != nil {
		t.Fatal(err)
	}
	if f := fp(); f != touched {
		t.Error("deleting the added skill did not restore the fingerprint")
	}
	if err := s.Delete("one"); err != nil {
		t.Fatal(err)
	}
	if f := fp(); f != empty {
		t.Error("deleting every skill did not restore the empty fingerprint")
	}
}

// BenchmarkFingerprint measures Fingerprint over 300 skills of 2 KiB, the
// upper end of a skills directory, since the server calls it after each run.
func BenchmarkFingerprint(b *testing.B) {
	s := openStore(b)
	const n = 300
	src := strings.Repeat("console.log('a line of a skill');\n", 60)
	for i := range n {
		if err := s.Write(fmt.Sprintf("skill-%03d", i), src); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for b.Loop() {
		if _, err := s.Fingerprint(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/call")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/skill")
}

// BenchmarkList measures List (which reads each skill's first 4 KiB).
func BenchmarkList(b *testing.B) {
	s := openStore(b)
	const n = 300
	src := "// @description a benchmark skill\n" + strings.Repeat("console.log(1);\n", 100)
	for i := range n {
		if err := s.Write(fmt.Sprintf("skill-%03d", i), src); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		if _, err := s.List(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/call")
}
