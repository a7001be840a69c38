package server

import (
	"context"
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/codeforge/codeforge/sandbox/docker"
	"github.com/codeforge/codeforge/sandbox/docker/dockertest"
)

// TestRunsDockerBackend drives the run tools through the real server on
// the Docker backend: a real sandbox container behind a real socket
// filter. A background run writes an image and a CSV to out/; run_wait
// gives them back (inline and as a link), resources/read serves the CSV;
// cancel_run stops a run, and nothing of either is left in the sandbox.
func TestRunsDockerBackend(t *testing.T) {
	// Not parallel: it builds (a binary, an image) and would slow the
	// parallel tests that measure short timeouts.
	sb := dockertest.Start(t, dockertest.Options{})
	dr, err := docker.New(docker.Options{DockerHost: sb.FilterHost, Container: sb.Name})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dr.Close() })
	if err := dr.Ready(context.Background()); err != nil {
		t.Fatalf("docker Ready: %v", err)
	}
	h := newHarness(t, harnessConfig{backend: dr})
	if !strings.Contains(h.srv.Instructions(), "Files to hand back: write them to out/") {
		t.Fatalf("instructions do not teach out/ on the Docker backend")
	}

	code := `await Deno.mkdir("out");
await Deno.writeFile("out/dot.png", Uint8Array.from(atob("` + onePixelPNG + `"), (c) => c.charCodeAt(0)));
await Deno.writeTextFile("out/table.csv", "a,b\n1,2\n");
await new Promise((r) => setTimeout(r, 500));
console.log("made")`
	id := h.startBackground(t, code, "timeout", 60)
	res := h.call("run_wait", map[string]any{"id": id, "timeout": 60})
	if res.IsError || texts(res)[0] != "made\n" {
		t.Fatalf("run_wait: %q", allText(res))
	}
	var image *mcp.ImageContent
	var link *mcp.ResourceLink
	for _, c := range res.Content {
		switch c := c.(type) {
		case *mcp.ImageContent:
			image = c
		case *mcp.ResourceLink:
			link = c
		}
	}
	png, _ := base64.StdEncoding.DecodeString(onePixelPNG)
	if image == nil || image.MIMEType != "image/png" || string(image.Data) != string(png) {
		t.Fatalf("no inline PNG in %+v", res.Content)
	}
	if link == nil || link.URI != "run://"+id+"/files/table.csv" {
		t.Fatalf("CSV link = %+v", link)
	}
	read, err := h.session.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: link.URI})
	if err != nil || read.Contents[0].Text != "a,b\n1,2\n" {
		t.Fatalf("read %s = %+v, %v", link.URI, read, err)
	}

	// cancel_run stops a Docker run: the run's processes are gone.
	id = h.startBackground(t, `console.log("up"); while (true) {}`, "timeout", 120)
	waitFor(t, "the run to start", func() bool { return h.status(t, id)["stdout_bytes"] == float64(3) })
	res = h.call("cancel_run", map[string]any{"id": id})
	if res.IsError || structured(t, res)["state"] != "cancelled" {
		t.Fatalf("cancel_run: %q", allText(res))
	}
	waitFor(t, "nothing left in the sandbox", func() bool {
		for _, p := range sb.Processes(t) {
			if strings.Contains(p, "deno") {
				return false
			}
		}
		return strings.TrimSpace(sb.Exec(t, "sh", "-c", `for f in /tmp/runs/* /tmp/runs/.[!.]*; do [ -e "$f" ] && echo "$f"; done; true`)) == ""
	})
	if _, err := h.session.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: "run://" + id + "/files/x"}); err == nil {
		t.Fatal(errors.New("a cancelled run has files"))
	}
}
