package settings

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDotenvFollowsTheFile: a value added to .env is seen without a
// restart, the environment still wins, a broken edit keeps the values
// read before (and is reported), a missing file is no error.
func TestDotenvFollowsTheFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), ".env")
	write := func(content string, age time.Duration) {
		t.Helper()
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		// A distinct modification time per version, as edits minutes apart have.
		mt := time.Now().Add(-age)
		if err := os.Chtimes(path, mt, mt); err != nil {
			t.Fatal(err)
		}
	}
	base := func(name string) (string, bool) {
		if name == "FROM_ENV" {
			return "env-value", true
		}
		return "", false
	}
	var reported []error
	write("OLD=old\nFROM_ENV=file-value\n", 3*time.Hour)
	d, err := NewDotenv(base, path, func(err error) { reported = append(reported, err) })
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := d.Lookup("OLD"); v != "old" {
		t.Errorf("OLD = %q", v)
	}
	if v, _ := d.Lookup("FROM_ENV"); v != "env-value" {
		t.Errorf("FROM_ENV = %q; the process environment must win", v)
	}
	if _, ok := d.Lookup("NEW"); ok {
		t.Error("NEW is set before it is written")
	}
	write("OLD=old\nNEW=new-secret\n", 2*time.Hour)
	if v, ok := d.Lookup("NEW"); !ok || v != "new-secret" {
		t.Errorf("NEW = %q, %v after it was added to the file; want it without a restart", v, ok)
	}
	write("NEW='unterminated\n", time.Hour)
	if v, _ := d.Lookup("NEW"); v != "new-secret" {
		t.Errorf("NEW = %q after a broken edit; want the value read before", v)
	}
	if len(reported) != 1 || !strings.Contains(reported[0].Error(), path) {
		t.Errorf("reported %v; want one error naming the file", reported)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if _, ok := d.Lookup("NEW"); ok {
		t.Error("NEW still set after the file was removed")
	}
	if _, err := NewDotenv(base, filepath.Join(t.TempDir(), "missing.env"), nil); err != nil {
		t.Errorf("missing file: %v; want no error", err)
	}
	bad := filepath.Join(t.TempDir(), "bad.env")
	if err := os.WriteFile(bad, []byte("A='unterminated\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := NewDotenv(base, bad, nil); err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("malformed file at start: err %v; want one naming the file", err)
	}
}
