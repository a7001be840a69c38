package testenv

import (
	"fmt"
	"os"
	"testing"
)

// StrictEnv is the environment variable ./test.sh sets to 1: with it, a
// test whose dependency (root, Deno, Docker, Node) is missing fails; without
// it, as when a developer runs `go test` by hand, the test is skipped with
// the reason and the way to get the dependency.
const StrictEnv = "CODEFORGE_TEST_STRICT"

// Strict reports whether missing test dependencies are failures
// (CODEFORGE_TEST_STRICT=1, as ./test.sh and CI set).
func Strict() bool {
	v := os.Getenv(StrictEnv)
	return v != "" && v != "0" && v != "false"
}

// Missing stops t because something it needs is missing: a failure under
// ./test.sh (CODEFORGE_TEST_STRICT=1), else a skip that says what is
// missing and how to get it. It never returns.
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if Strict() {
		t.Fatalf("%s\n(%s=1: a missing test dependency is a failure)", msg, StrictEnv)
	}
	t.Skipf("SKIP (missing dependency): %s\n(set %s=1, as ./test.sh does, to make this a failure)", msg, StrictEnv)
}

// Root stops t (see Missing) unless the test runs as root, giving why it
// needs to.
func Root(t testing.TB, why string) {
	t.Helper()
	if os.Geteuid() != 0 {
		Missing(t, "this test needs root (euid is %d): %s; run it as root, or run ./test.sh", os.Geteuid(), why)
	}
}
