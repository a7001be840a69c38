package settings

import (
	"io/fs"
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

// A process that gives up root after starting (the transparent-mode proxy)
// may no longer open .env by its path; a reload still reads it, in-place
// edits included, through the descriptor opened at the start — but only
// while that is the file at the path: a new file there is refused with a
// message naming the fix.
func TestDotenvReadsAgainAfterDroppingPrivileges(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), ".env")
	if err := os.WriteFile(path, []byte("OLD=old\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var reported []error
	d, err := NewDotenv(func(string) (string, bool) { return "", false }, path, func(err error) { reported = append(reported, err) })
	if err != nil {
		t.Fatal(err)
	}
	// From now on the process may not open the file (as after setuid).
	d.open = func(name string) (*os.File, error) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrPermission}
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("NEW=appended\n"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	bump(t, path, time.Hour)
	if v, ok := d.Lookup("NEW"); !ok || v != "appended" {
		t.Errorf("NEW = %q, %v after an in-place edit; want it read through the descriptor opened at the start (reported %v)", v, ok, reported)
	}
	if v, _ := d.Lookup("OLD"); v != "old" {
		t.Errorf("OLD = %q", v)
	}

	// Replaced: the held descriptor is another file now.
	next := path + ".new"
	if err := os.WriteFile(next, []byte("NEW=replaced\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(next, path); err != nil {
		t.Fatal(err)
	}
	bump(t, path, 30*time.Minute)
	if v, _ := d.Lookup("NEW"); v != "appended" {
		t.Errorf("NEW = %q after the file was replaced by one this process may not open; want the values read before", v)
	}
	if len(reported) != 1 || !strings.Contains(reported[0].Error(), "may not read it") || !strings.Contains(reported[0].Error(), "CODEFORGE_ENV_GID") {
		t.Errorf("reported %v; want one permission error naming the fix", reported)
	}
}

// bump gives path a modification time of its own (now minus age), as
// edits minutes apart have.
func bump(t *testing.T, path string, age time.Duration) {
	t.Helper()
	mt := time.Now().Add(-age)
	if err := os.Chtimes(path, mt, mt); err != nil {
		t.Fatal(err)
	}
}
