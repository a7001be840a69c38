package sandbox

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/codeforge/codeforge/sandbox/output"
)

// NewResult is a run's result from its two closed output collectors,
// its exit code and how long it ran; the backend sets the rest.
func NewResult(stdout, stderr *output.Collector, exitCode int, d time.Duration) *Result {
	return &Result{
		Stdout:       stdout.String(),
		Stderr:       stderr.String(),
		ExitCode:     exitCode,
		Truncated:    stdout.Truncated() || stderr.Truncated(),
		DroppedBytes: stdout.Dropped() + stderr.Dropped(),
		Duration:     d,
	}
}

// v8OOMMarkers are what V8 prints when the heap cap is hit, before it aborts.
var v8OOMMarkers = [...]string{
	"Fatal JavaScript out of memory",
	"Fatal process out of memory",
	"Reached heap limit",
	"JavaScript heap out of memory",
}

// HasV8OOMMarker reports whether stderr (its tail is enough) holds V8's
// out-of-memory report. Backends combine it with how the process died:
// code can print the text, but cannot make itself die of a signal.
func HasV8OOMMarker(stderr string) bool {
	for _, m := range v8OOMMarkers {
		if strings.Contains(stderr, m) {
			return true
		}
	}
	return false
}

// NetworkMode describes a request's network reach for logs: "none", "all"
// or the allowed hosts.
func (r Request) NetworkMode() string {
	switch {
	case r.AllowAllHosts:
		return "all"
	case len(r.AllowHosts) > 0:
		return strings.Join(r.AllowHosts, ",")
	default:
		return "none"
	}
}

// NewRunID returns a random run id (16 hex digits), used for scratch
// directory names and log lines.
func NewRunID() (string, error) {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("run id: %w", err)
	}
	return hex.EncodeToString(b), nil
}
