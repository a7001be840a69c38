package server

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/codeforge/codeforge/internal/testenv"
)

// conformanceScenarios are the scenarios of the official MCP conformance
// suite that apply to any server; the others expect the suite's own
// fixture tools, resources and prompts.
var conformanceScenarios = []string{
	"server-initialize",
	"ping",
	"logging-set-level",
	"tools-list",
	"completion-complete",
	"resources-list",
	"prompts-list",
	"server-sse-multiple-streams",
	"dns-rebinding-protection",
}

// TestMCPConformance runs the official conformance suite
// (@modelcontextprotocol/conformance, a client written against the spec,
// not against go-sdk) over HTTP against the real server.
func TestMCPConformance(t *testing.T) {
	t.Parallel()
	cli := testenv.Conformance(t)
	h := newHarness(t, harnessConfig{noClient: true})
	writeFile(t, h.skillsDir+"/greet.ts", "// @description says hello\nconsole.log('hello')\n")
	for _, scenario := range conformanceScenarios {
		t.Run(scenario, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			args := append(cli[1:], "server", "--url", h.hs.URL+"/mcp", "--scenario", scenario)
			out, err := exec.CommandContext(ctx, cli[0], args...).CombinedOutput()
			if err != nil || !strings.Contains(string(out), " 0 failed") {
				t.Errorf("scenario %s: %v\n%s", scenario, err, out)
			}
		})
	}
}
