package testenv

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// Deps returns the import paths pkg depends on, directly or not, as the
// go command lists them for the build (test files excluded). env adds
// variables such as GOOS=darwin.
func Deps(t testing.TB, pkg string, env ...string) []string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(goTool, "list", "-deps", pkg)
	cmd.Dir = root
	cmd.Env = append(cmd.Environ(), env...)
	out, err := cmd.Output()
	if err != nil {
		msg := ""
		if ee, ok := err.(*exec.ExitError); ok {
			msg = string(ee.Stderr)
		}
		t.Fatalf("go list -deps %s: %v\n%s", pkg, err, msg)
	}
	return strings.Fields(string(out))
}
