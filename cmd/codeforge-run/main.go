//go:build linux

// Command codeforge-run is the run wrapper in the sandbox image (package
// sandbox/wrapper): the one program the Docker socket filter lets the
// server exec there. Build it static: CGO_ENABLED=0 go build -o
// bin/codeforge-run ./cmd/codeforge-run.
package main

import (
	"os"

	"github.com/codeforge/codeforge/sandbox/wrapper"
)

func main() {
	os.Exit(wrapper.Main(os.Args[1:]))
}
