// Package sandbox defines how CodeForge runs untrusted TypeScript: the
// Runner interface, its request and result types, and the limits every
// backend enforces. Backends live in sub-packages (local, docker).
package sandbox

import (
	"context"
	"time"
)

// Runner runs one piece of code in a fresh, isolated Deno process.
// Implementations must be safe for concurrent use.
type Runner interface {
	// Run executes req.Code and returns what it printed. An error is
	// returned only when the run could not be attempted or the backend
	// failed (e.g. the sandbox container is gone); a program that exits
	// non-zero, times out or runs out of memory is a Result, not an error.
	Run(ctx context.Context, req Request) (*Result, error)
	// Env describes the filesystem and network the code sees, for the
	// instructions text.
	Env() Environment
	// Ready reports whether the backend can take runs now; a nil error means
	// ready. The error text says what is still missing ("starting: …").
	Ready(ctx context.Context) error
	Close() error
}

// DefaultPoolSize is how many warm Deno processes a backend keeps started
// for the next runs unless told otherwise (serve's --pool-size).
const DefaultPoolSize = 2

// Environment describes what a run sees, in the paths the code must use.
type Environment struct {
	Backend string // "local" or "docker"
	// ScratchNote says, in words for the instructions, where the code may
	// write temporary files (per run), e.g. "the current working directory
	// (Deno.cwd()), a fresh directory per run". It is prose, not a path.
	ScratchNote string
	SkillsDir   string // where skills are read and saved
	TypesDir    string // where types.d.ts files are readable, "" if none
	// OutDir is where code writes files to be kept with the run (the
	// scratch directory's out/, as the code sees it); "" when the backend
	// cannot hand files back (Request.OnOutDir is never called).
	OutDir string
}

// Request is one run.
type Request struct {
	Code    string
	Timeout time.Duration
	// Network: nil AllowHosts and !AllowAllHosts means no network at all.
	AllowHosts    []string // exact host names Deno may reach (--allow-net)
	AllowAllHosts bool     // YOLO mode: any host (still via the proxy)
	// ProxyURL is the run's own proxy identity, e.g.
	// http://run-abc:secret@127.0.0.1:3128 . Empty when the run has no network.
	ProxyURL string
	// ReadPaths are extra read-only files the code may read (types.d.ts).
	ReadPaths []string
	// MaxOutput caps stdout and stderr each, in bytes.
	MaxOutput int
	// OnStdoutLine, if set, is called for each complete stdout line as it
	// arrives (for logging notifications). Must not block for long.
	OnStdoutLine func(line string)
	// OnStderrLine is OnStdoutLine for stderr.
	OnStderrLine func(line string)
	// OnOutDir, if set, is called once the code has ended and before the
	// run's scratch directory is removed, with the server-side path of the
	// scratch directory's out/ subdirectory (which may not exist; a
	// backend whose scratch lives elsewhere copies its regular files into
	// a temporary directory first), and a note for each file the backend
	// did not copy. The code is gone by then: nothing writes there any
	// more. Backends whose Environment.OutDir is "" never call it.
	OnOutDir func(dir string, skipped []string)
	// OutMaxBytes is the most bytes of out/ files the caller keeps; a
	// backend that copies them stops copying there (0: its own default).
	OutMaxBytes int64
}

// Result is what a run produced.
type Result struct {
	Stdout       string
	Stderr       string
	ExitCode     int
	TimedOut     bool
	OutOfMemory  bool
	Truncated    bool  // stdout or stderr hit MaxOutput
	DroppedBytes int64 // bytes not kept because of MaxOutput
	Duration     time.Duration
}
