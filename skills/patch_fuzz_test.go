package skills

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// FuzzPatch checks that no patch panics, that a failed patch leaves the
// skill file byte-identical (content and mtime), and that a successful one
// writes exactly what it returns. Normal test runs execute the seeds only;
// fuzz with: go test ./skills -run '^$' -fuzz FuzzPatch -fuzztime 60s
func FuzzPatch(f *testing.F) {
	seeds := [][2]string{
		{"a\nb\nc\n", "<<<<<<< SEARCH\nb\n=======\nB\n>>>>>>> REPLACE\n"},
		{"a\nb\nb\n", "<<<<<<< SEARCH\nb\n=======\nB\n>>>>>>> REPLACE\n"},
		{"x\r\ny\r\n", "<<<<<<< SEARCH\r\ny\r\n=======\r\nz\r\n>>>>>>> REPLACE\r\n"},
		{"a\nb", "<<<<<<< SEARCH\nb\n=======\n$1\n>>>>>>> REPLACE"},
		{"a\n", "<<<<<<< SEARCH\na\n=======\n"},
		{"a\n", "<<<<<<< SEARCH\n=======\nx\n>>>>>>> REPLACE\n"},
		{"a\n", "text\n<<<<<<< SEARCH\na\n=======\nx\n>>>>>>> REPLACE\n"},
		{"  a\n", "<<<<<<< SEARCH\na\n\n=======\nx\n>>>>>>> REPLACE\n"},
		{"a\na\n", "<<<<<<< SEARCH\na\n=======\nb\n>>>>>>> REPLACE\n<<<<<<< SEARCH\na\n=======\nc\n>>>>>>> REPLACE\n"},
		{"aaaa\n", "<<<<<<< SEARCH\n\n=======\n\n>>>>>>> REPLACE\n"},
		{"\n", "<<<<<<< SEARCH\n\n=======\n>>>>>>> REPLACE\n"},
		{"é\n", "<<<<<<< SEARCH\né\n=======\n\xff\n>>>>>>> REPLACE\n"},
	}
	for _, s := range seeds {
		f.Add(s[0], s[1])
	}
	s := openStore(f)
	path := filepath.Join(s.Dir(), "fuzz.ts")
	old := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	f.Fuzz(func(t *testing.T, text, patch string) {
		out, err := applyPatch(text, patch)
		if err != nil && out != "" {
			t.Fatalf("applyPatch returned output with an error: %v", err)
		}
		if err == nil && !strings.Contains(patch, markSearch) {
			t.Fatalf("applyPatch succeeded without a block: %q", patch)
		}
		if checkSource(text) != nil {
			return // Write would refuse this text; the pure checks above suffice
		}
		if err := s.Write("fuzz", text); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path, old, old); err != nil {
			t.Fatal(err)
		}
		got, perr := s.Patch("fuzz", patch)
		disk, rerr := os.ReadFile(path)
		if rerr != nil {
			t.Fatal(rerr)
		}
		fi, _ := os.Stat(path)
		switch {
		case perr != nil:
			if string(disk) != text {
				t.Fatalf("failed patch (%v) changed the file to %q", perr, disk)
			}
			if !fi.ModTime().Equal(old) {
				t.Fatalf("failed patch (%v) rewrote the file", perr)
			}
		case err != nil:
			t.Fatalf("Store.Patch succeeded where applyPatch failed: %v", err)
		case got != out || string(disk) != out:
			t.Fatalf("Store.Patch returned %q, wrote %q; applyPatch gave %q", got, disk, out)
		}
	})
}
