package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

var wrapperOnce = sync.OnceValues(buildWrapper)

// WrapperBinary returns codeforge-run (./cmd/codeforge-run, the run
// wrapper of the sandbox image) built static from the repository's
// current source, once per test process.
func WrapperBinary(t testing.TB) string {
	t.Helper()
	p, err := wrapperOnce()
	if err != nil {
		t.Fatalf("build codeforge-run: %v", err)
	}
	return p
}

func buildWrapper() (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "cf-wrapper-")
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "codeforge-run")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", out, "./cmd/codeforge-run")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/codeforge-run: %v: %s", err, b)
	}
	return out, nil
}
