package testenv

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestMissingSkipsByHandFailsUnderTestSh runs a test that lacks a
// dependency in a child process, once as ./test.sh does (strict) and once
// by hand: the first must fail, the second skip, both saying what is
// missing.
func TestMissingSkipsByHandFailsUnderTestSh(t *testing.T) {
	if os.Getenv("CODEFORGE_TESTENV_CHILD") == "1" {
		Missing(t, "the frobnicator is not installed: apt-get install frobnicator")
		t.Error("Missing returned")
		return
	}
	for _, strict := range []bool{true, false} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestMissingSkipsByHandFailsUnderTestSh$", "-test.v")
		cmd.Env = append(os.Environ(), "CODEFORGE_TESTENV_CHILD=1", StrictEnv+"=0")
		if strict {
			cmd.Env = append(cmd.Env, StrictEnv+"=1")
		}
		out, err := cmd.CombinedOutput()
		text := string(out)
		if !strings.Contains(text, "the frobnicator is not installed") {
			t.Errorf("strict=%v: the reason is not in the output:\n%s", strict, text)
		}
		switch {
		case strict && (err == nil || !strings.Contains(text, "--- FAIL")):
			t.Errorf("strict: the test did not fail (err %v):\n%s", err, text)
		case !strict && (err != nil || !strings.Contains(text, "--- SKIP")):
			t.Errorf("by hand: the test was not skipped (err %v):\n%s", err, text)
		}
	}
}
