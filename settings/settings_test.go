package settings

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func env(m map[string]string) Getenv {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestFromEnv(t *testing.T) {
	t.Parallel()
	got, err := FromEnv(env(map[string]string{
		"YOLO_MODE":                  "true",
		"DEBUG_MODE":                 " 1 ",
		"USER_AGENT":                 "codeforge/1",
		"REDACTING_STRINGS":          "alice@example.com, ,555-0100,",
		"PROXY_MAX_TUNNELS_PER_RUN":  "8",
		"PROXY_MAX_REQUESTS_PER_RUN": " 4 ",
	}))
	if err != nil {
		t.Fatal(err)
	}
	want := Common{YOLO: true, Debug: true, UserAgent: "codeforge/1", RedactingStrings: []string{"alice@example.com", "555-0100"},
		MaxTunnelsPerRun: 8, MaxRequestsPerRun: 4}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if got, err := FromEnv(env(nil)); err != nil || !reflect.DeepEqual(got, Common{}) {
		t.Errorf("empty environment: got %+v, %v; want zero settings", got, err)
	}
}

func TestFromEnvRejectsBadBooleans(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"YOLO_MODE", "DEBUG_MODE"} {
		_, err := FromEnv(env(map[string]string{name: "yes please"}))
		if err == nil || !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), "want true or false") {
			t.Errorf("%s=yes please: err %v; want one naming the variable and the accepted values", name, err)
		}
	}
}

func TestFromEnvRejectsBadCounts(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"PROXY_MAX_TUNNELS_PER_RUN", "PROXY_MAX_REQUESTS_PER_RUN"} {
		for _, v := range []string{"0", "-3", "many", "1.5"} {
			_, err := FromEnv(env(map[string]string{name: v}))
			if err == nil || !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), "at least 1") {
				t.Errorf("%s=%s: err %v; want one naming the variable and the accepted values", name, v, err)
			}
		}
	}
}

func TestLoadDotenvDoesNotOverride(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, ".env")
	if err := os.WriteFile(path, []byte("CF_TEST_A=from-file\nCF_TEST_B=from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("CF_TEST_A", "from-env")
	t.Setenv("CF_TEST_B", "")
	os.Unsetenv("CF_TEST_B")
	if err := LoadDotenv(path); err != nil {
		t.Fatal(err)
	}
	if a, b := os.Getenv("CF_TEST_A"), os.Getenv("CF_TEST_B"); a != "from-env" || b != "from-file" {
		t.Errorf("A=%q B=%q; want the environment to win and the file to fill the gap", a, b)
	}
	if err := LoadDotenv(filepath.Join(dir, "missing.env")); err != nil {
		t.Errorf("missing file: %v; want no error", err)
	}
	bad := filepath.Join(dir, "bad.env")
	if err := os.WriteFile(bad, []byte("A='unterminated\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := LoadDotenv(bad); err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("malformed file: err %v; want one naming the file", err)
	}
}

func TestNewLoggerLevels(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	NewLogger(&buf, false).Debug("hidden")
	NewLogger(&buf, true).Debug("shown")
	if out := buf.String(); strings.Contains(out, "hidden") || !strings.Contains(out, "shown") {
		t.Errorf("log output %q; want debug lines only with debug on", out)
	}
}
