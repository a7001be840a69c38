package runs

import (
	"time"

	"github.com/codeforge/codeforge/proxy"
)

// Record is everything kept about a run: what it was asked to do, where it
// is, and what it produced (apart from its output and files, which the
// Store keeps beside it).
type Record struct {
	ID         string   `json:"id"`
	State      State    `json:"state"`
	Background bool     `json:"background"`
	CodeBytes  int      `json:"code_bytes"`
	APIs       []string `json:"apis,omitempty"`
	TimeoutMS  int64    `json:"timeout_ms"`

	Created time.Time `json:"created"`
	Started time.Time `json:"started,omitzero"`
	Ended   time.Time `json:"ended,omitzero"`

	ExitCode     int   `json:"exit_code"`
	TimedOut     bool  `json:"timed_out"`
	OutOfMemory  bool  `json:"out_of_memory"`
	Truncated    bool  `json:"truncated"`
	DroppedBytes int64 `json:"dropped_bytes"`
	// DurationMS is how long the code ran (not counting the queue).
	DurationMS int64 `json:"duration_ms"`
	// QueuedMS is how long the run waited for a free slot.
	QueuedMS int64 `json:"queued_ms"`
	// MaxOutput is the cap of each stream, for the truncation note.
	MaxOutput int `json:"max_output"`

	StdoutBytes int64 `json:"stdout_bytes"`
	StderrBytes int64 `json:"stderr_bytes"`

	Network []proxy.NetEntry `json:"network,omitempty"`
	Files   []File           `json:"files,omitempty"`
	// Notes are plain sentences the result shows after the output (a
	// network hint, files left out, the network log missing).
	Notes []string `json:"notes,omitempty"`
	// Error is set when the run did not produce a result of its own: it
	// could not start, the sandbox failed, it was cancelled or
	// interrupted. It is the text the agent sees.
	Error string `json:"error,omitempty"`
}

// File is one file a run left in out/.
type File struct {
	Name     string `json:"name"`
	MIMEType string `json:"mime_type"`
	Size     int64  `json:"size"`
}

// Size is the bytes the record holds in the store: output and files (the
// record itself is small beside them).
func (r *Record) Size() int64 {
	n := r.StdoutBytes + r.StderrBytes
	for _, f := range r.Files {
		n += f.Size
	}
	return n + 1024
}

// clone returns a copy that shares nothing mutable with r.
func (r *Record) clone() *Record {
	c := *r
	c.APIs = append([]string(nil), r.APIs...)
	c.Network = append([]proxy.NetEntry(nil), r.Network...)
	c.Files = append([]File(nil), r.Files...)
	c.Notes = append([]string(nil), r.Notes...)
	return &c
}
