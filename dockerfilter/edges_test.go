package dockerfilter

import (
	"net/http"
	"slices"
	"strings"
	"testing"
)

// envWithTimeout is validEnv with CODEFORGE_TIMEOUT set to v.
func envWithTimeout(v string) []string {
	var env []string
	for _, e := range validEnv {
		if !strings.HasPrefix(e, "CODEFORGE_TIMEOUT=") {
			env = append(env, e)
		}
	}
	return append(env, "CODEFORGE_TIMEOUT="+v)
}

// TestRunTimeoutBounds pins both ends of CODEFORGE_TIMEOUT: above 0 and at
// most maxTimeoutSeconds (a day), also where the pattern alone would let a
// larger number through (5 digits allow 99999).
func TestRunTimeoutBounds(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"0.001", "1", "5", "86399.999", "86400", "86400.0", "86400.000"} {
		if err := CheckRunEnv(envWithTimeout(v)); err != nil {
			t.Errorf("CODEFORGE_TIMEOUT=%s refused: %v", v, err)
		}
	}
	for _, v := range []string{"0", "0.0", "0.000", "86400.001", "86401", "90000", "99999", "99999.999", "-1", "1e3", "", " 5"} {
		err := CheckRunEnv(envWithTimeout(v))
		if err == nil {
			t.Errorf("CODEFORGE_TIMEOUT=%q accepted", v)
			continue
		}
		if !strings.Contains(err.Error(), "CODEFORGE_TIMEOUT") {
			t.Errorf("CODEFORGE_TIMEOUT=%q: error %q does not name the variable", v, err)
		}
	}
	// The rebuilt environment keeps the value as given, in its fixed place.
	out, d := checkRunEnv(envWithTimeout("86400"))
	if d != nil || !slices.Contains(out, "CODEFORGE_TIMEOUT=86400") || out[1] != "CODEFORGE_TIMEOUT=86400" {
		t.Errorf("rebuilt env = %q (%v)", out, d)
	}
}

// TestRunTimeoutAboveADayRefusedByTheFilter sends a run whose timeout is
// over a day through the real filter: 403, and no exec appears.
func TestRunTimeoutAboveADayRefusedByTheFilter(t *testing.T) {
	tf := sandboxFilter(t)
	real := realClient(t)
	for _, v := range []string{"86401", "99999", "86400.5"} {
		before := execIDs(t, real, shared.sandboxID)
		resp := rawRequest(t, tf.socket, createHead, createBody(t, replaceEnv("CODEFORGE_TIMEOUT", v)))
		assertRefused(t, resp, "timeout "+v)
		if strings.Contains(resp.body, "s3cretvalue") {
			t.Errorf("timeout %s: the refusal echoes the run's proxy credential: %s", v, resp.body)
		}
		if after := execIDs(t, real, shared.sandboxID); !slices.Equal(before, after) {
			t.Errorf("timeout %s: execs on the sandbox changed: %v -> %v", v, before, after)
		}
	}
	// Control: exactly a day is accepted and creates one exec.
	before := execIDs(t, real, shared.sandboxID)
	resp := rawRequest(t, tf.socket, createHead, createBody(t, replaceEnv("CODEFORGE_TIMEOUT", "86400")))
	if resp.status != http.StatusCreated {
		t.Fatalf("timeout of exactly a day: status %d (%s), want 201", resp.status, resp.body)
	}
	if after := execIDs(t, real, shared.sandboxID); len(after) != len(before)+1 {
		t.Errorf("timeout of a day: execs %d -> %d, want one more", len(before), len(after))
	}
}
