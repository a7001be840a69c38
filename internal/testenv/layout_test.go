package testenv

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// TestEveryPackageHasOneDoc keeps the layout readable: each folder of Go
// code says what it is for in exactly one package doc comment.
func TestEveryPackageHasOneDoc(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	docs := map[string][]string{}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules") && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			return err
		}
		dir := filepath.Dir(path)
		if _, ok := docs[dir]; !ok {
			docs[dir] = nil
		}
		if f.Doc != nil && strings.TrimSpace(f.Doc.Text()) != "" {
			rel, _ := filepath.Rel(root, path)
			docs[dir] = append(docs[dir], rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) < 10 {
		t.Fatalf("found only %d Go packages under %s; the walk is broken", len(docs), root)
	}
	for dir, files := range docs {
		rel, _ := filepath.Rel(root, dir)
		switch len(files) {
		case 0:
			t.Errorf("package %s has no package doc comment", rel)
		case 1:
		default:
			t.Errorf("package %s has %d package doc comments (%s); keep one", rel, len(files), strings.Join(files, ", "))
		}
	}
}
