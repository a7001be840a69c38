package server

import (
	"slices"
	"strings"
	"testing"

	"github.com/codeforge/codeforge/internal/testenv"
)

// TestServerImportsNoBackend keeps the MCP package apart from the
// composition root (internal/app): it consumes sandbox.Runner and
// gate.Gate and links neither the proxy (goproxy, iptables) nor a sandbox
// backend nor the Docker client.
func TestServerImportsNoBackend(t *testing.T) {
	t.Parallel()
	deps := testenv.Deps(t, "github.com/codeforge/codeforge/server")
	if !slices.Contains(deps, "github.com/modelcontextprotocol/go-sdk/mcp") {
		t.Fatalf("the dependency list lacks the MCP SDK; the listing is broken: %v", deps)
	}
	forbidden := []string{
		"github.com/elazarl/goproxy",
		"github.com/coreos/go-iptables/",
		"github.com/moby/moby/",
		"github.com/codeforge/codeforge/proxy/transparent",
		"github.com/codeforge/codeforge/dockerfilter",
		"github.com/codeforge/codeforge/internal/app",
		"github.com/codeforge/codeforge/sandbox/local",
		"github.com/codeforge/codeforge/sandbox/docker",
	}
	for _, d := range deps {
		for _, f := range forbidden {
			if d == strings.TrimSuffix(f, "/") || strings.HasPrefix(d, f) && strings.HasSuffix(f, "/") {
				t.Errorf("server depends on %s: wire backends in internal/app and give the server an interface instead", d)
			}
		}
		if d == "github.com/codeforge/codeforge/proxy" {
			t.Errorf("server depends on the proxy package; use proxy/gate")
		}
	}
}
